import io
from dataclasses import replace
from pathlib import Path

import orjson
import ormsgpack
import pytest
from fastavro import schemaless_writer

from gateway.codec import changelog, jsonio
from gateway.core.requests.sweep import answered_ids
from gateway.core.values.thread import (
    FORWARDS_KEPT,
    ForwardRecord,
    InterruptRecord,
    RunStatus,
    SuspendedSubagent,
    ThreadState,
    to_dict,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


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
                b'{"properties":{"x":{"type":"integer"}},"type":"object"}',
                "2030-01-01T00:00:00Z",
                {"k": [1, None, {"n": 2.5}]},
                "sub-1",
                True,
            ),
            InterruptRecord("b", "input_required"),
            InterruptRecord("c", "x", response_schema_unusable="$ref '#/nowhere' points nowhere"),
        ),
        closed_at_ms=1_700_000_000_000,
        failed_late=True,
        open_subagents=("s2",),
        suspended=(SuspendedSubagent("sub-1", ("a",)),),
        forwards=(ForwardRecord("r2", "ff00", "r1", ("a", "b"), settled=True),),
        updated_ms=42,
        interrupts_run_id="r0",  # a continuation r1 failed: r0's interrupts stay open
        interrupts_closed_at_ms=1_600_000_000_000,
        held_interrupts=(InterruptRecord("h", "tool_call", metadata={"m": 1}),),
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


@pytest.mark.parametrize("version", changelog.AVRO_VERSIONS)
def test_schema_file_is_valid_json_and_versioned(version):
    raw = orjson.loads((REPO_ROOT / "schemas" / f"thread_state.v{version}.avsc").read_bytes())
    assert raw["namespace"].endswith(f".v{version}")


def v1_value(state: ThreadState) -> bytes:
    """`state` as a gateway writing format version 1 wrote it."""
    record = to_dict(state)
    del record["interrupts_run_id"], record["interrupts_closed_at_ms"], record["held_interrupts"]
    for item in record["interrupts"]:
        item["response_schema_json"] = item.pop("response_schema")
        meta = item.pop("metadata")
        item["metadata_json"] = None if meta is None else jsonio.dumps(meta).decode()
        del item["response_schema_unusable"]
    out = io.BytesIO()
    out.write(b"\x01")
    schemaless_writer(out, changelog.schema(1), record)
    return out.getvalue()


def test_a_version_1_state_with_open_interrupts_restores_them_as_its_latest_runs():
    """v1 had no interrupts_run_id: its open interrupts were always its latest run's."""
    v1 = replace(
        full_state(), interrupts_run_id=None, interrupts_closed_at_ms=None, held_interrupts=()
    )
    v1 = replace(v1, interrupts=v1.interrupts[:2])  # v1 had no response_schema_unusable
    restored = changelog.decode(v1_value(v1))
    assert restored == replace(
        v1, interrupts_run_id="r1", interrupts_closed_at_ms=1_700_000_000_000
    )
    # and judged as before: the forward that answered r1 still holds its answers
    assert answered_ids(replace(restored, forwards=(ForwardRecord("r2", "ff", "r1", ("a",)),))) == {
        "a"
    }


def test_every_version_restores_a_state_without_open_interrupts():
    state = replace(
        full_state(),
        interrupts=(),
        interrupts_run_id=None,
        interrupts_closed_at_ms=None,
        held_interrupts=(),
    )
    assert changelog.decode(v1_value(state)) == state
    assert changelog.decode(changelog.encode(state)) == state


def test_hints_carry_status_and_open_count_and_tolerate_absence():
    state = full_state()
    headers = changelog.hints(state)
    assert changelog.read_hints(headers) == ("interrupted", 3)
    assert changelog.read_hints([]) is None
    assert changelog.read_hints([("agui-status", b"active"), ("agui-open", b"x")]) is None


def test_a_state_this_version_cannot_hold_is_a_format_error():
    record = to_dict(ThreadState("t"))
    record["status"] = "paused-in-a-later-version"
    out = io.BytesIO()
    out.write(b"\x03")
    schemaless_writer(out, changelog.schema(3), record)
    with pytest.raises(changelog.ChangelogFormatError, match="unreadable changelog state"):
        changelog.decode(out.getvalue())
    with pytest.raises(changelog.ChangelogFormatError, match="run status 9"):
        changelog.decode(b"\x04" + ormsgpack.packb(["t", 9]))


