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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from gateway.codec import changelog
from gateway.core import RunStatus
from gateway.kafka.wire.asread import AsRead
from gateway.state.store import ThreadStore

ACTIVE = changelog.status_bytes(RunStatus.ACTIVE)  # the status hint of an active run
STATUS, OPEN = changelog.HEADER_STATUS, changelog.HEADER_OPEN


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

    def apply(self, messages: Iterable[AsRead]) -> None:
        """Changelog records, in offset order (those before `position` are skipped).

        A restore's speed is this loop's, so it does per record the least Python it can:
        the hints the gateway writes (two headers, in its order) are read in place, any
        other headers through `changelog.read_hints`."""
        batch = messages if isinstance(messages, list) else list(messages)
        if not batch:
            return
        if self.position is not None and batch[0].offset < self.position:
            position = self.position  # after a seek: only a prefix can lie before it
            batch = [m for m in batch if m.offset >= position]
            if not batch:
                return
        held, active, open_ = self.store.held(), self.active, self.open
        for message in batch:
            raw = message.key
            if raw is None:
                continue
            key = raw.decode("utf-8", "replace")
            value = message.value
            if value is None:
                held.pop(key, None)
                active.discard(key)
                open_.pop(key, None)
                continue
            held[key] = value  # decoded on first read
            headers: Sequence[tuple[str, bytes | None]] = message.headers or ()
            if (
                len(headers) == 2
                and headers[0][0] == STATUS
                and headers[1][0] == OPEN
                and isinstance(count := headers[1][1], bytes)
                and count.isdigit()
            ):
                if headers[0][1] == ACTIVE:
                    active.add(key)
                else:
                    active.discard(key)
                if count == b"0":
                    open_.pop(key, None)
                else:
                    open_[key] = int(count)
                continue
            hint = changelog.read_hints(headers)
            if hint is None:  # no hints: decode now (None when unreadable)
                state = self.store.get(key)
                if state is None:
                    active.discard(key)
                    open_.pop(key, None)
                    continue
                hint = (str(state.status), len(state.interrupts))
            if hint[0] == RunStatus.ACTIVE:
                active.add(key)
            else:
                active.discard(key)
            if hint[1] > 0:
                open_[key] = hint[1]
            else:
                open_.pop(key, None)
        self.position = batch[-1].offset + 1
        self.records += len(batch)

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
