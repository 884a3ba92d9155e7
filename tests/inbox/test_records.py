"""The interrupts topic's records, as a pair's rounds write them (no Kafka: the round)."""

from __future__ import annotations

import orjson
import pytest
from prometheus_client import CollectorRegistry

from gateway.codec import interrupts as records
from gateway.codec.records import OutRecord
from gateway.core.values.thread import InterruptRecord, RunStatus, ThreadState
from gateway.kafka.pairs.agents import GroupTopics
from gateway.kafka.pairs.pair import PairContext, PartitionPair
from gateway.kafka.wire.topics import AgentTopics
from gateway.observe.metrics import Metrics
from gateway.observe.warnings import WarningLimiter
from gateway.settings import Settings
from gateway.state.retention import Retention
from tests.kafka.test_pair import TOPICS, Feed, answer, interrupted, started

TOPIC = "agui.interrupts"


def make_pair(
    topic: str | None = TOPIC,
    retention: Retention | None = None,
    group: bool = False,
    runs: bool = True,
) -> PartitionPair:
    ctx = PairContext(
        False,
        5.0,
        retention or Retention(10**9, 10**9, 10**9),
        Metrics(CollectorRegistry()),
        WarningLimiter(5, 60_000),
        {"replies"}.__contains__,
        interrupts_topic=topic,
        interrupts_runs=runs,
    )
    if not group:
        return PartitionPair(TOPICS, 0, ctx)
    settings = Settings(groups={"team": {"agents": ["bot", "other"]}})  # type: ignore[arg-type]
    topics = AgentTopics(
        "team", "agui.team.events", "agui.team.requests", "agui.team.run-requests",
        "agui.team.gateway-changelog", "agui.rejections", "agui.warnings",
    )  # fmt: skip
    return PartitionPair(topics, 0, ctx, GroupTopics("team", settings))


def is_run(record: OutRecord) -> bool:
    return records.parse_key(record.key or b"")[2] is None


def inbox_out(pair: PartitionPair) -> list[OutRecord]:
    """The round's interrupts records (its run records left out: see `runs_out`)."""
    return [r for r in pair.round.records() if r.topic == TOPIC and not is_run(r)]


def runs_out(pair: PartitionPair, feed: Feed, side: str, value, ts: int) -> list[OutRecord]:
    """One record processed in a round of its own; that round's run records."""
    pair.take(side, [feed.rec(side, value, ts)])
    pair.set_fence(events_end=feed.offsets["events"])
    pair.process(events_position=feed.offsets["events"], mono_now=0.0, wall_ms=ts)
    found = [r for r in pair.round.records() if r.topic == TOPIC and is_run(r)]
    commit(pair)
    return found


def commit(pair: PartitionPair) -> None:
    pair.committed_round(pair.seal(), 0.0)


def run(pair: PartitionPair, feed: Feed, side: str, value, ts: int, **kw) -> list[OutRecord]:
    """One record processed in a round of its own; that round's interrupts records."""
    pair.take(side, [feed.rec(side, value, ts, **kw)])
    pair.set_fence(events_end=feed.offsets["events"])
    pair.process(events_position=feed.offsets["events"], mono_now=0.0, wall_ms=ts)
    found = inbox_out(pair)
    commit(pair)
    return found


def test_an_interrupt_opens_at_run_finished_and_closes_resolved_when_forwarded():
    pair, f = make_pair(), Feed()
    assert run(pair, f, "events", started(), 10) == []
    [opened] = run(pair, f, "events", interrupted("r1", "a"), 20)
    assert records.split_key(opened.key) == ("bot", "t1", "a")
    body = records.Opened.from_json(opened.value)
    assert (body.agent, body.thread, body.run, body.interrupt) == ("bot", "t1", "r1", "a")
    assert body.reason == "tool_call" and body.opened_at_ms == 20 and body.group is None
    [closed] = run(pair, f, "requests", answer("r2", "a"), 30)
    assert closed.key == opened.key and closed.value is None
    headers = dict(closed.headers)
    assert headers[records.HEADER_CLOSED] == b"resolved"
    assert headers[records.HEADER_CLOSED_AT] == b"30"
    assert headers[records.HEADER_OPENED_AT] == b"20"
    # the continuation starting and finishing changes nothing more for `a`
    assert run(pair, f, "events", started("r2"), 40) == []


def test_an_abandoned_interrupt_closes_cancelled():
    pair, f = make_pair(), Feed()
    run(pair, f, "events", started(), 10)
    run(pair, f, "events", interrupted("r1", "a", "b"), 20)
    closed = run(pair, f, "requests", answer("r2", "a", "b", status="cancelled"), 30)
    assert sorted(dict(c.headers)[records.HEADER_CLOSED] for c in closed) == [b"cancelled"] * 2


