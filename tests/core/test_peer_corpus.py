"""The `ag-ui-validate` conformance corpus, fed through the state machine.

Every event stream in the peer validator's fixtures goes through apply_event:
none may crash, the valid streams raise no protocol_violation, and the
lifecycle fixtures are flagged at the very event the peer flags.
"""

from __future__ import annotations

import importlib.resources
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.core import Reason, Rule, RunStatus, ThreadState, Verdict, Warn, apply_event, judge
from gateway.core.values.thread import from_dict, to_dict
from tests.core.factories import NOW_MS

FALLBACK_THREAD = "thread_001"
VIOLATION = str(Warn.PROTOCOL_VIOLATION)


def fixtures_root() -> Path:
    root = Path(str(importlib.resources.files("ag_ui_validate") / "spec" / "fixtures"))
    assert root.is_dir(), f"ag-ui-validate ships no fixtures at {root}"
    return root


ROOT = fixtures_root()
VALID = sorted(ROOT.glob("valid/*.jsonl"))
INVALID_DIRS = sorted(p for p in ROOT.glob("invalid/*") if p.is_dir())
INVALID = [d / "stream.jsonl" for d in INVALID_DIRS if (d / "stream.jsonl").is_file()]
STREAMLESS = [d for d in INVALID_DIRS if not (d / "stream.jsonl").is_file()]
ALL_STREAMS = VALID + INVALID


@dataclass
class Replayed:
    state: ThreadState | None
    thread_id: str
    warnings: list[tuple[int, str, str | None]]  # (event index, code, rule)
    states: list[ThreadState | None]


def lines_of(path: Path) -> list[Any]:
    """Non-empty lines, parsed where they parse; a line that is not JSON stays a string."""
    events: list[Any] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            events.append(line)
    return events


def thread_of(events: list[Any]) -> str:
    for event in events:
        if isinstance(event, dict) and isinstance(event.get("threadId"), str):
            return event["threadId"]
    return FALLBACK_THREAD


def replay(path: Path, upto: int | None = None) -> Replayed:
    events = lines_of(path)[:upto]
    thread_id = thread_of(events)
    state: ThreadState | None = None
    warnings: list[tuple[int, str, str | None]] = []
    states = []
    for index, event in enumerate(events):
        outcome = apply_event(state, thread_id, event, at_ms=1_755_300_000_000 + index)
        state = outcome.state
        states.append(state)
        warnings += [(index, w.code, w.rule) for w in outcome.warnings]
    return Replayed(state, thread_id, warnings, states)


def name(path: Path) -> str:
    return path.stem if path.parent.name == "valid" else path.parent.name


def test_the_corpus_is_there_and_large():
    assert len(VALID) >= 5
    assert len(INVALID) >= 35
    assert len(ALL_STREAMS) >= 45
    # the transport fixtures describe HTTP bodies, not event streams
    assert all((d / "scenario.json").is_file() for d in STREAMLESS)
    assert len(STREAMLESS) <= 10


@pytest.mark.parametrize("path", ALL_STREAMS, ids=name)
def test_no_fixture_crashes_the_state_machine(path):
    replayed = replay(path)
    assert replayed.states, "an empty stream?"
    for state in replayed.states:
        if state is not None:
            assert state.thread_id == replayed.thread_id
            assert from_dict(to_dict(state)) == state
    assert {code for _, code, _ in replayed.warnings} <= {str(w) for w in Warn}
    decision, _ = judge(
        replayed.state,
        {"threadId": replayed.thread_id, "runId": "run_next", "messages": []},
        NOW_MS,
        thread_id=replayed.thread_id,
    )
    assert decision.verdict in (Verdict.FORWARD, Verdict.REJECT)


@pytest.mark.parametrize("path", VALID, ids=name)
def test_valid_streams_raise_no_protocol_violation(path):
    replayed = replay(path)
    assert [w for w in replayed.warnings if w[1] == VIOLATION] == []
    assert replayed.warnings == []
    assert replayed.state is not None
    assert replayed.state.status is RunStatus.SUCCEEDED


