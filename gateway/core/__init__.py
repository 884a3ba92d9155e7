"""The protocol core: pure rules, no I/O, no clock (time is an argument).

Imports nothing from the rest of `gateway` and no I/O library (a test
enforces it). Entry points:

- `apply_event(state, thread_id, event, at_ms)`: the thread state machine.
- `judge(state, raw_input, now_ms, policy, thread_id, caller=...)`: one run request,
  with who sent it (`Caller`: the identity the shell verified, or none).
"""

from gateway.core.events.classify import EventKind, classify
from gateway.core.events.lifecycle import Change, EventOutcome, apply_event
from gateway.core.requests.judge import judge
from gateway.core.values.codes import Reason, Rule, Verdict, Warn
from gateway.core.values.decision import Answer, Caller, Decision, Policy
from gateway.core.values.findings import Finding
from gateway.core.values.identity import Identity
from gateway.core.values.thread import InterruptRecord, RunStatus, ThreadState

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
