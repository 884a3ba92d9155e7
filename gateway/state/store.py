"""The per-partition thread store, with a pending overlay for the open transaction.

Changes made while a transaction is open live in the overlay; `commit()`
folds them into the store once the transaction committed, `rollback()` drops
them when it aborted. The store is in memory; the changelog makes it durable.
"""

from __future__ import annotations

from collections.abc import Iterator

from gateway.core.state import ThreadState

_DELETED = None


class ThreadStore:
    def __init__(self) -> None:
        self._committed: dict[str, ThreadState] = {}
        self._pending: dict[str, ThreadState | None] = {}

    def get(self, thread_id: str) -> ThreadState | None:
        if thread_id in self._pending:
            return self._pending[thread_id]
        return self._committed.get(thread_id)

    def put(self, state: ThreadState) -> None:
        self._pending[state.thread_id] = state

    def delete(self, thread_id: str) -> None:
        self._pending[thread_id] = _DELETED

    def changes(self) -> dict[str, ThreadState | None]:
        """Threads changed in the open transaction: new state, or None when deleted."""
        return self._pending

    def commit(self) -> None:
        for thread_id, state in self._pending.items():
            if state is None:
                self._committed.pop(thread_id, None)
            else:
                self._committed[thread_id] = state
        self._pending = {}

    def rollback(self) -> None:
        self._pending = {}

    def load(self, state: ThreadState | None, thread_id: str) -> None:
        """Restore: set a committed state directly (None deletes)."""
        if state is None:
            self._committed.pop(thread_id, None)
        else:
            self._committed[thread_id] = state

    def __len__(self) -> int:
        return len(self._committed)

    def ids(self) -> list[str]:
        """The committed threads' ids, as a list (a snapshot)."""
        return list(self._committed)

    def committed(self) -> Iterator[ThreadState]:
        return iter(list(self._committed.values()))

    def open_interrupts(self) -> int:
        return sum(len(s.interrupts) for s in self._committed.values())
