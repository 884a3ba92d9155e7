"""What a request decides, given its thread's state: the verdict, the new state, the forward.

Pure (no round, no Kafka, no clock): the pair hands in the record, the state it
reads through its layers, the time and who sent it (the `Caller` the shell verified:
`gateway.kafka.wire.attestation.caller_of`, so that the core stays free of crypto);
what the decision writes is `effects.py`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from gateway.codec.records import (
    NOT_DECODED,
    InRecord,
    Undecodable,
    decode_json,
    forward_bytes,
)
from gateway.core import Caller, Decision, Policy, Reason, ThreadState, Verdict, judge
from gateway.core.values.findings import Finding
from gateway.kafka.pairs import shaping


@dataclass(frozen=True, slots=True)
class Decided:
    decision: Decision
    state: ThreadState | None  # the thread's state it was judged against
    new: ThreadState | None  # the state to store, if any
    forward: bytes | None  # the forward's bytes (FORWARD only)
    raw: Any  # the request's JSON (NOT_DECODED if unread)


def decide(
    record: InRecord,
    thread_id: str | None,
    state_of: Callable[[str], ThreadState | None],
    now_ms: int,
    policy: Policy,
    caller: Caller | None = None,
) -> Decided:
    decision: Decision
    new: ThreadState | None = None
    state: ThreadState | None = None
    raw: Any = NOT_DECODED
    if thread_id is None:
        problem = shaping.key_problem(record)
        decision = rejected(
            Reason.THREAD_MISMATCH,
            f"the request record has {problem}; the key must be the threadId",
        )
    else:
        try:
            raw = decode_json(record.value)
        except Undecodable as exc:
            decision = rejected(Reason.MALFORMED_INPUT, str(exc), thread_id, path="")
        else:
            state = state_of(thread_id)
            decision, new = judge(state, raw, now_ms, policy, thread_id, caller=caller)
    if caller is not None and caller.identity is not None and decision.identity is None:
        decision = replace(decision, identity=caller.identity)  # rejected before judging
    forward: bytes | None = None
    if decision.verdict is Verdict.FORWARD:
        # the bytes received, less what was stripped (every value exactly as sent), or
        # input_too_large: the same function as `check`
        decision, forward = forward_bytes(decision, record.value or b"")
        if forward is None:
            new = None  # not forwarded: nothing to remember
    return Decided(decision, state, new, forward, raw)


def lagging(thread_id: str | None, waited_s: float) -> Decision:
    """The rejection of a request whose events side was not read up to it in time."""
    return rejected(
        Reason.EVENTS_LAGGING,
        f"the gateway had not read this thread's events up to this request after waiting "
        f"{waited_s:.1f} s (merge_max_wait_ms); it was not judged. Send it again",
        thread_id,
    )


def rejected(reason: Reason, text: str, thread_id: str | None = None, **extra: Any) -> Decision:
    return Decision(
        Verdict.REJECT, reasons=(Finding(str(reason), text, **extra),), thread_id=thread_id
    )
