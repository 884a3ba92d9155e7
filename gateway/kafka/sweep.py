"""A pair's sweep: announce interrupts that expired unanswered, forget threads past retention.

A pass goes over the threads held when it began, a slice per round, so neither
a large store nor a burst of expiries stalls a round. What it changes goes into
the pair's open round like any other change.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from gateway.core import ThreadState, Warn
from gateway.core.findings import Finding
from gateway.core.sweep import expire_due
from gateway.state.retention import Retention

log = logging.getLogger("gateway.sweep")


class Swept(Protocol):
    """What a sweep needs of the pair it sweeps."""

    agent: str

    # keys are the pair's (its layout's): a threadId, or in a group (agent, threadId)'s key
    def committed_ids(self) -> list[str]: ...
    def state(self, thread_id: str) -> ThreadState | None: ...
    def put(self, old: ThreadState | None, new: ThreadState, key: str | None = None) -> None: ...
    def delete(self, old: ThreadState, key: str | None = None) -> None: ...
    def warn(self, warning: Finding, thread_id: str, run_id: str | None, now_ms: int) -> None: ...
    def defer(self, update: Callable[[], None]) -> None: ...
    def expired_counter(self) -> Callable[[], None]: ...


class Sweep:
    def __init__(self, retention: Retention) -> None:
        self.retention = retention
        self._ids: list[str] | None = None  # the pass in progress
        self._at = 0

    @property
    def running(self) -> bool:
        return self._ids is not None

    def step(
        self, pair: Swept, now_ms: int, limit: int | None = None, max_changes: int | None = None
    ) -> bool:
        """Look at up to `limit` threads, changing up to `max_changes` (None: no bound).

        True when a pass ends.
        """
        if self._ids is None:
            self._ids = pair.committed_ids()
            self._at = 0
        ids = self._ids
        stop = len(ids) if limit is None else min(len(ids), self._at + limit)
        changes = 0
        at = self._at
        while at < stop and (max_changes is None or changes < max_changes):
            thread_id = ids[at]
            at += 1
            state = pair.state(thread_id)
            if state is None:
                continue
            if self.retention.expired(state, now_ms):
                pair.delete(state, thread_id)
                changes += 1
                continue
            new, due = expire_due(state, now_ms)
            if not due:
                continue
            changes += 1
            try:
                pair.put(state, new, thread_id)
            except Exception:
                log.exception(
                    "internal error storing a thread's expired interrupts; state left as it was",
                    extra={"agent": pair.agent, "threadId": thread_id},
                )
                continue
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
        self._at = at
        if at >= len(ids):
            self._ids = None
        return self._ids is None