def test_a_failed_continuation_opens_its_interrupts_again():
    pair, f = make_pair(), Feed()
    run(pair, f, "events", started(), 10)
    run(pair, f, "events", interrupted("r1", "a"), 20)
    run(pair, f, "requests", answer("r2", "a"), 30)
    run(pair, f, "events", started("r2"), 40)
    [reopened] = run(pair, f, "events", {"type": "RUN_ERROR", "message": "boom"}, 50)
    assert reopened.value is not None
    assert records.Opened.from_json(reopened.value).opened_at_ms == 20  # its age goes on


def test_a_new_run_that_does_not_answer_supersedes_the_open_interrupts():
    pair, f = make_pair(), Feed()
    run(pair, f, "events", started(), 10)
    run(pair, f, "events", interrupted("r1", "a"), 20)
    [closed] = run(pair, f, "events", started("r9"), 30)  # no answer went through the gateway
    assert dict(closed.headers)[records.HEADER_CLOSED] == b"superseded"


def test_the_same_id_raised_by_a_later_run_closes_then_opens():
    pair, f = make_pair(), Feed()
    run(pair, f, "events", started(), 10)
    run(pair, f, "events", interrupted("r1", "a"), 20)
    pair.take(
        "events", [f.rec("events", started("r2"), 30), f.rec("events", interrupted("r2", "a"), 31)]
    )
    pair.process(events_position=f.offsets["events"], mono_now=0.0, wall_ms=31)
    closed, opened = inbox_out(pair)
    assert closed.value is None and dict(closed.headers)[records.HEADER_CLOSED] == b"superseded"
    assert records.Opened.from_json(opened.value or b"").run == "r2"


def test_retention_forgetting_an_open_interrupt_closes_it_expired():
    pair, f = make_pair(retention=Retention(1, 1, 1)), Feed()
    run(pair, f, "events", started(), 10)
    run(pair, f, "events", interrupted("r1", "a"), 20)
    pair.sweep(now_ms=10**9)
    [closed] = inbox_out(pair)
    assert dict(closed.headers)[records.HEADER_CLOSED] == b"expired"


def test_on_a_groups_topics_the_record_names_the_agent_and_its_group():
    pair, f = make_pair(group=True), Feed()
    agent = [("agui-agent", b"bot")]
    run(pair, f, "events", started(), 10, headers=agent)
    [opened] = run(pair, f, "events", interrupted("r1", "a"), 20, headers=agent)
    assert records.split_key(opened.key) == ("bot", "t1", "a")
    assert records.Opened.from_json(opened.value or b"").group == "team"
    [closed] = run(pair, f, "requests", answer("r2", "a"), 30, headers=agent)
    assert closed.key == opened.key and closed.value is None


def test_nothing_is_written_when_the_topic_is_off():
    pair, f = make_pair(topic=None), Feed()
    run(pair, f, "events", started(), 10)
    pair.take("events", [f.rec("events", interrupted("r1", "a"), 20)])
    pair.process(events_position=f.offsets["events"], mono_now=0.0, wall_ms=20)
    assert [r.topic for r in pair.round.records()] == [TOPICS.changelog]


def test_a_huge_message_is_cut_to_bound_the_record():
    pair, f = make_pair(), Feed()
    run(pair, f, "events", started(), 10)
    event = interrupted("r1", "a")
    event["outcome"]["interrupts"][0].update(message="m" * 100_000, reason="r" * 5_000)
    [opened] = run(pair, f, "events", event, 20)
    body = records.Opened.from_json(opened.value or b"")
    assert len(body.message or "") == records.MAX_MESSAGE_CHARS
    assert len(body.reason or "") == records.MAX_REASON_CHARS
    assert set(body.cut) == {"message", "reason"} and len(opened.value or b"") < 10_000


def test_a_schema_over_the_cap_is_left_out_and_said_so():
    big = orjson.dumps({"description": "x" * records.MAX_SCHEMA_BYTES})
    state = ThreadState("t1", interrupts_run_id="r1", interrupts_closed_at_ms=5)
    body = records.opened("bot", "t1", state, InterruptRecord("a", "r", response_schema=big))
    assert body.response_schema is None and body.cut == ("responseSchema",)
    assert len(body.to_json()) < 1_000


def test_a_small_schema_is_carried_as_json():
    pair, f = make_pair(), Feed()
    run(pair, f, "events", started(), 10)
    event = interrupted("r1", "a")
    event["outcome"]["interrupts"][0]["responseSchema"] = {"type": "boolean"}
    [opened] = run(pair, f, "events", event, 20)
    assert orjson.loads(opened.value or b"")["responseSchema"] == {"type": "boolean"}


@pytest.mark.parametrize(
    ("agent", "thread", "interrupt"),
    [("bot", "t1", "a"), ("b:o", "t:1:", ":a:"), ("x", "", "é"), ("a" * 20, "t" * 9, "")],
)
def test_keys_split_back_into_their_parts(agent: str, thread: str, interrupt: str) -> None:
    assert records.split_key(records.key(agent, thread, interrupt)) == (agent, thread, interrupt)


