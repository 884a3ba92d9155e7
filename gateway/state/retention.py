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
            if state.status is RunStatus.ACTIVE:
                return state.updated_ms + max(self.thread_ms, self.interrupt_ms)
            return state.updated_ms + self.thread_ms
        until = state.updated_ms + max(self.thread_ms, self.interrupt_ms)
        expiries = [expires_at_ms(i.expires_at) for i in state.interrupts if i.expires_at]
        readable = [e for e in expiries if e is not None]
        if readable and len(readable) == len(state.interrupts):
            until = max(state.updated_ms + self.thread_ms, max(readable) + self.interrupt_grace_ms)
        return until

    def expired(self, state: ThreadState, now_ms: int) -> bool:
        return now_ms >= self.keep_until_ms(state)
