import io

import orjson
import pytest
from fastavro import schemaless_writer

from gateway.codec import changelog
from gateway.core.state import (
    ForwardRecord,
    InterruptRecord,
    RunStatus,
    SuspendedSubagent,
    ThreadState,
)


def full_state() -> ThreadState:
    return ThreadState(
        thread_id="thread-ü",
        status=RunStatus.INTERRUPTED,
        run_id="r1",
        outcome="interrupt",
        interrupts=(
            InterruptRecord(
                "a",
                "tool_call",
                "ok?",
                "call-1",
                {"type": "object", "properties": {"x": {"type": "integer"}}},
                "2030-01-01T00:00:00Z",
                {"k": [1, None, {"n": 2.5}]},
                "sub-1",
                True,
            ),
            InterruptRecord("b", "input_required"),
        ),
        closed_at_ms=1_700_000_000_000,
        failed_late=True,
        open_subagents=("s2",),
        suspended=(SuspendedSubagent("sub-1", ("a",)),),
        forwards=(ForwardRecord("r2", "ff00", "r1", ("a", "b"), settled=True),),
        updated_ms=42,
        interrupts_run_id="r0",  # a continuation r1 failed: r0's interrupts stay open
        interrupts_closed_at_ms=1_600_000_000_000,
    )


def test_round_trip_keeps_every_field():
    state = full_state()
    assert changelog.decode(changelog.encode(state)) == state


def test_value_starts_with_the_format_version():
    assert changelog.encode(ThreadState("t"))[0] == changelog.CURRENT_VERSION


@pytest.mark.parametrize("value", [b"", b"\x63garbage", b"\x01\xff\xff\xff"])
def test_unreadable_values_raise_a_specific_error(value):
    with pytest.raises(changelog.ChangelogFormatError):
        changelog.decode(value)


def test_an_older_writer_schema_is_read_with_defaults():
    """Schema evolution: a v1 record written without optional members still decodes."""
    record = {
        "thread_id": "t",
        "status": "succeeded",
        "run_id": None,
        "outcome": "success",
        "interrupts": [],
        "closed_at_ms": None,
        "failed_late": False,
        "open_subagents": [],
        "suspended": [],
        "forwards": [],
        "updated_ms": 7,
    }
    out = io.BytesIO()
    out.write(b"\x01")
    schemaless_writer(out, changelog.schema(1), record)
    state = changelog.decode(out.getvalue())
    assert state.status is RunStatus.SUCCEEDED and state.updated_ms == 7


def test_schema_file_is_valid_json_and_versioned():
    raw = orjson.loads((changelog.SCHEMA_DIR / "thread_state.v1.avsc").read_bytes())
    assert raw["namespace"].endswith(".v1")


def test_hints_carry_status_and_open_count_and_tolerate_absence():
    state = full_state()
    headers = changelog.hints(state)
    assert changelog.read_hints(headers) == ("interrupted", 2)
    assert changelog.read_hints([]) is None
    assert changelog.read_hints([("agui-status", b"active"), ("agui-open", b"x")]) is None


def test_a_state_this_version_cannot_hold_is_a_format_error():
    record = changelog.to_dict(ThreadState("t"))
    record["status"] = "paused-in-a-later-version"
    out = io.BytesIO()
    out.write(bytes([changelog.CURRENT_VERSION]))
    schemaless_writer(out, changelog.schema(changelog.CURRENT_VERSION), record)
    with pytest.raises(changelog.ChangelogFormatError, match="unreadable changelog state"):
        changelog.decode(out.getvalue())