@pytest.mark.parametrize("raw", [b"", b"bot:t1:a", b"9:bot:2:t1:a", b"\xff", b"3:bot:x"])
def test_a_key_that_is_not_one_is_refused(raw: bytes) -> None:
    with pytest.raises(records.InterruptKeyError):
        records.split_key(raw)


def test_each_record_says_its_place_among_its_runs_interrupts():
    pair, f = make_pair(), Feed()
    run(pair, f, "events", started(), 10)
    opened = run(pair, f, "events", interrupted("r1", "z", "a", "m"), 20)
    places = {
        records.split_key(r.key)[2]: records.Opened.from_json(r.value or b"").position
        for r in opened
    }
    assert places == {"z": 0, "a": 1, "m": 2}


def test_the_tool_s_name_is_carried_when_the_run_announced_the_call():
    """TOOL_CALL_START goes through the pair's decode (not the deltas' fast path): the
    thread's changelog gets the run's tool call, and the open record its `toolName`."""
    pair, f = make_pair(), Feed()
    run(pair, f, "events", started(), 10)
    tool_start = {"type": "TOOL_CALL_START", "toolCallId": "call-1", "toolCallName": "transfer"}
    pair.take("events", [f.rec("events", tool_start, 15)])
    pair.set_fence(events_end=f.offsets["events"])
    pair.process(events_position=f.offsets["events"], mono_now=0.0, wall_ms=15)
    state = pair.state("t1")
    assert state is not None and state.tool_calls == (("call-1", "transfer"),)
    assert [r.topic for r in pair.round.records()] == [TOPICS.changelog]
    commit(pair)
    event = interrupted("r1", "a", "b")
    event["outcome"]["interrupts"][0]["toolCallId"] = tool_start["toolCallId"]
    opened = {records.split_key(r.key)[2]: r for r in run(pair, f, "events", event, 20)}
    body = orjson.loads(opened["a"].value or b"")
    assert body["toolName"] == "transfer" and body["toolCallId"] == "call-1"
    assert records.Opened.from_json(opened["a"].value or b"").tool_name == "transfer"
    assert "toolName" not in orjson.loads(opened["b"].value or b"")  # as before: no member
    assert records.Opened.from_json(opened["b"].value or b"").tool_name is None


# --- run records: how each thread's latest run closed --------------------------------------


def test_a_run_record_is_keyed_by_the_thread_alone_which_no_interrupt_key_can_be():
    assert records.parse_key(records.run_key("bot", "t:1")) == ("bot", "t:1", None)
    assert records.parse_key(records.key("bot", "t:1", "")) == ("bot", "t:1", "")
    with pytest.raises(records.InterruptKeyError):
        records.split_key(records.run_key("bot", "t1"))
    for raw in (b"3:bot", b"3:bot:2:t", b"3:bot:x:t1"):
        with pytest.raises(records.InterruptKeyError):
            records.parse_key(raw)


def test_each_close_of_a_run_writes_how_it_closed_and_a_run_still_running_nothing():
    pair, f = make_pair(), Feed()
    assert runs_out(pair, f, "events", started("r1"), 10) == []
    [record] = runs_out(pair, f, "events", interrupted("r1", "a"), 20)
    assert record.key == records.run_key("bot", "t1")
    closed = records.RunClosed.from_json(record.value or b"")
    assert (closed.run, closed.status, closed.agent, closed.thread) == (
        "r1",
        "interrupted",
        "bot",
        "t1",
    )
    assert runs_out(pair, f, "events", started("r2"), 30) == []
    finished = {"type": "RUN_FINISHED", "threadId": "t1", "runId": "r2"}
    [record] = runs_out(pair, f, "events", finished, 40)
    assert records.RunClosed.from_json(record.value or b"").status == "succeeded"
    late = {"type": "RUN_ERROR", "message": "boom"}
    [record] = runs_out(pair, f, "events", late, 50)  # a late RUN_ERROR: the run failed
    assert records.RunClosed.from_json(record.value or b"").status == "failed"


def test_a_forgotten_thread_s_run_record_is_a_tombstone():
    old = ThreadState("t1", status=RunStatus.SUCCEEDED, run_id="r1", closed_at_ms=5)
    assert records.run_record("bot", "t1", old, None, 10) == (records.run_key("bot", "t1"), None)
    assert records.run_record("bot", "t1", None, None, 10) is None
    assert records.run_record("bot", "t1", old, old, 10) is None  # nothing changed
    active = ThreadState("t1", status=RunStatus.ACTIVE, run_id="r2")
    assert records.run_record("bot", "t1", old, active, 10) is None


@pytest.mark.parametrize("value", [b"{}", b'{"v":1,"kind":"run","status":"later"}', b"[]"])
def test_a_value_that_is_not_a_run_record_is_refused(value):
    with pytest.raises(ValueError):
        records.RunClosed.from_json(value)


def test_without_run_records_a_run_s_close_writes_none():
    pair, f = make_pair(runs=False), Feed()
    runs_out(pair, f, "events", started("r1"), 10)
    assert runs_out(pair, f, "events", interrupted("r1", "a"), 20) == []