# --- E: the largest state the core's bounds admit fits one changelog record -----------------


def _long(prefix: str, size: int) -> str:
    """A string of exactly `size` UTF-8 bytes, mostly 4-byte characters, unique by prefix."""
    rest = size - len(prefix.encode())
    return prefix + "\U0001d11e" * (rest // 4) + "x" * (rest % 4)


def test_the_largest_state_the_bounds_admit_fits_a_changelog_record():
    """Every bound at its maximum (and the streams beyond it): no state is ever slimmed.

    Built through the core, so each bound is the one the lifecycle enforces; ids,
    interrupt content, subagents, suspensions and forwards all at their worst at
    once, with a record key (thread id) of the 8 KiB the service accepts.
    """
    from gateway.core import apply_event, judge
    from gateway.core.values.thread import (
        MAX_ID_BYTES,
        MAX_IDS_PER_SUSPENSION,
        MAX_INTERRUPT_CONTENT_BYTES,
        MAX_INTERRUPTS_PER_RUN,
        MAX_OPEN_SUBAGENTS,
        MAX_SUSPENDED,
        MAX_TOOL_CALLS_PER_RUN,
        MAX_TOOL_NAME_BYTES,
        RunStatus,
    )
    from gateway.kafka.pairs.pair import MAX_KEY_BYTES, MAX_RECORD_BYTES

    thread = _long("t", MAX_KEY_BYTES)
    state = None
    at = 1

    def apply(event):
        nonlocal state, at
        at += 1
        state = apply_event(state, thread, event, at).state

    per_interrupt = MAX_INTERRUPT_CONTENT_BYTES // MAX_INTERRUPTS_PER_RUN
    for cycle in range(FORWARDS_KEPT + 1):
        run = _long(f"run-{cycle}-", MAX_ID_BYTES)
        apply({"type": "RUN_STARTED", "threadId": thread, "runId": run})
        for n in range(MAX_SUSPENDED + 2):
            sub = _long(f"sub-{cycle}-{n}-", MAX_ID_BYTES)
            apply({"type": "SUBAGENT_STARTED", "subagentRunId": sub, "name": "x"})
            ids = [_long(f"i{k}-", MAX_ID_BYTES) for k in range(MAX_IDS_PER_SUSPENSION + 5)]
            apply(
                {
                    "type": "SUBAGENT_FINISHED",
                    "subagentRunId": sub,
                    "outcome": {"type": "suspended", "interruptIds": ids},
                }
            )
        interrupts = [
            {
                "id": _long(f"{cycle}-{k}-", MAX_ID_BYTES),
                "reason": "r" * 64,
                "message": "m" * 64,
                "toolCallId": _long(f"c{k}-", MAX_ID_BYTES),
                "subagentRunId": _long(f"s{k}-", MAX_ID_BYTES),
                "expiresAt": "2999-01-01T00:00:00Z",
                "metadata": {"k": "v"},
                "responseSchema": {"description": "d" * (per_interrupt - 300)},
            }
            for k in range(MAX_INTERRUPTS_PER_RUN)
        ]
        for i in interrupts:  # each names a tool call the run announced: a tool name each
            name = _long(f"tool-{i['toolCallId'][:4]}-", MAX_TOOL_NAME_BYTES)
            apply({"type": "TOOL_CALL_START", "toolCallId": i["toolCallId"], "toolCallName": name})
        apply(
            {
                "type": "RUN_FINISHED",
                "threadId": thread,
                "runId": run,
                "outcome": {"type": "interrupt", "interrupts": interrupts},
            }
        )
        assert state is not None and len(state.interrupts) == MAX_INTERRUPTS_PER_RUN
        assert state.interrupts[0].response_schema is not None  # within the content bound
        resume = [{"interruptId": i["id"], "status": "cancelled"} for i in interrupts]
        request = {
            "threadId": thread,
            "runId": _long(f"req-{cycle}-", MAX_ID_BYTES),
            "messages": [],
            "resume": resume,
        }
        decision, state = judge(state, request, at, thread_id=thread)
        assert decision.verdict == "forward", decision.to_json()
    apply({"type": "RUN_STARTED", "threadId": thread, "runId": _long("last-", MAX_ID_BYTES)})
    for n in range(MAX_OPEN_SUBAGENTS + 5):
        apply(
            {
                "type": "SUBAGENT_STARTED",
                "subagentRunId": _long(f"open-{n}-", MAX_ID_BYTES),
                "name": "x",
            }
        )
    for n in range(MAX_TOOL_CALLS_PER_RUN + 5):
        apply(
            {
                "type": "TOOL_CALL_START",
                "toolCallId": _long(f"call-{n}-", MAX_ID_BYTES),
                "toolCallName": _long(f"tool-{n}-", MAX_TOOL_NAME_BYTES),
            }
        )
    assert state is not None and state.status is RunStatus.ACTIVE
    assert len(state.tool_calls) == MAX_TOOL_CALLS_PER_RUN
    assert len(state.held_interrupts) == MAX_INTERRUPTS_PER_RUN  # held by the continuation
    assert all(i.tool_name is not None for i in state.held_interrupts)
    assert len(state.open_subagents) == MAX_OPEN_SUBAGENTS
    assert len(state.suspended) == MAX_SUSPENDED
    assert {len(s.interrupt_ids) for s in state.suspended} == {MAX_IDS_PER_SUSPENSION}
    assert len(state.forwards) == FORWARDS_KEPT
    assert {len(f.interrupt_ids) for f in state.forwards} == {MAX_INTERRUPTS_PER_RUN}
    value = changelog.encode(state)
    print(f"worst-case changelog value: {len(value):,} bytes")
    assert len(value) <= MAX_RECORD_BYTES, len(value)
    assert changelog.decode(value) == state


# --- v3: a responseSchema is judged when recorded and kept as canonical bytes -------------


def v2_value(schemas: list[object]) -> bytes:
    """A state with one open interrupt per schema, as a gateway writing version 2 wrote
    it: each schema as received (any key order, usable or not)."""
    record = to_dict(
        ThreadState(
            "t",
            RunStatus.INTERRUPTED,
            "r1",
            "interrupt",
            interrupts_run_id="r1",
            interrupts_closed_at_ms=5,
        )
    )
    record["interrupts"] = [
        {"id": f"i{n}", "reason": "r", "response_schema_json": orjson.dumps(schema).decode()}
        for n, schema in enumerate(schemas)
    ]
    out = io.BytesIO()
    out.write(b"\x02")
    schemaless_writer(out, changelog.schema(2), record)
    return out.getvalue()


def test_a_version_2_schema_is_judged_on_restore_as_when_recorded():
    usable = {"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}}
    too_large = {"enum": ["x" * 100_000]}
    restored = changelog.decode(v2_value([usable, too_large, {"$ref": "https://x/y"}]))
    kept, large, remote = restored.interrupts
    assert kept.response_schema == orjson.dumps(usable, option=orjson.OPT_SORT_KEYS)
    assert kept.response_schema_unusable is None
    assert large.response_schema is None and "over 65,536" in (large.response_schema_unusable or "")
    assert remote.response_schema is None and "not a local" in (
        remote.response_schema_unusable or ""
    )
    # written again as version 4, read back unchanged; a later value is read, not re-judged
    again = changelog.encode(restored)
    assert again[0] == changelog.CURRENT_VERSION == 4
    assert changelog.decode(again) == restored


def test_restored_threads_with_one_schema_share_its_bytes():
    from gateway.core.reading import response_schema

    schema = {"type": "object", "properties": {"shared": {"type": "string"}}}
    kept, _, _ = response_schema.record(schema)  # the cache knows it, as after a first use
    value = v2_value([schema])
    one, two = changelog.decode(value), changelog.decode(changelog.encode(changelog.decode(value)))
    assert one.interrupts[0].response_schema is kept
    assert two.interrupts[0].response_schema is kept


def test_a_state_keeps_no_schema_tree_only_bytes_within_the_schema_limit():
    from gateway.core import apply_event
    from gateway.core.reading.response_schema import MAX_SCHEMA_BYTES

    state = apply_event(None, "t", {"type": "RUN_STARTED", "threadId": "t", "runId": "r"}, 1)
    interrupts = [
        {"id": "a", "reason": "r", "responseSchema": {"type": "object", "title": "t" * 1000}},
        {"id": "b", "reason": "r", "responseSchema": {"enum": ["x" * 200_000]}},
    ]
    finished = {
        "type": "RUN_FINISHED",
        "threadId": "t",
        "runId": "r",
        "outcome": {"type": "interrupt", "interrupts": interrupts},
    }
    new = apply_event(state.state, "t", finished, 2).state
    assert new is not None
    a, b = new.interrupts
    assert isinstance(a.response_schema, bytes) and len(a.response_schema) <= MAX_SCHEMA_BYTES
    assert b.response_schema is None and b.response_schema_unusable  # the verdict, not 200 KB
    assert len(changelog.encode(new)) < 2_000


# --- v4: a positional MessagePack array; versions 1-3 (Avro) still restore ------------------


def v3_value(state: ThreadState) -> bytes:
    """`state` as a gateway writing format version 3 wrote it."""
    record = to_dict(state)
    for item in (*record["interrupts"], *record["held_interrupts"]):
        item["response_schema_json"] = item.pop("response_schema")
        meta = item.pop("metadata")
        item["metadata_json"] = None if meta is None else jsonio.dumps(meta).decode()
    out = io.BytesIO()
    out.write(b"\x03")
    schemaless_writer(out, changelog.schema(3), record)
    return out.getvalue()


def test_a_version_3_value_restores_every_field_and_is_written_again_as_version_4():
    state = full_state()
    restored = changelog.decode(v3_value(state))
    assert restored == state
    again = changelog.encode(restored)
    assert again[0] == 4
    assert changelog.decode(again) == state


def test_version_4_leaves_out_trailing_defaults_and_reads_them_back():
    assert changelog.encode(ThreadState("t")) == b"\x04" + ormsgpack.packb(["t", 0])
    assert changelog.decode(b"\x04" + ormsgpack.packb(["t"])) == ThreadState("t")
    idle = ThreadState("t", RunStatus.SUCCEEDED, "r", "success", closed_at_ms=5, updated_ms=5)
    assert ormsgpack.unpackb(changelog.encode(idle)[1:]) == ["t", 2, "r", "success", 5, 5]
    assert changelog.decode(changelog.encode(idle)) == idle


def test_version_4_keeps_text_unescaped_and_metadata_exact():
    """Control characters cost no escaping (the record size bound holds as for Avro), and
    metadata keeps integers beyond 64 bits exactly."""
    message = "\x01" * 1000
    state = replace(
        full_state(),
        interrupts=(InterruptRecord("a", "r", message, metadata={"big": 2**70, "f": 1.5}),),
    )
    value = changelog.encode(state)
    assert len(value) < 1400
    assert changelog.decode(value) == state


@pytest.mark.parametrize(
    "body",
    [
        b"\xc1",  # not MessagePack
        ormsgpack.packb({"thread_id": "t"}),  # not an array
        ormsgpack.packb([]),  # no thread id
        ormsgpack.packb([1]),  # a thread id that is not text
        ormsgpack.packb(["t", "active"]),  # a status by name, not by code
        ormsgpack.packb(["t", 2, None, None, None, None, None, None, [["a"]]]),  # no reason
        ormsgpack.packb(["t", 2, None, None, None, None, None, None, [["a", "r", 1]]]),
        ormsgpack.packb(["t", 2, None, None, None, None, None, None, [], [["r", "f", None, [1]]]]),
        ormsgpack.packb(["t", 2, None, None, "5"]),  # closed_at_ms as text
        ormsgpack.packb(["t", 2, *[None] * 20]),  # more fields than version 4 has
        ormsgpack.packb(
            ["t", 3, None, None, None, None, None, None, [["a", "r", None, None, "x"]]]
        ),
    ],
)
def test_unreadable_version_4_values_raise_a_specific_error(body):
    with pytest.raises(changelog.ChangelogFormatError):
        changelog.decode(b"\x04" + body)


def test_an_unknown_version_is_a_format_error():
    with pytest.raises(changelog.ChangelogFormatError, match="unknown changelog format version 5"):
        changelog.decode(b"\x05" + ormsgpack.packb(["t"]))


def test_a_held_state_leaves_out_its_thread_id_and_reads_back_with_the_key():
    state = full_state()
    held = changelog.encode_held(state)
    assert state.thread_id.encode() not in held
    assert len(held) < len(changelog.encode(state))
    assert changelog.decode_held(held, state.thread_id) == state
    # a restored changelog value of any version reads the same way
    assert changelog.decode_held(changelog.encode(state), state.thread_id) == state
    assert changelog.decode_held(v3_value(state), state.thread_id) == state


@pytest.mark.parametrize("id_chars", [1, 31, 32, 255, 256, 70_000])
def test_held_bytes_cut_from_a_value_are_the_held_encoding(id_chars):
    # fixstr, str 8, str 16 and str 32 thread ids; full and nearly empty states
    for state in (
        replace(full_state(), thread_id="t" * id_chars),
        ThreadState("é" * id_chars),
        ThreadState("x" * id_chars, RunStatus.SUCCEEDED, run_id="r"),
    ):
        held = changelog.held_from(changelog.encode(state))
        assert held == changelog.encode_held(state)
        assert changelog.decode_held(held, state.thread_id) == state


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"\x04",
        b"\x04\x92",
        b"\x01\x92\xa1a\x00",
        b"\x04\xdc\x00\x02\xa1a\x00",
        b"\x04\x92\x00\x00",
        b"\x04\x92\xa5ab",
    ],
)
def test_held_bytes_are_not_cut_from_what_encode_does_not_write(value):
    assert changelog.held_from(value) is None


