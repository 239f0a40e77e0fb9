"""The console's garbage-collector settings: long-lived objects frozen out of its way, young
collections rarer (bench/keys.py measured why)."""

from __future__ import annotations

import gc


def settle_heap() -> None:
    """Take the long-lived objects (10,000 offers, the widgets) out of the garbage collector's
    way. A full collection walks every object: with them it took 150-300 ms, about every
    second under a fast log stream, stalling keys (bench/keys.py). Unfreezing and collecting
    first means nothing stays frozen once it is garbage; this runs when a new offers list
    arrives (minutes apart), so its one full pass replaces hundreds."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


# Young collections 14x rarer than Python's default (700, 10, 10): most of Textual's cyclic
# garbage (strips, caches, layout maps; ~5,000 objects/s under a log stream) then dies before
# a collection would promote it, so full collections come seconds apart, not every 0.4 s.
GC_THRESHOLDS = (10_000, 10, 10)
