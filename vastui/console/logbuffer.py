"""The log view's model: a bounded buffer of (source, line) with a source filter, character
wrapping, search and follow state. Pure Python (no Textual): `logview.py` draws it, and
`logtext.py` says what a line is (cleaning, classification, width, wrapping).

Lines are kept in chunks, one per append (a run of lines of one source), not one object per
line: a stream appends a read's thousands of lines as one list, the bound drops whole chunks
from the front, and a line is found by its position with a bisect over the chunks. Each line
has a sequence number (its chunk's first plus its offset), which keys wrapped rows, matches
and the view's render cache.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from vastui.console.logchunks import Chunk, Shown, entries_of
from vastui.console.logtext import (
    PREFIX_WIDTH,
    Entry,
    Match,
    Row,
    clean,
    clean_batch,
    text_width,
    wrap_entry,
)

__all__ = ["DEFAULT_MAX_LINES", "Ingested", "LogBuffer"]

DEFAULT_MAX_LINES = 20_000


def _row_key(row: Row) -> tuple[int, int]:
    return row[0][0], row[1]


class Ingested(NamedTuple):
    shown: int  # lines added to what is shown (after the source filter)
    rows_removed: int  # shown rows that left the top with old lines (to keep a reader's place)


class LogBuffer:
    """Lines of several sources, bounded by `max_lines`, as a log view shows them: filtered by
    source, wrapped to a width, searched, and followed (or paused, counting what arrives).

    `epoch` changes whenever lines already drawn would look different (the query, the current
    match, the source tags): a view keeps what it rendered while `epoch` stays the same."""

    def __init__(self, max_lines: int = DEFAULT_MAX_LINES) -> None:
        if max_lines < 1:
            raise ValueError("max_lines must be positive")
        self._max_lines = max_lines
        self._chunks: deque[Chunk] = deque()
        self._size = 0
        self._seq = 0
        self._received = 0
        self._seen_sources: set[str] = set()
        self._visible: frozenset[str] | None = None
        self._shown = Shown()
        self._show_prefix = False
        self._max_width = 0
        self._wrap = False
        self._rows: list[Row] = []
        self._rows_width = 0  # width the rows were wrapped for; 0 = stale
        self._query = ""
        self._pattern: re.Pattern[str] | None = None
        self._matches: list[Match] = []
        self._match_spans: dict[int, list[tuple[int, int]]] = {}
        self._current = -1
        self.following = True
        self.pending_new = 0
        self.epoch = 0

    # ------------------------------------------------------------------ what it holds

    @property
    def max_lines(self) -> int:
        return self._max_lines

    @property
    def buffered(self) -> int:
        """Lines held (all sources), at most `max_lines`."""
        return self._size

    @property
    def total_received(self) -> int:
        """Lines appended since the last `clear`/`reset`, dropped ones included."""
        return self._received

    @property
    def sources(self) -> frozenset[str] | None:
        """The source filter (None: all sources merged)."""
        return self._visible

    @property
    def shows_prefix(self) -> bool:
        """Whether lines carry a source tag (several sources shown)."""
        return self._show_prefix

    @property
    def prefix_width(self) -> int:
        return PREFIX_WIDTH if self._show_prefix else 0

    @property
    def line_count(self) -> int:
        """Lines shown (after the source filter)."""
        return len(self._shown)

    @property
    def max_width(self) -> int:
        """Cells of the widest line shown."""
        return self._max_width

    @property
    def lines(self) -> list[str]:
        """The texts of the shown lines, oldest first (a copy)."""
        return list(self._shown.texts())

    def entry(self, index: int) -> Entry | None:
        """The shown line at `index` (0: the oldest)."""
        if not 0 <= index < len(self._shown):
            return None
        chunk, offset = self._shown.locate(index)
        return (chunk.seq + offset, chunk.source, chunk.texts[offset])

    def index_of(self, seq: int) -> int:
        """The index of the shown line with sequence number `seq`."""
        return self._shown.index_of(seq)

    # ------------------------------------------------------------------ ingest

    def append(self, source: str, lines: Sequence[str]) -> Ingested:
        """Add lines of one source (plain text, never markup): one chunk, or the end of the
        last one when it is the same source's."""
        count = len(lines)
        if not count:
            return Ingested(0, 0)
        self._received += count
        if count > self._max_lines:  # only the tail can survive the bound
            self._seq += count - self._max_lines
            lines = lines[count - self._max_lines :]
        texts, width = clean_batch(lines)
        return self._ingest(source, texts, width)

    def reset(self, lines: Sequence[tuple[str, str]]) -> None:
        """Replace everything with `(source, text)` lines, oldest first (a merged log put back
        in time order when an older batch arrived after newer lines). What the reader holds
        stays: a paused view stays paused (the lines it gained counted as new), and the current
        match stays the same match, found again by its line and place in it."""
        following, pending, before = self.following, self.pending_new, self.line_count
        anchor = self._match_anchor()
        self._clear_lines()
        tail = lines[-self._max_lines :]
        self._seq = len(lines) - len(tail)
        start = 0
        while start < len(tail):  # one chunk per run of one source
            source = tail[start][0]
            end = start
            while end < len(tail) and tail[end][0] == source:
                end += 1
            texts = [clean(text) for _, text in tail[start:end]]
            self._ingest(source, texts, max(map(text_width, texts)))
            start = end
        self._received = len(lines)
        if following:
            self.resume()
        else:
            self.following = False
            self.pending_new = pending + max(0, self.line_count - before)
        if anchor is not None:
            self._current = self._find_anchor(anchor)

    def _match_anchor(self) -> tuple[str, str, int, int] | None:
        """The current match as (source, text, start, how many equal ones come before it)."""
        match = self.current()
        if match is None:
            return None
        key = self._match_key(match)
        if key is None:
            return None
        earlier = sum(1 for m in self._matches[: self._current] if self._match_key(m) == key)
        return (*key, earlier)

    def _match_key(self, match: Match) -> tuple[str, str, int] | None:
        entry = self.entry(self._shown.index_of(match[0]))
        return None if entry is None else (entry[1], entry[2], match[1])

    def _find_anchor(self, anchor: tuple[str, str, int, int]) -> int:
        """The index of the anchored match after a rebuild (the first match when it is gone,
        as a new search starts)."""
        key, earlier = anchor[:3], anchor[3]
        seen = 0
        for index, match in enumerate(self._matches):
            if self._match_key(match) == key:
                if seen == earlier:
                    return index
                seen += 1
        return 0 if self._matches else -1

    def clear(self) -> None:
        """Drop every line (the search query and source filter stay), and follow."""
        self._clear_lines()
        self.resume()

    def set_sources(self, visible: Iterable[str] | None) -> None:
        """Show only these sources (None: all sources merged)."""
        self._visible = None if visible is None else frozenset(visible)
        self._reshow()

    def _clear_lines(self) -> None:
        self._chunks.clear()
        self._size = 0
        self._received = 0
        self._seen_sources = set()
        self._shown = Shown()
        self._max_width = 0
        self._rows = []
        self._rows_width = 0
        self._matches = []
        self._match_spans = {}
        self._current = -1
        self._update_prefix()
        self.epoch += 1

    def _reshow(self) -> None:
        """Rebuild what is shown from the buffer (the filter changed)."""
        self._shown = Shown()
        self._max_width = 0
        for chunk in self._chunks:
            if self._is_shown(chunk.source):
                self._shown.add(chunk, len(chunk.texts), extended=False)
                self._max_width = max(self._max_width, max(map(text_width, chunk.texts)))
        self._update_prefix()
        self._rows_width = 0
        self._rescan()
        self.epoch += 1

    def _is_shown(self, source: str) -> bool:
        return self._visible is None or source in self._visible

    def _ingest(self, source: str, texts: list[str], width: int) -> Ingested:
        base = self._seq + 1
        self._seq += len(texts)
        last = self._chunks[-1] if self._chunks else None
        extended = last is not None and last.source == source and last.seq + len(last.texts) == base
        if extended:
            assert last is not None
            last.texts.extend(texts)
            chunk = last
        else:
            chunk = Chunk(base, source, texts)
            self._chunks.append(chunk)
        self._size += len(texts)
        if source not in self._seen_sources:
            self._seen_sources.add(source)
            self._update_prefix()
        shown = self._is_shown(source)
        if shown:
            was_last = bool(self._shown.chunks) and self._shown.chunks[-1] is chunk
            self._shown.add(chunk, len(texts), extended=extended and was_last)
        removed = self._trim()
        count = len(texts) if shown else 0
        if count:
            fresh = (chunk.seq + len(chunk.texts) - len(texts), source, texts)
            self._max_width = max(self._max_width, width)
            if self._wrap and self._rows_width:
                for entry in entries_of(*fresh):
                    self._rows.extend(wrap_entry(entry, self._rows_width))
            if self._pattern is not None:
                self._scan(entries_of(*fresh))
        if not self.following:
            self.pending_new += count
        return Ingested(count, removed)

    def _trim(self) -> int:
        """Drop the oldest lines beyond the bound; the shown rows that went with them."""
        excess = self._size - self._max_lines
        if excess <= 0:
            return 0
        chunks = self._chunks
        while excess and len(chunks[0].texts) <= excess:
            gone = chunks.popleft()
            excess -= len(gone.texts)
            self._size -= len(gone.texts)
        if excess:
            head = chunks[0]
            del head.texts[:excess]
            head.seq += excess
            self._size -= excess
        first = chunks[0].seq if chunks else self._seq + 1
        removed = self._shown.trim_before(first)
        if self._wrap and self._rows_width and self._rows and self._rows[0][0][0] < first:
            cut = bisect_left(self._rows, (first, 0), key=_row_key)
            del self._rows[:cut]
            removed = cut
        if self._matches and self._matches[0][0] < first:
            cut = bisect_left(self._matches, (first, -1, -1))
            for seq, _, _ in self._matches[:cut]:
                self._match_spans.pop(seq, None)
            del self._matches[:cut]
            current = self._current - cut
            if current < 0:  # the current match left with the old lines
                current = 0 if self._matches else -1
                self.epoch += 1
            self._current = current
        return removed

    def _update_prefix(self) -> None:
        shown_sources = self._seen_sources if self._visible is None else self._visible
        show = len(shown_sources) > 1
        if show != self._show_prefix:
            self._show_prefix = show
            self._rows_width = 0
            self.epoch += 1

    # ------------------------------------------------------------------ rows (wrapping)

    @property
    def wrap(self) -> bool:
        return self._wrap

    def set_wrap(self, wrap: bool) -> None:
        self._wrap = wrap
        self._rows_width = 0
        self.epoch += 1

    def wrap_width(self, content_width: int) -> int:
        """Cells a wrapped row has in a viewport `content_width` wide (after the tag)."""
        return max(1, content_width - self.prefix_width)

    def rows_stale(self, content_width: int) -> bool:
        """Wrapped, and the rows are not (yet) wrapped for this width."""
        return self._wrap and self._rows_width != self.wrap_width(content_width)

    def wrap_rows(self, content_width: int) -> None:
        """Wrap the shown lines for a viewport `content_width` wide (when wrapping and stale)."""
        if not self._wrap or content_width <= 0:
            return
        width = self.wrap_width(content_width)
        if self._rows_width != width:
            rows: list[Row] = []
            for entry in self._shown.entries():
                rows.extend(wrap_entry(entry, width))
            self._rows = rows
            self._rows_width = width

    def _wrapped(self) -> bool:
        return self._wrap and self._rows_width != 0

    def row_count(self) -> int:
        return len(self._rows) if self._wrapped() else len(self._shown)

    def row(self, index: int) -> Row | None:
        """The row at `index`: a wrapped piece of a line, or (not wrapping) a whole line."""
        if self._wrapped():
            return self._rows[index] if 0 <= index < len(self._rows) else None
        entry = self.entry(index)
        return None if entry is None else (entry, 0, len(entry[2]))

    def row_of(self, seq: int, start: int) -> int:
        """The row that shows character `start` of the line with sequence number `seq`."""
        if self._wrapped():
            return max(0, bisect_right(self._rows, (seq, start), key=_row_key) - 1)
        return self._shown.index_of(seq)

    def entry_at_row(self, row: int) -> Entry | None:
        found = self.row(row)
        return None if found is None else found[0]

    # ------------------------------------------------------------------ search

    @property
    def query(self) -> str:
        """The active search query ('' when not searching)."""
        return self._query

    @property
    def match_count(self) -> int:
        return len(self._matches)

    @property
    def current_match(self) -> int:
        """Index of the current match, -1 for none."""
        return self._current

    def match(self, index: int) -> Match | None:
        return self._matches[index] if 0 <= index < len(self._matches) else None

    def spans(self, seq: int) -> list[tuple[int, int]] | None:
        """The matches in the line with sequence number `seq`, as (start, end)."""
        return self._match_spans.get(seq)

    def current(self) -> Match | None:
        return self.match(self._current)

    def set_query(self, query: str) -> None:
        """Find case-insensitive matches of `query` ('' clears); the first is current."""
        self._query = query
        self._pattern = re.compile(re.escape(query), re.IGNORECASE) if query else None
        self._rescan()
        self.epoch += 1

    def select(self, index: int) -> None:
        """Make match `index` current (-1: none)."""
        if index != self._current:
            self._current = index
            self.epoch += 1

    def step(self, step: int) -> int | None:
        """The match `step` away from the current one, wrapping around (None: no matches)."""
        if not self._matches:
            return None
        if self._current < 0:
            return 0 if step > 0 else len(self._matches) - 1
        return (self._current + step) % len(self._matches)

    def nearest_match(self, top_row: int, bottom_row: int) -> int:
        """A match shown between these rows, else the nearest above (logs are read upwards);
        -1 with no matches."""
        if not self._matches:
            return -1
        last = self.entry(len(self._shown) - 1)
        if last is None:
            return len(self._matches) - 1
        top = self.entry_at_row(top_row) or last
        bottom = self.entry_at_row(min(bottom_row, self.row_count() - 1)) or last
        index = bisect_left(self._matches, (top[0], -1, -1))
        if index < len(self._matches) and self._matches[index][0] <= bottom[0]:
            return index
        return index - 1 if index > 0 else 0

    def _rescan(self) -> None:
        self._matches = []
        self._match_spans = {}
        if self._pattern is not None:
            self._scan(self._shown.entries())
        self._current = 0 if self._matches else -1

    def _scan(self, entries: Iterable[Entry]) -> None:
        assert self._pattern is not None
        finditer = self._pattern.finditer
        search = self._pattern.search
        matches = self._matches
        spans = self._match_spans
        for seq, _, text in entries:
            if search(text) is None:  # most lines: one search, no match objects
                continue
            found = [(m.start(), m.end()) for m in finditer(text)]
            spans[seq] = found
            matches.extend((seq, start, end) for start, end in found)

    # ------------------------------------------------------------------ follow

    def pause(self) -> None:
        """Stop following (a reader scrolled away); new lines are counted from now."""
        self.following = False

    def resume(self) -> None:
        """Follow the newest line again."""
        self.following = True
        self.pending_new = 0