# --- tool names: an interrupt's, and the active run's tool calls ----------------------------


def test_tool_names_and_the_active_run_s_tool_calls_round_trip_as_trailing_fields():
    closed = replace(
        full_state(),
        interrupts=(
            InterruptRecord("a", "tool_call", tool_call_id="call-1", tool_name="transfer"),
            InterruptRecord("b", "input_required"),
        ),
        held_interrupts=(InterruptRecord("h", "r", tool_call_id="c", tool_name="lookup"),),
    )
    assert changelog.decode(changelog.encode(closed)) == closed
    body = ormsgpack.unpackb(changelog.encode(closed)[1:])
    assert body[8][0] == ["a", "tool_call", None, "call-1", *[None] * 4, False, None, "transfer"]
    assert body[8][1] == ["b", "input_required"]  # no tool name: written as before
    active = ThreadState(
        "t", RunStatus.ACTIVE, "r1", tool_calls=(("call-1", "transfer"), ("call-2", "ü"))
    )
    value = changelog.encode(active)
    assert ormsgpack.unpackb(value[1:])[14] == [["call-1", "transfer"], ["call-2", "ü"]]
    assert changelog.decode(value) == active
    assert changelog.decode_held(changelog.encode_held(active), "t") == active


def test_a_state_without_tool_names_is_written_as_an_older_gateway_wrote_it():
    """So an older gateway still reads every state that holds no tool name and no tool
    call (the values are the same bytes); and this one reads what an older one wrote."""
    written_before = b"\x04" + ormsgpack.packb(
        ["t", 3, "r1", "interrupt", 5, 5, "r1", 5, [["a", "tool_call", None, "call-1"]]]
    )
    state = changelog.decode(written_before)
    assert state.interrupts[0].tool_call_id == "call-1"
    assert state.interrupts[0].tool_name is None and state.tool_calls == ()
    assert changelog.encode(state) == written_before
    assert changelog.decode(v3_value(full_state())).tool_calls == ()


@pytest.mark.parametrize(
    "tool_calls",
    [[["c"]], [["c", 1]], [[1, "n"]], ["c"], [["c", "n", "x"]], "c"],
)
def test_unreadable_tool_calls_raise_a_specific_error(tool_calls):
    body = ["t", 1, "r", *[None] * 5, [], [], [], [], [], False, tool_calls]
    with pytest.raises(changelog.ChangelogFormatError):
        changelog.decode(b"\x04" + ormsgpack.packb(body))
