"""The protocol core: pure rules, no I/O, no clock (time is an argument).

Imports nothing from the rest of `gateway` and no I/O library (a test
enforces it). Entry points:

- `apply_event(state, thread_id, event, at_ms)`: the thread state machine.
- `judge(state, raw_input, now_ms, policy, thread_id, caller=...)`: one run request,
  with who sent it (`Caller`: the identity the shell verified, or none).

The names below are imported when first asked for: a process that needs only the
core's values (a reason code, a finding) does not build the protocol's models that
reading events and judging requests need (ag_ui's event models alone took
about 0.2 s of CPU to import).
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.core.events.classify import EventKind, classify
    from gateway.core.events.lifecycle import Change, EventOutcome, apply_event
    from gateway.core.requests.judge import judge
    from gateway.core.values.codes import Reason, Rule, Verdict, Warn
    from gateway.core.values.decision import Answer, Caller, Decision, Policy
    from gateway.core.values.findings import Finding
    from gateway.core.values.identity import Identity
    from gateway.core.values.thread import InterruptRecord, RunStatus, ThreadState

# each name: the module it is defined in
_WHERE = {
    "EventKind": "gateway.core.events.classify",
    "classify": "gateway.core.events.classify",
    "Change": "gateway.core.events.lifecycle",
    "EventOutcome": "gateway.core.events.lifecycle",
    "apply_event": "gateway.core.events.lifecycle",
    "judge": "gateway.core.requests.judge",
    "Reason": "gateway.core.values.codes",
    "Rule": "gateway.core.values.codes",
    "Verdict": "gateway.core.values.codes",
    "Warn": "gateway.core.values.codes",
    "Answer": "gateway.core.values.decision",
    "Caller": "gateway.core.values.decision",
    "Decision": "gateway.core.values.decision",
    "Policy": "gateway.core.values.decision",
    "Finding": "gateway.core.values.findings",
    "Identity": "gateway.core.values.identity",
    "InterruptRecord": "gateway.core.values.thread",
    "RunStatus": "gateway.core.values.thread",
    "ThreadState": "gateway.core.values.thread",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # asked once
    return value


__all__ = [
    "Answer",
    "Caller",
    "Change",
    "Decision",
    "EventKind",
    "EventOutcome",
    "Finding",
    "Identity",
    "InterruptRecord",
    "Policy",
    "Reason",
    "Rule",
    "RunStatus",
    "ThreadState",
    "Verdict",
    "Warn",
    "apply_event",
    "classify",
    "judge",
]
