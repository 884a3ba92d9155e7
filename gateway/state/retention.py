"""Which threads the store may forget, judged at a time passed in.

Idle threads go after `thread_retention_s`. A thread with open interrupts is
kept until its last readable `expiresAt` plus `interrupt_grace_s`, or for
`interrupt_retention_s` after it last changed, whichever is later: nobody's
interrupt is dropped while it can still be answered.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.core.reading.expiry import expires_at_ms
from gateway.core.values.thread import RunStatus, ThreadState


@dataclass(frozen=True, slots=True)
class Retention:
    thread_ms: int
    interrupt_grace_ms: int
    interrupt_ms: int

    def keep_until_ms(self, state: ThreadState) -> int:
        if not state.interrupts:
            return self.keep_until_without_interrupts(state.status, state.updated_ms)
        until = state.updated_ms + max(self.thread_ms, self.interrupt_ms)
        expiries = [expires_at_ms(i.expires_at) for i in state.interrupts if i.expires_at]
        readable = [e for e in expiries if e is not None]
        if readable and len(readable) == len(state.interrupts):
            until = max(state.updated_ms + self.thread_ms, max(readable) + self.interrupt_grace_ms)
        return until

    def expired(self, state: ThreadState, now_ms: int) -> bool:
        return now_ms >= self.keep_until_ms(state)

    def keep_until_without_interrupts(self, status: RunStatus, updated_ms: int) -> int:
        """`keep_until_ms` of a state that holds no interrupts, from the two fields that
        decide it."""
        if status is RunStatus.ACTIVE:
            return updated_ms + max(self.thread_ms, self.interrupt_ms)
        return updated_ms + self.thread_ms

    def kept_at_least_until_ms(self, status: RunStatus, updated_ms: int, interrupts: bool) -> int:
        """A time before which a state is surely kept, from its status, `updated_ms` and
        whether it holds interrupts (a sweep reads these without decoding the state):
        `keep_until_ms` itself when it holds none, never later than it when it does."""
        if not interrupts:
            return self.keep_until_without_interrupts(status, updated_ms)
        return updated_ms + self.thread_ms
