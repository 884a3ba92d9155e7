"""The garbage collector's settings in the long-lived service (`agui-gateway run`).

Judging one 1 MB record allocates up to ~100,000 containers (its decoded JSON, the
paths of what it strips), nearly all freed by reference counting when it is done.
With the default thresholds (700, 10, 10) the collector runs a young collection
every 700 of them, traverses the record's objects again and again as they are
promoted, and now and then a full collection walks the whole heap in the middle
of a record: up to 40 ms of a record's CPU (README, "What one record may cost").
With a young generation of 100,000 a record's own objects are mostly freed before
a collection sees them, and the older generations are collected rarely. The
thread states restored at start are frozen (`gc.freeze()`) where they are loaded;
`configure` freezes what start-up built as well (modules, settings, clients).
"""

from __future__ import annotations

import gc

THRESHOLDS = (100_000, 20, 100)


def configure() -> None:
    """The service's collector settings: what start-up built frozen, then THRESHOLDS."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
