"""The per-partition thread store, with a pending overlay for the open transaction.

Changes made while a transaction is open live in the overlay; `commit()`
folds them into the store once the transaction committed, `rollback()` drops
them when it aborted. The store is in memory; the changelog makes it durable.

Committed threads whose run is not active are held as bytes (`changelog.encode_held`:
the version 4 changelog value without the thread id, which the key holds) and
decoded on each read: a closed thread takes a fraction of the memory of its
objects, and reading one costs a few microseconds. Threads whose run is active
(read by every event of the run) stay objects. A restored thread is kept as its
changelog bytes, of any version, until first read: restoring is then a copy, and
threads nobody touches are never decoded. A value that cannot be decoded when
read is logged and the thread reads as unknown.

A store is keyed by what the changelog's keys hold: the threadId on an agent's own
topics, `changelog.group_key(agent, threadId)` on a group's; `thread_of` maps a key
back to its threadId (values held without one take it from there).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from gateway.codec import changelog
from gateway.core.values.thread import RunStatus, ThreadState

log = logging.getLogger("gateway.store")
_DELETED = None


def _same(key: str) -> str:
    return key


class ThreadStore:
    def __init__(self, thread_of: Callable[[str], str | None] | None = None) -> None:
        self._committed: dict[str, ThreadState | bytes] = {}
        self._pending: dict[str, ThreadState | None] = {}
        # the changelog values of pending states, as the round encoded them (see `put`)
        self._values: dict[str, bytes] = {}
        self.thread_of: Callable[[str], str | None] = thread_of or _same
        # keys committed or loaded since the last `take_changed` (None: not asked for
        # yet, nothing noted): each key once, until the next sweep pass takes them
        self._changed: dict[str, None] | None = None

    def get(self, thread_id: str) -> ThreadState | None:
        """The state under a key (a threadId, or a group's key)."""
        if thread_id in self._pending:
            return self._pending[thread_id]
        value = self._committed.get(thread_id)
        if isinstance(value, bytes):
            return self._decode(thread_id, value)
        return value

    def sweep_view(self, thread_id: str) -> changelog.SweepView | None:
        """What a sweep needs of a committed thread held as bytes, read without decoding
        it (`changelog.sweep_view`); None for any other (held as an object, changed in
        the open transaction, not here, or not readable so): read it with `get`."""
        if thread_id in self._pending:
            return None
        value = self._committed.get(thread_id)
        return changelog.sweep_view(value) if isinstance(value, bytes) else None

    def _decode(self, thread_id: str, value: bytes) -> ThreadState | None:
        try:
            real = self.thread_of(thread_id)
            if real is None:
                raise changelog.ChangelogFormatError(f"key {thread_id[:200]!r} names no thread")
            state = changelog.decode_held(value, real)
        except changelog.ChangelogFormatError as exc:
            log.error(
                "unreadable changelog value; the thread reads as unknown",
                extra={"thread_id": thread_id, "error": str(exc)},
            )
            del self._committed[thread_id]
            return None
        if value[:1] != b"\x04":  # an older version, restored: not decoded again
            self._committed[thread_id] = _held(state)
        return state

    def put(self, state: ThreadState, key: str | None = None, value: bytes | None = None) -> None:
        """Store a state under `key` (default: its threadId); `value`, when given, is its
        changelog value (`changelog.encode`), from which the bytes held are cut rather
        than encoding the state again."""
        key = state.thread_id if key is None else key
        self._pending[key] = state
        if value is not None:
            self._values[key] = value
        elif self._values:
            self._values.pop(key, None)

    def delete(self, thread_id: str) -> None:
        self._pending[thread_id] = _DELETED
        self._values.pop(thread_id, None)

    def changes(self) -> dict[str, ThreadState | None]:
        """Threads changed in the open transaction: new state, or None when deleted."""
        return self._pending

    def commit(self) -> None:
        values = self._values
        changed = self._changed
        for thread_id, state in self._pending.items():
            if state is None:
                self._committed.pop(thread_id, None)
            else:
                self._committed[thread_id] = _held(state, values.get(thread_id))
                if changed is not None:
                    changed[thread_id] = None
        self._pending = {}
        self._values = {}

    def rollback(self) -> None:
        self._pending = {}
        self._values = {}

    def load(self, value: ThreadState | bytes | None, thread_id: str) -> None:
        """Restore: set a committed state, or its changelog bytes, directly (None deletes)."""
        if value is None:
            self._committed.pop(thread_id, None)
        else:
            self._committed[thread_id] = value
            if self._changed is not None:
                self._changed[thread_id] = None

    def changed_count(self) -> int:
        return 0 if self._changed is None else len(self._changed)

    def take_changed(self) -> list[str]:
        """The keys committed or loaded (not deleted) since the last call, in that order,
        each once; the first call returns none and starts noting them. A sweep reads
        these rather than every key (`gateway.kafka.pairs.sweep`). Writes through
        `held()` are not noted: that map is filled before a pair takes the store."""
        changed = self._changed
        self._changed = {}
        return [] if changed is None else list(changed)

    def held(self) -> dict[str, ThreadState | bytes]:
        """The committed map itself, for a restore or a replica to fill as `load` would
        (changelog bytes under a key, popped for a tombstone): one call per record
        costs a restore's loop a fifth of its time. What is written here is not noted
        for `take_changed`."""
        return self._committed

    def __len__(self) -> int:
        return len(self._committed)

    def ids(self) -> list[str]:
        """The committed threads' ids, as a list (a snapshot)."""
        return list(self._committed)

    def committed(self) -> Iterator[ThreadState]:
        """Every committed state (decoding those still held as bytes)."""
        for thread_id in self.ids():
            value = self._committed.get(thread_id)
            if isinstance(value, bytes):
                value = self._decode(thread_id, value)
            if value is not None:
                yield value

    def open_interrupts(self) -> int:
        return sum(len(s.interrupts) for s in self.committed())


def _held(state: ThreadState, value: bytes | None = None) -> ThreadState | bytes:
    """What the store keeps of a committed state (`value`: its changelog value, if known)."""
    if state.status is RunStatus.ACTIVE:
        return state
    if value is not None:
        held = changelog.held_from(value)
        if held is not None:
            return held
    try:
        return changelog.encode_held(state)
    except Exception:  # the round encoded it already; keep it as it is rather than lose it
        log.exception("internal error encoding a thread state; kept as objects")
        return state
