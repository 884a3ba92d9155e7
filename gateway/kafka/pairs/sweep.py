"""A pair's sweep: announce interrupts that expired unanswered, forget threads past retention.

A pass goes over the threads held when it began, a slice per round, so neither
a large store nor a burst of expiries stalls a round. What it changes goes into
the pair's open round like any other change.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from gateway.codec.changelog import SweepView
from gateway.core import ThreadState, Warn
from gateway.core.reading import expiry
from gateway.core.requests.sweep import expire_due
from gateway.core.values.findings import Finding
from gateway.state.retention import Retention

log = logging.getLogger("gateway.sweep")


class Swept(Protocol):
    """What a sweep needs of the pair it sweeps."""

    agent: str

    # keys are the pair's (its layout's): a threadId, or in a group (agent, threadId)'s key
    def committed_ids(self) -> list[str]: ...
    def sweep_view(self, thread_id: str) -> SweepView | None: ...
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

    def _maybe_due(self, view: SweepView, now_ms: int) -> bool:
        """Whether a thread may be past retention or have an expiry to announce: False
        only when neither is possible (`retention.expired` and `expire_due` would both
        say no), from what `sweep_view` read of it."""
        status, updated_ms, interrupts = view
        if now_ms >= self.retention.kept_at_least_until_ms(status, updated_ms, bool(interrupts)):
            return True
        return any(
            not announced and expiry.judge(expires, now_ms) is expiry.Expiry.EXPIRED
            for expires, announced in interrupts
        )

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
            # read without decoding the thread: only one that may have something due
            # is decoded (decoding is most of what a sweep costs)
            view = pair.sweep_view(thread_id)
            if view is not None and not self._maybe_due(view, now_ms):
                continue
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
