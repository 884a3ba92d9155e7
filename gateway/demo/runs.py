"""What one simulated agent run looks like: its event stream and its outcome.

`plan_run` is pure given its random source: the agents module only publishes
what it returns. The mix covers every outcome, every kind of interrupt
reason, parallel interrupts, subagent attribution with the suspended outcome,
the one late RUN_ERROR the lifecycle admits, and the odd stream violation.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import Any

from gateway.demo import events as ev
from gateway.demo.events import Event

EXPIRES_IN_S = 5.0  # input_required interrupts expire this long after their run is planned
MAX_DEPTH = 3  # runs per conversation that may interrupt; the next one succeeds
CUSTOM_REASON = "budget_check"  # an open reason string the protocol does not name

_WORDS = "let me look into that for you and check the details before going on".split()
_TOOLS = ("transfer_funds", "delete_records", "send_email", "book_flight")


@dataclass(slots=True)
class RunPlan:
    events: list[Event]
    outcome: str  # success | cancelled | interrupt | failed (RUN_ERROR)
    interrupts: list[dict[str, Any]] = field(default_factory=list)
    suspended: list[str] = field(default_factory=list)  # subagent run ids left suspended
    late_error: bool = False
    violation: str | None = None  # the stream rule broken on purpose, if any


def _id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _words(rng: random.Random) -> list[str]:
    start = rng.randrange(len(_WORDS) - 4)
    return _WORDS[start : start + rng.randint(3, 6)]


def _tool_call_interrupt(
    rng: random.Random, stream: list[Event], subagent: str | None
) -> dict[str, Any]:
    call_id = _id("call")
    tool = rng.choice(_TOOLS)
    args = f'{{"target": "acct-{rng.randint(1, 99)}"}}'
    stream += ev.tool_call(call_id, tool, args, subagent)
    return {
        "id": _id("approve"),
        "reason": "tool_call",
        "message": f"Run {tool}?",
        "toolCallId": call_id,
        "responseSchema": ev.APPROVAL_SCHEMA,
    }


def _input_interrupt(rng: random.Random) -> dict[str, Any]:
    return {
        "id": _id("ask"),
        "reason": "input_required",
        "message": "Which account should I use?",
        "expiresAt": ev.iso_in(EXPIRES_IN_S),
    }


def _approval_interrupt(rng: random.Random) -> dict[str, Any]:
    amount = rng.randint(5, 500)
    return {
        "id": _id("review"),
        "reason": "approval_required",
        "message": f"Approve a refund of {amount} EUR?",
        "responseSchema": ev.DECISION_SCHEMA,
        "metadata": {"amount": amount, "currency": "EUR"},
    }


def _custom_interrupt(rng: random.Random) -> dict[str, Any]:
    return {
        "id": _id("budget"),
        "reason": CUSTOM_REASON,
        "message": "The token budget is spent; continue anyway?",
    }


def _interrupt(
    kind: str, rng: random.Random, stream: list[Event], sub: str | None = None
) -> dict[str, Any]:
    if kind == "tool_call":
        made = _tool_call_interrupt(rng, stream, sub)
    else:
        made = {
            "input_required": _input_interrupt,
            "approval_required": _approval_interrupt,
            CUSTOM_REASON: _custom_interrupt,
        }[kind](rng)
    if sub is not None:
        made["subagentRunId"] = sub
    return made


KINDS = ("tool_call", "input_required", "approval_required", CUSTOM_REASON)


def _outcome(rng: random.Random, depth: int) -> str:
    if depth == 0:
        weights = {"success": 0.17, "cancelled": 0.1, "failed": 0.03, "interrupt": 0.7}
    elif depth < MAX_DEPTH:
        weights = {"success": 0.52, "cancelled": 0.05, "failed": 0.03, "interrupt": 0.4}
    else:
        return "success"
    return rng.choices(list(weights), list(weights.values()))[0]


def plan_run(
    rng: random.Random,
    thread_id: str,
    run_id: str,
    depth: int,
    continue_subagents: list[str] | None = None,
) -> RunPlan:
    """One run on `thread_id`: `depth` counts the runs before it on the thread."""
    stream: list[Event] = [ev.run_started(thread_id, run_id)]
    for sub in continue_subagents or ():
        # the suspended invocation continues under the same id and completes
        stream.append(ev.subagent_started(sub, "researcher"))
        stream += ev.text_message(_id("msg"), _words(rng), sub)
        stream.append(ev.subagent_finished(sub))
    stream += ev.text_message(_id("msg"), _words(rng))
    violation = None
    if rng.random() < 0.03:
        stream.append({"type": "DEMO_HEARTBEAT", "note": "an event type AG-UI does not define"})
        violation = "unknown_event_type"
    outcome = _outcome(rng, depth)
    plan = RunPlan(stream, outcome, violation=violation)
    if outcome == "interrupt":
        _interrupting(rng, plan)
        stream.append(ev.run_finished(thread_id, run_id, ev.interrupted(plan.interrupts)))
    elif outcome == "cancelled":
        stream.append(ev.run_finished(thread_id, run_id, ev.cancelled()))
    elif outcome == "failed":
        stream.append(ev.run_error("the agent's model call failed", "MODEL_ERROR"))
        return plan
    else:
        if rng.random() < 0.5:
            stream += ev.tool_call(_id("call"), "lookup", '{"q": "status"}')
        stream.append(ev.run_finished(thread_id, run_id, ev.success()))
        if rng.random() < 0.04:
            # a delta after the run closed: the gateway reports event_after_close
            stream.append(
                {"type": "TEXT_MESSAGE_CONTENT", "messageId": _id("msg"), "delta": "oops"}
            )
            plan.violation = "event_after_close"
    if rng.random() < 0.05:
        stream.append(ev.run_error("the side effect failed after the run finished", "LATE"))
        plan.late_error = True
    return plan


def _interrupting(rng: random.Random, plan: RunPlan) -> None:
    stream = plan.events
    shape = rng.choices(("single", "parallel", "subagent"), (0.5, 0.3, 0.2))[0]
    if shape == "single":
        plan.interrupts.append(_interrupt(rng.choice(KINDS), rng, stream))
    elif shape == "parallel":
        for kind in rng.sample(KINDS, rng.randint(2, 3)):
            plan.interrupts.append(_interrupt(kind, rng, stream))
    else:
        sub = _id("sub")
        stream.append(ev.subagent_started(sub, "researcher"))
        stream += ev.text_message(_id("msg"), _words(rng), sub)
        kinds = rng.sample(("tool_call", "input_required", "approval_required"), rng.randint(1, 2))
        attributed = [_interrupt(kind, rng, stream, sub) for kind in kinds]
        stream.append(ev.subagent_finished(sub, [i["id"] for i in attributed]))
        plan.interrupts += attributed
        plan.suspended.append(sub)
        if rng.random() < 0.5:
            plan.interrupts.append(_interrupt(CUSTOM_REASON, rng, stream))
