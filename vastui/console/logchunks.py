"""Where a log buffer's lines are: chunks (a run of lines of one source, one per append) and
the shown ones among them, each line found by its position with a bisect over the chunks.
Pure Python; `logbuffer.py` is the only user."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass

from vastui.console.logtext import Entry


@dataclass(eq=False)
class Chunk:
    """Consecutive lines of one source: line `i` has sequence number `seq + i`."""

    seq: int
    source: str
    texts: list[str]

    def entries(self) -> Iterator[Entry]:
        source = self.source
        for offset, text in enumerate(self.texts):
            yield (self.seq + offset, source, text)


class Shown:
    """The chunks the source filter shows, with each one's position among the shown lines
    counted since the start (`starts`, ascending): position minus `dropped` is an index."""

    def __init__(self) -> None:
        self.chunks: list[Chunk] = []
        self.starts: list[int] = []
        self.first_seqs: list[int] = []
        self.dropped = 0
        self.total = 0  # positions ever given out

    def __len__(self) -> int:
        return self.total - self.dropped

    def add(self, chunk: Chunk, count: int, extended: bool) -> None:
        """`count` new lines at the end of `chunk` (already in it); `extended`: the chunk was
        already the last shown one."""
        if not extended:
            self.chunks.append(chunk)
            self.starts.append(self.total)
            self.first_seqs.append(chunk.seq)
        self.total += count

    def locate(self, index: int) -> tuple[Chunk, int]:
        position = index + self.dropped
        k = bisect_right(self.starts, position) - 1
        return self.chunks[k], position - self.starts[k]

    def index_of(self, seq: int) -> int:
        """The index of the shown line with sequence number `seq`, or of the first after it."""
        k = bisect_right(self.first_seqs, seq) - 1
        if k < 0:
            return 0
        chunk = self.chunks[k]
        offset = min(seq - chunk.seq, len(chunk.texts))
        return self.starts[k] + offset - self.dropped

    def first_seq(self) -> int | None:
        return self.chunks[0].seq if self.chunks else None

    def trim_before(self, seq: int) -> int:
        """Forget shown lines older than `seq`; how many."""
        removed = 0
        chunks = self.chunks
        gone = 0
        while gone < len(chunks) and chunks[gone].seq + len(chunks[gone].texts) <= seq:
            gone += 1
        if gone:
            removed = self.starts[gone] - self.starts[0] if gone < len(chunks) else len(self)
            del chunks[:gone], self.starts[:gone], self.first_seqs[:gone]
            self.dropped += removed
        if chunks and self.first_seqs[0] < seq:
            # The buffer cut into this chunk (the chunk itself is already cut: only this
            # bookkeeping of where its lines stand moves).
            cut = seq - self.first_seqs[0]
            self.starts[0] += cut
            self.first_seqs[0] = seq
            self.dropped += cut
            removed += cut
        return removed

    def texts(self) -> Iterator[str]:
        for chunk in self.chunks:
            yield from chunk.texts

    def entries(self) -> Iterator[Entry]:
        for chunk in self.chunks:
            yield from chunk.entries()


def entries_of(first_seq: int, source: str, texts: list[str]) -> Iterator[Entry]:
    for offset, text in enumerate(texts):
        yield (first_seq + offset, source, text)