# peer rule -> what the gateway reports for it
FLAGGED = {
    "AGUI001": (VIOLATION, str(Rule.FIRST_EVENT)),
    "AGUI002": (VIOLATION, str(Rule.NESTED_RUN_STARTED)),
    "AGUI004": (VIOLATION, str(Rule.EVENT_AFTER_CLOSE)),
    # the spec admits one late RUN_ERROR: flagged by its own warning, not a violation
    "AGUI005": (str(Warn.LATE_RUN_ERROR), None),
    "AGUI008": (VIOLATION, str(Rule.RUN_ID_MISMATCH)),
    "AGUI502": (VIOLATION, str(Rule.MALFORMED_EVENT)),
    "AGUI503": (str(Warn.UNKNOWN_EVENT_TYPE), None),
    "AGUI601": (VIOLATION, str(Rule.SUBAGENT_ALREADY_STARTED)),
    "AGUI602": (VIOLATION, str(Rule.SUBAGENT_NOT_STARTED)),
    "AGUI603": (VIOLATION, str(Rule.SUBAGENT_NOT_STARTED)),
}


def fixture_dir(rule: str) -> Path:
    [match] = [d for d in INVALID_DIRS if d.name.startswith(rule + "-")]
    return match


@pytest.mark.parametrize("rule", sorted(FLAGGED))
def test_lifecycle_fixtures_are_flagged_at_the_event_the_peer_flags(rule):
    directory = fixture_dir(rule)
    expected = json.loads((directory / "expected.json").read_text())
    peer_indexes = [d["eventIndex"] for d in expected if d["rule"] == rule]
    assert peer_indexes, f"{rule} fixture flags nothing?"
    replayed = replay(directory / "stream.jsonl")
    code, gateway_rule = FLAGGED[rule]
    ours = [index for index, c, r in replayed.warnings if (c, r) == (code, gateway_rule)]
    assert ours == peer_indexes
    # and nothing else in these short streams is called a violation
    others = [w for w in replayed.warnings if w[1] == VIOLATION and w[2] != gateway_rule]
    assert others == []


def test_finished_and_error_marks_the_run_failed_without_a_violation():
    replayed = replay(fixture_dir("AGUI005") / "stream.jsonl")
    assert replayed.state is not None
    assert replayed.state.status is RunStatus.FAILED
    assert replayed.state.failed_late is True
    assert [w for w in replayed.warnings if w[1] == VIOLATION] == []


# --- the corpus's human-in-the-loop stream, judged ------------------------------------------

HITL = ROOT / "valid" / "human-in-the-loop.jsonl"


def interrupting_prefix() -> int:
    events = lines_of(HITL)
    for index, event in enumerate(events):
        outcome = event.get("outcome") if isinstance(event, dict) else None
        if isinstance(outcome, dict) and outcome.get("type") == "interrupt":
            return index + 1
    raise AssertionError("human-in-the-loop fixture has no interrupt")


def test_the_human_in_the_loop_interrupt_must_be_answered():
    replayed = replay(HITL, upto=interrupting_prefix())
    state = replayed.state
    assert state is not None
    assert state.status is RunStatus.INTERRUPTED
    [open_interrupt] = state.interrupts
    resume = [{"interruptId": open_interrupt.id, "status": "resolved", "payload": {"ok": True}}]
    base = {"threadId": replayed.thread_id, "runId": "run_002", "messages": []}
    forward, _ = judge(state, {**base, "resume": resume}, NOW_MS, thread_id=replayed.thread_id)
    assert forward.verdict is Verdict.FORWARD
    reject, _ = judge(state, base, NOW_MS, thread_id=replayed.thread_id)
    assert [(r.code, r.interrupt_id) for r in reject.reasons] == [
        (str(Reason.UNCOVERED_INTERRUPT), open_interrupt.id)
    ]


def test_the_whole_human_in_the_loop_stream_leaves_nothing_open():
    replayed = replay(HITL)
    assert replayed.state is not None
    assert replayed.state.interrupts == ()
    assert replayed.state.status is RunStatus.SUCCEEDED
