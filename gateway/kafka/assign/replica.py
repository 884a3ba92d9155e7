"""A changelog partition's state as read so far: what a restore builds, and a standby keeps.

`Replica` applies changelog records in offset order into a `ThreadStore` and keeps
what the pair needs beside it (threads whose run is active, open interrupts per
thread, from the records' hints) and `position`, the offset after the last one it
has read. A restore reads a partition from its beginning into a fresh replica; a
warm standby (standby.py) keeps one up to date by reading on, and hands it to the
restore when its pair comes here, which then reads only from `position` to the end.
Records at or past `position` are all the replica lacks: a compacted changelog
keeps, past any offset, every key's latest record written after it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from aiokafka.structs import ConsumerRecord

from gateway.codec import changelog
from gateway.core import RunStatus
from gateway.state.store import ThreadStore


@dataclass
class Restored:
    store: ThreadStore
    active: set[str]  # threads whose run is active
    open_interrupts: int


class Replica:
    def __init__(self, thread_of: Callable[[str], str | None] | None = None) -> None:
        self.store = ThreadStore(thread_of)
        self.active: set[str] = set()  # keys whose run is active
        self.open: dict[str, int] = {}  # keys with open interrupts -> how many
        self.position: int | None = None  # the next offset to read (None: the beginning)
        self.records = 0  # records applied, in all
        self.caught_up_at: float | None = None  # monotonic time it last reached the end

    def apply(self, messages: Iterable[ConsumerRecord]) -> None:
        """Changelog records, in offset order (those before `position` are skipped)."""
        for message in messages:
            if self.position is not None and message.offset < self.position:
                continue
            self.position = message.offset + 1
            self.records += 1
            if message.key is None:
                continue
            key = message.key.decode("utf-8", "replace")
            if message.value is None:
                self.store.load(None, key)
                self._hint(key, None)
                continue
            hint = changelog.read_hints(message.headers)
            self.store.load(message.value, key)  # with hints: decoded on first read
            if hint is None:  # no hints: decode now (None when unreadable)
                state = self.store.get(key)
                hint = None if state is None else (str(state.status), len(state.interrupts))
            self._hint(key, hint)

    def _hint(self, key: str, hint: tuple[str, int] | None) -> None:
        if hint is not None and hint[0] == RunStatus.ACTIVE:
            self.active.add(key)
        else:
            self.active.discard(key)
        if hint is not None and hint[1] > 0:
            self.open[key] = hint[1]
        else:
            self.open.pop(key, None)

    def reached(self, position: int, end: int, now: float | None = None) -> None:
        """The reader's position moved to `position` (past control records too); at the
        partition's stable end `end` the replica is caught up as of `now`."""
        if self.position is None or position > self.position:
            self.position = position
        if self.position >= end:
            self.caught_up_at = time.monotonic() if now is None else now

    def restored(self) -> Restored:
        return Restored(self.store, set(self.active), sum(self.open.values()))

    def __len__(self) -> int:
        return len(self.store)
