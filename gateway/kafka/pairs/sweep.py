"""A pair's sweep: announce interrupts that expired unanswered, forget threads past retention.

A pass goes over the threads it has to look at, a slice per round, so neither a
large store nor a burst of expiries stalls a round. What it changes goes into the
pair's open round like any other change.

A pass looks only at threads that may have something due. Each thread it looks at
without changing it has a time before which nothing can be due (its retention, the
earliest `expiresAt` it would announce); the threads are kept in chunks of
`CHUNK`, each with the earliest of its threads' times. A pass looks at the chunks
whose time has come, and at every thread committed since the last pass began (the
store notes them), or read from a pending round or changed by the sweep itself
(that round may abort). Its cost then follows what changes and what falls due,
not the threads held: with 100,000 idle threads a pass looked at every one, some
3-8 µs each, every `sweep_interval_s`. The first pass, every `FULL_EVERY`-th, and
one after the chunks came to hold twice the threads held (a thread changed again
and again is in several) look at every thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from gateway.codec.changelog import SweepView
from gateway.core import ThreadState, Warn
from gateway.core.reading import expiry
from gateway.core.requests.sweep import expire_due, next_expiry_ms
from gateway.core.values.findings import Finding
from gateway.state.retention import Retention

log = logging.getLogger("gateway.sweep")

CHUNK = 256  # threads that share one earliest due time
FULL_EVERY = 30  # every this many passes, one looks at every thread held
_NEVER = float("inf")


class Swept(Protocol):
    """What a sweep needs of the pair it sweeps."""

    agent: str

    # keys are the pair's (its layout's): a threadId, or in a group (agent, threadId)'s key
    def committed_ids(self) -> list[str]: ...
    def committed_count(self) -> int: ...
    def changed_ids(self) -> list[str]: ...  # committed since the last call (the store's)
    def pending(self, thread_id: str) -> bool: ...  # changed in a round not yet committed
    def sweep_view(self, thread_id: str) -> SweepView | None: ...
    def state(self, thread_id: str) -> ThreadState | None: ...
    def put(self, old: ThreadState | None, new: ThreadState, key: str | None = None) -> None: ...
    def delete(self, old: ThreadState, key: str | None = None) -> None: ...
    def warn(self, warning: Finding, thread_id: str, run_id: str | None, now_ms: int) -> None: ...
    def defer(self, update: Callable[[], None]) -> None: ...
    def expired_counter(self) -> Callable[[], None]: ...


class Sweep:
    __slots__ = (
        "retention",
        "_chunks",
        "_due",
        "_entries",
        "_passes",
        "_again",
        "_todo",
        "_next",
        "_at",
        "_chunk_due",
    )  # one per pair: a fleet holds thousands

    def __init__(self, retention: Retention) -> None:
        self.retention = retention
        self.reset()

    def reset(self) -> None:
        """Forget what passes found (as when the pair takes another store): the next
        pass looks at every thread."""
        self._chunks: list[list[str]] = []  # the threads looked at, in chunks
        self._due: list[float] = []  # each chunk's earliest time anything may be due
        self._entries = 0  # threads in all chunks
        self._passes = 0
        self._again: dict[str, None] = {}  # to look at next pass (see the module)
        # the pass under way: the chunks it looks at, where it is, the chunk's time so far
        self._todo: list[int] | None = None
        self._next = 0
        self._at = 0
        self._chunk_due = _NEVER

    @property
    def running(self) -> bool:
        return self._todo is not None

    def due_from_view(self, view: SweepView) -> float:
        """The earliest time a thread may be past retention or have an expiry to
        announce, from what `sweep_view` read of it: before it `retention.expired` and
        `expire_due` both say no."""
        status, updated_ms, interrupts = view
        due: float = self.retention.kept_at_least_until_ms(status, updated_ms, bool(interrupts))
        for expires, announced in interrupts:
            if not announced and expires is not None:
                at = expiry.expires_at_ms(expires)
                if at is not None and at < due:
                    due = at
        return due

    def due_of(self, state: ThreadState) -> float:
        """The same, exact, of a decoded state."""
        expires = next_expiry_ms(state)
        keep = self.retention.keep_until_ms(state)
        return keep if expires is None or keep < expires else expires

    def _full_next(self, held: int) -> bool:
        return self._passes % FULL_EVERY == 0 or self._entries > 2 * held + CHUNK

    def next_size(self, held: int, changed: int) -> int:
        """About how many threads the next pass looks at, of `held` threads with
        `changed` committed since the last began."""
        if self._full_next(held):
            return held
        return min(held, changed + len(self._again) + CHUNK)

    def _begin(self, pair: Swept, now_ms: int) -> list[int]:
        changed = pair.changed_ids()  # the first call starts the store noting them
        again, self._again = self._again, {}
        full = self._full_next(pair.committed_count())
        self._passes += 1
        if full:
            ids = pair.committed_ids()
            self._chunks, self._due, self._entries = [], [], 0
            todo = []
        else:
            ids = list(dict.fromkeys([*changed, *again]))
            todo = [n for n, due in enumerate(self._due) if due <= now_ms]
        for start in range(0, len(ids), CHUNK):
            todo.append(len(self._chunks))
            self._chunks.append(ids[start : start + CHUNK])
            self._due.append(_NEVER)
        self._entries += len(ids)
        return todo

    def step(
        self, pair: Swept, now_ms: int, limit: int | None = None, max_changes: int | None = None
    ) -> bool:
        """Look at up to `limit` threads, changing up to `max_changes` (None: no bound).

        True when a pass ends.
        """
        if self._todo is None:
            self._todo = self._begin(pair, now_ms)
            self._next, self._at, self._chunk_due = 0, 0, _NEVER
        todo = self._todo
        looked = changes = 0
        while self._next < len(todo):
            chunk = todo[self._next]
            ids = self._chunks[chunk]
            at, due = self._at, self._chunk_due
            while at < len(ids):
                if (limit is not None and looked >= limit) or (
                    max_changes is not None and changes >= max_changes
                ):
                    self._at, self._chunk_due = at, due
                    return False
                thread_id = ids[at]
                at += 1
                looked += 1
                found = self._look(pair, thread_id, now_ms)
                if found is None:
                    changes += 1
                elif found < due:
                    due = found
            self._due[chunk] = due
            self._next, self._at, self._chunk_due = self._next + 1, 0, _NEVER
        self._todo = None
        return True

    def _look(self, pair: Swept, thread_id: str, now_ms: int) -> float | None:
        """Look at one thread: None when it changed it, else the earliest time anything
        may be due of it (never, for one to look at again next pass anyway)."""
        # read without decoding the thread: only one that may have something due is
        # decoded (decoding is most of what a sweep costs)
        view = pair.sweep_view(thread_id)
        if view is not None:
            surely_kept = self.due_from_view(view)
            if now_ms < surely_kept:
                return surely_kept
            pending = False
        else:
            pending = pair.pending(thread_id)
            if pending:  # read from a round that may yet abort: look again next pass
                self._again[thread_id] = None
        state = pair.state(thread_id)
        if state is None:
            return _NEVER
        if self.retention.expired(state, now_ms):
            pair.delete(state, thread_id)
            self._again[thread_id] = None  # should its round abort
            return None
        new, due = expire_due(state, now_ms)
        if not due:
            return _NEVER if pending else self.due_of(state)
        self._again[thread_id] = None  # should its round abort, or the put fail
        try:
            pair.put(state, new, thread_id)
        except Exception:
            log.exception(
                "internal error storing a thread's expired interrupts; state left as it was",
                extra={"agent": pair.agent, "threadId": thread_id},
            )
            return None
        for interrupt in due:
            pair.defer(pair.expired_counter())
            pair.warn(
                Finding(
                    str(Warn.INTERRUPT_EXPIRED),
                    f"interrupt {interrupt.id!r} ({interrupt.reason}) passed its "
                    f"expiresAt {interrupt.expires_at} unanswered; it can now only be "
                    "abandoned",
                    interrupt_id=interrupt.id,
                ),
                thread_id,  # the key: the pair names the agent it holds
                state.run_id,
                now_ms,
            )
        return None
