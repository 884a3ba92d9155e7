"""Thread state as a plain value (gateway.core.values.thread): immutable, serialisable."""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from gateway.core import InterruptRecord, RunStatus, ThreadState, judge
from gateway.core.values.thread import ForwardRecord, SuspendedSubagent, from_dict, to_dict
from tests.core.factories import (
    NOW_MS,
    THREAD,
    entry,
    interrupt,
    interrupted,
    run_error,
    run_input,
    run_started,
    state_of,
    subagent_finished,
    subagent_started,
)


def rich_state() -> ThreadState:
    state = state_of(
        run_started(),
        subagent_started("sub-1"),
        subagent_finished("sub-1", {"type": "suspended", "interruptIds": ["b"]}),
        *interrupted(
            interrupt(
                "a",
                message="m",
                toolCallId="call-1",
                responseSchema={"type": "object"},
                expiresAt="2030-01-01T00:00:00Z",
                metadata={"k": [1, None, {"x": True}]},
            ),
            interrupt("b", "input_required", subagentRunId="sub-1"),
        )[1:],
        run_error(),
    )
    decision, state = judge(
        state, run_input([entry("a", payload={}), entry("b", "cancelled")]), NOW_MS
    )
    assert decision.verdict == "forward"
    assert state is not None
    return state


def test_a_rich_state_round_trips_through_its_plain_form():
    state = rich_state()
    assert state.failed_late and state.forwards and state.suspended and state.interrupts
    plain = to_dict(state)
    assert from_dict(plain) == state
    assert from_dict(orjson.loads(orjson.dumps(plain))) == state  # JSON-safe


def test_the_plain_form_is_made_of_json_values_only():
    def walk(value):
        if isinstance(value, dict):
            assert all(isinstance(k, str) for k in value)
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
        else:
            assert value is None or type(value) in (str, int, float, bool), type(value)

    walk(to_dict(rich_state()))
    assert to_dict(rich_state())["status"] == "failed"


def test_a_blank_state_round_trips_and_reads_as_unknown():
    blank = ThreadState(THREAD)
    assert from_dict(to_dict(blank)) == blank
    assert blank.status is RunStatus.UNKNOWN
    assert not blank.is_closed
    assert not blank.has_open_interrupts


def test_from_dict_tolerates_absent_optional_members():
    minimal = {
        "thread_id": THREAD,
        "status": "interrupted",
        "interrupts": [{"id": "a", "reason": "r"}],
    }
    state = from_dict(minimal)
    assert state.interrupts == (InterruptRecord("a", "r"),)
    assert (state.forwards, state.suspended, state.failed_late, state.updated_ms) == (
        (),
        (),
        False,
        0,
    )


@pytest.mark.parametrize("status", list(RunStatus))
def test_is_closed_for_each_status(status):
    state = ThreadState(THREAD, status=status)
    assert state.is_closed == (status not in (RunStatus.UNKNOWN, RunStatus.ACTIVE))


def test_states_are_immutable():
    state = rich_state()
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.status = RunStatus.ACTIVE  # type: ignore[misc]
    for value in (state.interrupts[0], state.forwards[0], state.suspended[0]):
        assert isinstance(value, (InterruptRecord, ForwardRecord, SuspendedSubagent))
        with pytest.raises(dataclasses.FrozenInstanceError):
            value.__setattr__(dataclasses.fields(value)[0].name, "x")
    assert isinstance(state.interrupts, tuple)
    assert isinstance(state.forwards, tuple)
