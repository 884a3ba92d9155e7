"""The partition pair's merge, effects and round bookkeeping, without Kafka."""

from __future__ import annotations

import orjson
import pytest
from aiokafka.consumer import fetcher
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from prometheus_client import CollectorRegistry

from gateway.codec import changelog, jsonio
from gateway.codec.records import InRecord
from gateway.kafka.pairs import shaping
from gateway.kafka.pairs.pair import PairContext, PartitionPair
from gateway.kafka.wire import asread
from gateway.kafka.wire.topics import AgentTopics
from gateway.observe.metrics import Metrics
from gateway.observe.warnings import WarningLimiter
from gateway.state.retention import Retention

TOPICS = AgentTopics(
    "bot",
    "agui.bot.events",
    "agui.bot.requests",
    "agui.bot.run-requests",
    "agui.bot.gateway-changelog",
    "agui.rejections",
    "agui.warnings",
)


def make_pair(
    *,
    strict: bool = False,
    wait_s: float = 5.0,
    topics: set[str] | None = None,
    retention: Retention | None = None,
    agent_topics: AgentTopics = TOPICS,
    burst: int = 5,
) -> tuple[PartitionPair, CollectorRegistry]:
    registry = CollectorRegistry()
    known = topics if topics is not None else {"replies"}
    ctx = PairContext(
        strict,
        wait_s,
        retention or Retention(10**9, 10**9, 10**9),
        Metrics(registry),
        WarningLimiter(burst, 60_000),
        known.__contains__,
    )
    pair = PartitionPair(agent_topics, 0, ctx)
    return pair, registry


class Feed:
    def __init__(self) -> None:
        self.offsets = {"events": 0, "requests": 0}

    def rec(self, side: str, value, ts: int, key: str | None = "t1", headers=()) -> InRecord:
        offset = self.offsets[side]
        self.offsets[side] += 1
        body = value if isinstance(value, bytes) or value is None else orjson.dumps(value)
        return InRecord(
            f"agui.bot.{side}",
            0,
            offset,
            ts,
            1,  # LogAppendTime
            key.encode() if key else None,
            body,
            tuple(headers),
            received=0.0,
        )


def started(run="r1"):
    return {"type": "RUN_STARTED", "threadId": "t1", "runId": run}


def interrupted(run="r1", *ids):
    return {
        "type": "RUN_FINISHED",
        "threadId": "t1",
        "runId": run,
        "outcome": {
            "type": "interrupt",
            "interrupts": [{"id": i, "reason": "tool_call"} for i in ids or ("a",)],
        },
    }


def answer(run="r2", *ids, status="resolved"):
    return {
        "threadId": "t1",
        "runId": run,
        "messages": [],
        "resume": [{"interruptId": i, "status": status} for i in ids or ("a",)],
    }


def out_topics(pair: PartitionPair) -> list[str]:
    return [r.topic for r in pair.round.out]


def commit(pair: PartitionPair, mono: float = 0.0) -> None:
    """The open round's transaction committed."""
    pair.committed_round(pair.seal(), mono)


def sample(registry, name, **labels):
    return registry.get_sample_value(name, labels) or 0.0


def test_events_and_requests_merge_in_timestamp_order():
    pair, _ = make_pair()
    f = Feed()
    pair.take("events", [f.rec("events", started(), 10), f.rec("events", interrupted(), 20)])
    pair.take("requests", [f.rec("requests", answer(), 15), f.rec("requests", answer("r3"), 25)])
    pair.set_fence(events_end=2)
    pair.process(events_position=2, mono_now=0.0, wall_ms=0)
    # at ts 15 the run is active: run_active; at ts 25 it is interrupted: forwarded
    assert out_topics(pair) == ["agui.rejections", "agui.bot.run-requests"]
    rejection = orjson.loads(pair.round.out[0].value)
    assert [r["code"] for r in rejection["reasons"]] == ["run_active"]
    assert pair.round.offsets == {"events": 2, "requests": 2}


def test_request_waits_for_the_events_fence_then_is_judged_on_fresh_state():
    pair, _ = make_pair()
    f = Feed()
    pair.take("events", [f.rec("events", started(), 10)])
    pair.take("requests", [f.rec("requests", answer(), 30)])
    pair.set_fence(events_end=2)  # RUN_FINISHED (offset 1) is in the log but not yet fetched
    pair.process(events_position=1, mono_now=100.0, wall_ms=0)
    assert pair.round.out == [] and len(pair.merge.requests) == 1  # waiting, nothing judged
    pair.take("events", [f.rec("events", interrupted(), 20)])
    pair.process(events_position=2, mono_now=100.5, wall_ms=0)
    assert out_topics(pair) == ["agui.bot.run-requests"]


def test_a_request_whose_events_side_lags_past_the_wait_is_rejected_as_events_lagging():
    pair, registry = make_pair(wait_s=1.0)
    f = Feed()
    pair.take(
        "requests", [f.rec("requests", answer(), 30, headers=[("agui-reply-to", b"replies")])]
    )
    pair.set_fence(events_end=5)
    pair.process(events_position=0, mono_now=10.0, wall_ms=0)
    assert pair.round.out == []  # waits for the events side, bounded
    pair.process(events_position=0, mono_now=11.5, wall_ms=0)
    # never judged on missing state: rejected, retryable, on both the rejections and
    # the reply topic; nothing forwarded
    assert out_topics(pair) == ["agui.rejections", "replies"]
    rejection = orjson.loads(pair.round.out[0].value)
    assert rejection["verdict"] == "reject"
    assert [r["code"] for r in rejection["reasons"]] == ["events_lagging"]
    assert pair.round.offsets == {"requests": 1}
    commit(pair, 12.0)
    assert sample(registry, "agui_gateway_merge_wait_expired_total", agent="bot") == 1
    assert (
        sample(registry, "agui_gateway_rejections_total", agent="bot", reason="events_lagging") == 1
    )
    assert pair.state("t1") is None  # nothing remembered of a request not judged


def test_an_overloaded_pair_never_forwards_a_request_unjudged():
    """Events far behind (overload): every request waiting past the wait is rejected as
    events_lagging, even one that would be forwarded (an unknown thread, lenient mode)."""
    pair, registry = make_pair(wait_s=0.5)
    f = Feed()
    requests = [f.rec("requests", answer(f"r{i}"), 100 + i) for i in range(20)]
    pair.take("requests", requests)
    pair.set_fence(events_end=10_000)  # the events side holds 10,000 records not read yet
    for step in range(5):
        pair.process(events_position=step, mono_now=1.0 + step, wall_ms=0)
    topics = out_topics(pair)
    assert "agui.bot.run-requests" not in topics
    assert topics == ["agui.rejections"] * 20
    codes = {orjson.loads(r.value)["reasons"][0]["code"] for r in pair.round.out}
    assert codes == {"events_lagging"}


def test_a_caught_up_events_side_still_says_thread_unknown():
    pair, _ = make_pair(strict=True, wait_s=0.5)
    f = Feed()
    pair.take("requests", [f.rec("requests", answer(), 30)])
    pair.set_fence(events_end=3)
    pair.process(events_position=3, mono_now=0.0, wall_ms=0)  # caught up: judged at once
    rejection = orjson.loads(pair.round.out[0].value)
    assert [r["code"] for r in rejection["reasons"]] == ["thread_unknown"]


def test_a_request_not_covered_by_the_fence_needs_a_new_one():
    pair, _ = make_pair()
    f = Feed()
    pair.take("requests", [f.rec("requests", answer(), 30)])
    assert pair.needs_fence()
    pair.set_fence(events_end=0)
    assert not pair.needs_fence()
    pair.process(events_position=0, mono_now=0, wall_ms=0)
    pair.take("requests", [f.rec("requests", answer("r9"), 40)])
    assert pair.needs_fence()


def test_metrics_and_state_become_visible_only_on_commit():
    pair, registry = make_pair()
    f = Feed()
    pair.take(
        "events", [f.rec("events", started(), 1), f.rec("events", interrupted("r1", "a", "b"), 2)]
    )
    pair.process(None, 0, 0)
    assert pair.state("t1").status == "interrupted"
    assert sample(registry, "agui_gateway_runs_closed_total", agent="bot", outcome="interrupt") == 0
    records = pair.round.changelog_records()
    assert [r.topic for r in records] == ["agui.bot.gateway-changelog"]
    assert records[0].partition == 0 and records[0].key == b"t1"
    assert changelog.decode(records[0].value).interrupts[1].id == "b"
    commit(pair, 1.0)
    assert sample(registry, "agui_gateway_runs_closed_total", agent="bot", outcome="interrupt") == 1
    assert (
        sample(registry, "agui_gateway_interrupts_raised_total", agent="bot", reason="tool_call")
        == 2
    )
    assert sample(registry, "agui_gateway_events_total", agent="bot", type="RUN_STARTED") == 1
    assert pair.open_interrupts == 2 and pair.thread_count == 1


def test_abort_forgets_the_round():
    pair, registry = make_pair()
    f = Feed()
    pair.take("events", [f.rec("events", started(), 1)])
    pair.process(None, 0, 0)
    pair.aborted()
    assert pair.state("t1") is None
    assert pair.round.out == [] and pair.round.offsets == {}
    commit(pair, 0)
    assert sample(registry, "agui_gateway_events_total", agent="bot", type="RUN_STARTED") == 0


def test_forward_keeps_correlation_and_replies_with_latency_observed():
    pair, registry = make_pair()
    f = Feed()
    pair.take("events", [f.rec("events", started(), 1_000), f.rec("events", interrupted(), 2_000)])
    headers = (("agui-reply-to", b"replies"), ("agui-correlation-id", b"c-7"))
    pair.take("requests", [f.rec("requests", answer(), 62_000, headers=headers)])
    pair.set_fence(2)
    pair.process(2, 0, 0)
    forward, reply = pair.round.out
    assert forward.topic == "agui.bot.run-requests" and forward.key == b"t1"
    assert ("agui-correlation-id", b"c-7") in forward.headers
    assert reply.topic == "replies"
    assert orjson.loads(reply.value)["verdict"] == "forward"
    commit(pair, 0)
    labels = {"agent": "bot", "reason": "tool_call", "status": "resolved"}
    assert registry.get_sample_value("agui_gateway_interrupt_response_seconds_sum", labels) == 60.0


def read_as_fetched(records: list[InRecord]) -> list[object]:
    """The records as the gateway's consumer gets them: decoded from a fetched batch,
    no topic nor partition (`asread`)."""
    batch = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for r in records:
        batch.append(r.offset, r.timestamp, r.key, r.value, list(r.headers))
    asread.install()
    return list(
        fetcher.PartitionRecords(
            None, MemoryRecords(bytes(batch.build())), [], 0, asread.as_read, None, True, 0
        )
    )


def test_records_read_as_fetched_are_judged_and_named_with_the_pairs_topics():
    """The gateway's consumer gives the pair records without topic or partition: its
    warnings, rejections and audit name where they were read all the same."""
    pair, registry = make_pair(topics=set())
    f = Feed()
    delta = b'{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x"}'
    events = [started(), delta, b"\x00\x01", interrupted()]
    pair.take("events", read_as_fetched([f.rec("events", e, n + 1) for n, e in enumerate(events)]))
    headers = (("agui-reply-to", b"nowhere"), ("agui-correlation-id", b"c-1"))
    pair.take(
        "requests",
        read_as_fetched(
            [
                f.rec("requests", answer(), 10, headers=headers),
                f.rec("requests", answer("r3"), 11, key="t2"),  # key and threadId differ
            ]
        ),
    )
    pair.set_fence(4)
    pair.process(4, 0, 0)
    out = [(r.topic, orjson.loads(r.value)) for r in pair.round.out]
    violation, forward, unsent, unknown, rejection = out
    assert violation[1]["rule"] == "malformed_event"
    assert violation[1]["source"] == {"topic": "agui.bot.events", "partition": 0, "offset": 2}
    assert forward[0] == "agui.bot.run-requests" and forward[1]["runId"] == "r2"
    assert unsent[1]["source"] == {"topic": "agui.bot.requests", "partition": 0, "offset": 0}
    second = {"topic": "agui.bot.requests", "partition": 0, "offset": 1}
    assert unknown[1]["source"] == second and rejection[1]["source"] == second
    assert rejection[0] == "agui.rejections"
    assert pair.round.offsets == {"events": 4, "requests": 2}
    commit(pair, 0)
    assert (
        sample(registry, "agui_gateway_events_total", agent="bot", type="TEXT_MESSAGE_CONTENT") == 1
    )


def test_reply_to_an_unknown_topic_is_a_warning_not_a_send():
    pair, _ = make_pair(topics=set())
    f = Feed()
    pair.take("requests", [f.rec("requests", answer(), 5, headers=(("agui-reply-to", b"nope"),))])
    pair.set_fence(0)
    pair.process(0, 0, 0)
    warnings = [orjson.loads(r.value) for r in pair.round.out if r.topic == "agui.warnings"]
    assert "reply_topic_unknown" in {w["code"] for w in warnings}
    assert "nope" not in out_topics(pair)


@pytest.mark.parametrize(
    ("value", "key", "code"),
    [
        (b"\xff\xfe", "t1", "malformed_input"),
        (b"{oops", "t1", "malformed_input"),
        (b"[]", "t1", "malformed_input"),
        (None, "t1", "malformed_input"),
        (orjson.dumps(answer()), None, "thread_mismatch"),
    ],
)
def test_poison_requests_are_rejected_with_the_original_kept(value, key, code):
    pair, _ = make_pair()
    f = Feed()
    pair.take("requests", [f.rec("requests", value, 5, key=key)])
    pair.set_fence(0)
    pair.process(0, 0, 0)
    (rejection,) = [orjson.loads(r.value) for r in pair.round.out if r.topic == "agui.rejections"]
    assert rejection["reasons"][0]["code"] == code
    assert {"input", "inputText", "inputBase64"} & set(rejection)
    assert pair.round.offsets == {"requests": 1}


def test_undecodable_event_is_a_violation_and_the_partition_moves_on():
    pair, _ = make_pair()
    f = Feed()
    pair.take("events", [f.rec("events", b"\x00\x01", 1), f.rec("events", started(), 2)])
    pair.process(None, 0, 0)
    warning = orjson.loads(pair.round.out[0].value)
    assert warning["code"] == "protocol_violation" and warning["rule"] == "malformed_event"
    assert pair.state("t1").status == "active"
    assert pair.round.offsets == {"events": 2}


def test_streaming_deltas_in_an_active_run_skip_parsing():
    pair, registry = make_pair()
    f = Feed()
    delta = b'{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x"}'
    broken_delta = b'{"type":"TEXT_MESSAGE_CONTENT", broken'
    pair.take(
        "events",
        [
            f.rec("events", started(), 1),
            f.rec("events", delta, 2),
            f.rec("events", broken_delta, 3),
        ],
    )
    pair.process(None, 0, 0)
    assert pair.round.out == []  # the delta's body is never read: nothing to warn about
    commit(pair, 0)
    assert (
        sample(registry, "agui_gateway_events_total", agent="bot", type="TEXT_MESSAGE_CONTENT") == 2
    )


def test_sweep_announces_expiry_once_and_forgets_past_retention():
    pair, registry = make_pair(
        retention=Retention(thread_ms=1_000, interrupt_grace_ms=500, interrupt_ms=10_000)
    )
    f = Feed()
    finished = interrupted()
    finished["outcome"]["interrupts"][0]["expiresAt"] = "1970-01-01T00:00:05Z"
    pair.take(
        "events",
        [
            f.rec("events", started(), 1_000),
            f.rec("events", finished, 2_000),
            f.rec("events", started(), 2_100, key="t2"),
        ],
    )
    pair.process(None, 0, 0)
    commit(pair, 0)
    pair.sweep(now_ms=5_000)
    codes = [orjson.loads(r.value)["code"] for r in pair.round.out]
    assert codes == ["interrupt_expired"]
    commit(pair, 0)
    pair.sweep(now_ms=5_100)
    assert pair.round.out == []  # announced once
    assert sample(registry, "agui_gateway_interrupts_expired_total", agent="bot") == 1
    # t2 (active, no interrupts) outlives the interrupted t1: t1 goes at expiry + grace
    pair.sweep(now_ms=5_600)
    assert [r.value for r in pair.round.changelog_records()] == [None]
    commit(pair, 0)
    assert pair.state("t1") is None and pair.state("t2") is not None
    assert pair.open_interrupts == 0 and pair.thread_count == 1


def test_an_oversized_rejected_request_is_referenced_not_copied():
    pair, _ = make_pair()
    f = Feed()
    huge = answer()
    huge["forwardedProps"] = {"blob": "x" * 600_000}
    huge["threadId"] = 7  # malformed: rejected
    pair.take("requests", [f.rec("requests", huge, 5)])
    pair.set_fence(0)
    pair.process(0, 0, 0)
    (rejection,) = [orjson.loads(r.value) for r in pair.round.out if r.topic == "agui.rejections"]
    assert rejection["input"] is None and "inputOmitted" in rejection
    assert rejection["source"] == {"topic": "agui.bot.requests", "partition": 0, "offset": 0}
    assert len(pair.round.out[0].value) < 100_000


def test_fast_path_tracks_active_runs_across_batches_and_threads():
    pair, registry = make_pair()
    f = Feed()
    delta = b'{"type":"TOOL_CALL_ARGS","toolCallId":"c","delta":"{"}'
    pair.take(
        "events",
        [
            f.rec("events", started(), 1),
            f.rec("events", delta, 2),
            f.rec("events", delta, 3, key="t2"),
        ],
    )  # t2 has no run: first_event
    pair.process(None, 0, 0)
    rules = [orjson.loads(r.value).get("rule") for r in pair.round.out]
    assert rules == ["first_event"]
    pair.take("events", [f.rec("events", interrupted(), 4), f.rec("events", delta, 5)])
    pair.process(None, 0, 0)
    rules = [orjson.loads(r.value).get("rule") for r in pair.round.out]
    assert rules == ["first_event", "event_after_close"]  # t1 closed: the delta is a violation
    assert pair.round.offsets == {"events": 5}
    commit(pair, 0)
    assert sample(registry, "agui_gateway_events_total", agent="bot", type="TOOL_CALL_ARGS") == 3


def test_sweep_goes_in_slices_and_never_overwrites_a_pending_change():
    pair, _ = make_pair(
        retention=Retention(thread_ms=1_000, interrupt_grace_ms=0, interrupt_ms=10**9)
    )
    f = Feed()
    done = {"type": "RUN_FINISHED", "threadId": "t1", "runId": "r1"}
    for i in range(5):
        pair.take(
            "events",
            [f.rec("events", started(), 1, key=f"t{i}"), f.rec("events", done, 2, key=f"t{i}")],
        )
    pair.process(None, 0, 0)
    commit(pair, 0)
    assert pair.sweep(now_ms=2_000, limit=2) is False and pair.sweeping
    # a thread changes while the pass is under way: the sweep must see its new state
    pair.take("events", [f.rec("events", started("r2"), 1_900, key="t4")])
    pair.process(None, 0, 0)
    assert pair.sweep(now_ms=2_000, limit=2) is False
    assert pair.sweep(now_ms=2_000, limit=2) is True and not pair.sweeping
    deleted = {r.key for r in pair.round.changelog_records() if r.value is None}
    assert deleted == {b"t0", b"t1", b"t2", b"t3"}  # t4 changed at 1.9 s: kept


def test_sweep_bounds_the_changes_of_one_call():
    pair, _ = make_pair()
    f = Feed()
    for i in range(5):
        finished = interrupted()
        finished["outcome"]["interrupts"][0]["expiresAt"] = "1970-01-01T00:00:01Z"
        pair.take(
            "events",
            [f.rec("events", started(), 1, key=f"t{i}"), f.rec("events", finished, 2, key=f"t{i}")],
        )
    pair.process(None, 0, 0)
    commit(pair, 0)
    announced = []
    for _ in range(3):
        pair.sweep(now_ms=5_000, limit=1000, max_changes=2)
        announced.append(sum(1 for r in pair.round.out if b"interrupt_expired" in r.value))
        commit(pair, 0)
    assert announced == [2, 2, 1] and not pair.sweeping


def _deep(depth: int) -> object:
    value: object = "bottom"
    for _ in range(depth):
        value = {"in": value}
    return value


def test_values_orjson_cannot_write_are_forwarded_and_remembered_exactly():
    pair, _ = make_pair()
    f = Feed()
    finished = interrupted()
    finished["outcome"]["interrupts"][0]["metadata"] = {"big": 2**70, "deep": _deep(300)}
    request = answer()
    request["forwardedProps"] = {"deep": _deep(300), "big": -(2**80)}
    body = jsonio.dumps(request)
    pair.take("events", [f.rec("events", started(), 1), f.rec("events", jsonio.dumps(finished), 2)])
    pair.take("requests", [f.rec("requests", body, 3), f.rec("requests", b"[" + body, 4)])
    pair.set_fence(2)
    pair.process(2, 0, 0)
    forward, rejection = (r for r in pair.round.out if r.topic != "replies")
    assert forward.topic == "agui.bot.run-requests"
    assert forward.value == body  # no number altered, no crash on the depth
    assert jsonio.loads(rejection.value)["reasons"][0]["code"] == "malformed_input"
    (change,) = [r for r in pair.round.changelog_records() if r.value is not None]
    restored = changelog.decode(change.value)
    assert restored.interrupts[0].metadata == {"big": 2**70, "deep": _deep(300)}


def test_a_defect_judging_one_request_rejects_it_and_the_partition_moves_on(monkeypatch):

    real_iso = shaping.iso
    calls = {"n": 0}

    def iso_failing_once(ms):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("boom")
        return real_iso(ms)

    monkeypatch.setattr(shaping, "iso", iso_failing_once)
    pair, registry = make_pair()
    f = Feed()
    pair.take("events", [f.rec("events", started(), 1), f.rec("events", interrupted(), 2)])
    first = f.rec("requests", answer(), 3, headers=[("agui-reply-to", b"replies")])
    pair.take("requests", [first, f.rec("requests", answer("r3"), 4)])
    pair.set_fence(2)
    pair.process(2, 0, 0)
    # the first request failed after its forward was built: the forward is taken back
    topics = out_topics(pair)
    assert topics == ["agui.rejections", "replies", "agui.bot.run-requests"]
    rejection = jsonio.loads(pair.round.out[0].value)
    assert [r["code"] for r in rejection["reasons"]] == ["internal_error"]
    assert "RuntimeError: boom" in rejection["reasons"][0]["detail"]
    assert jsonio.loads(rejection["inputText"].encode()) == answer()
    assert rejection["source"] == {"topic": "agui.bot.requests", "partition": 0, "offset": 0}
    # the state was not touched by the failed request: the second answers the interrupt
    assert jsonio.loads(pair.round.out[2].value)["runId"] == "r3"
    assert pair.round.offsets == {"events": 2, "requests": 2}
    commit(pair, 0)
    assert (
        sample(registry, "agui_gateway_rejections_total", agent="bot", reason="internal_error") == 1
    )
    assert sample(registry, "agui_gateway_requests_total", agent="bot", verdict="forward") == 1


def test_a_defect_applying_one_event_is_a_warning_and_leaves_the_state(monkeypatch):
    import gateway.kafka.pairs.pair as pair_module

    real = pair_module.apply_event

    def failing_on_finish(state, thread_id, event, at):
        if event.get("type") == "RUN_FINISHED" and event.get("runId") == "r1":
            raise KeyError("boom")
        return real(state, thread_id, event, at)

    monkeypatch.setattr(pair_module, "apply_event", failing_on_finish)
    pair, _ = make_pair()
    f = Feed()
    pair.take(
        "events",
        [
            f.rec("events", started(), 1),
            f.rec("events", interrupted(), 2),
            f.rec("events", {"type": "RUN_STARTED", "threadId": "t2", "runId": "r9"}, 3, key="t2"),
        ],
    )
    pair.process(None, 0, 0)
    (warning,) = [jsonio.loads(r.value) for r in pair.round.out]
    assert warning["code"] == "internal_error" and warning["threadId"] == "t1"
    assert "KeyError" in warning["detail"]
    assert pair.state("t1").status == "active"  # as before the failed event
    assert pair.state("t2").status == "active"  # later events still applied
    assert pair.round.offsets == {"events": 3}


def test_a_rejection_with_thousands_of_findings_stays_a_writable_record():
    from gateway.kafka.pairs.shaping import MAX_CARRIED_FINDINGS, MAX_RECORD_BYTES

    pair, _ = make_pair()
    f = Feed()
    request = answer("r2", "nobody")  # does not cover "a": rejected
    for n in range(12_000):
        request[f"unknown_member_with_a_long_name_{n:05d}"] = n
    pair.take("events", [f.rec("events", started(), 1), f.rec("events", interrupted(), 2)])
    pair.take("requests", [f.rec("requests", request, 3, headers=[("agui-reply-to", b"replies")])])
    pair.set_fence(2)
    pair.process(2, 0, 0)
    rejection, reply = (r for r in pair.round.out if r.topic in ("agui.rejections", "replies"))
    for record in (rejection, reply):
        assert len(record.value) <= MAX_RECORD_BYTES
        body = jsonio.loads(record.value)
        assert len(body["warnings"]) == MAX_CARRIED_FINDINGS
        # the judge lists 50 stripped members, counts the other 11,950 in one warning, and
        # warns of the unrecognised entry: 52 warnings, of which the record carries 50
        assert body["warningsOmitted"] == 2
        assert [r["code"] for r in body["reasons"]] == ["uncovered_interrupt"]


def test_an_input_that_would_grow_if_written_again_is_forwarded_as_received():
    pair, _ = make_pair()
    f = Feed()
    numbers = b"[" + b",".join([b"1E9"] * 120_000) + b"]"  # 1E9 would be written 1000000000.0
    body = jsonio.dumps(answer("r2"))[:-1] + b',"forwardedProps":' + numbers + b"}"
    assert len(body) < 512 * 1024 and len(body) * 2 < len(jsonio.dumps(jsonio.loads(body)))
    pair.take("requests", [f.rec("requests", body, 3)])
    pair.set_fence(0)
    pair.process(0, 0, 0)
    (forward,) = [r for r in pair.round.out if r.topic == "agui.bot.run-requests"]
    assert forward.value == body


EXACT = b"[1.00000000000000000001,1e-400,-0,1E9,-0.0,1" + b"0" * 320 + b",2.50E+3]"


def test_forwarded_values_are_the_bytes_received_even_when_members_are_stripped():
    raw = jsonio.dumps(answer("r2"))[:-1] + b',"forwardedProps":{"n":' + EXACT + b"}}"
    stripped = (
        raw[:-1]
        + b',"extra":[1E9],"messages":[{"id":"m","role":"robot","content":"x","n":1E9},'
        + b'{"id":"u","role":"user","content":"hi","x":-0}]}'
    )
    stripped = stripped.replace(b'"messages":[],', b"")
    forwards = []
    for request in (raw, stripped):  # each on a thread of its own, never seen: forwarded
        pair, _ = make_pair()
        pair.take("requests", [Feed().rec("requests", request, 3)])
        pair.set_fence(0)
        pair.process(0, 0, 0)
        forwards += [r.value for r in pair.round.out if r.topic == "agui.bot.run-requests"]
    assert forwards[0] == raw
    assert b'"forwardedProps":{"n":' + EXACT in forwards[1]
    second = jsonio.loads(forwards[1])
    assert "extra" not in second
    assert second["messages"] == [{"id": "u", "role": "user", "content": "hi"}]


def test_a_rejection_carries_the_input_exactly_and_stays_readable_at_the_depth_limit():
    pair, _ = make_pair()
    f = Feed()
    deep = b"[" * 990 + b"1E9" + b"]" * 990
    body = jsonio.dumps(answer("r2", "nobody"))[:-1] + b',"forwardedProps":{"d":' + deep + b"}}"
    too_deep = body.replace(b"[" * 990, b"[" * 1010).replace(b"]" * 990, b"]" * 1010)
    pair.take("events", [f.rec("events", started(), 1), f.rec("events", interrupted(), 2)])
    pair.take(
        "requests",
        [
            f.rec("requests", body, 3, headers=[("agui-reply-to", b"replies")]),
            f.rec("requests", too_deep, 4),
        ],
    )
    pair.set_fence(2)
    pair.process(2, 0, 0)
    rejections = [r.value for r in pair.round.out if r.topic in ("agui.rejections", "replies")]
    assert len(rejections) == 3
    for value in rejections:
        assert isinstance(orjson.loads(value), dict)  # orjson reads it
        assert isinstance(jsonio.loads(value), dict)  # and so does the gateway
    assert b'"input":' + body in rejections[0]
    last = orjson.loads(rejections[2])
    assert [r["code"] for r in last["reasons"]] == ["malformed_input"]
    assert "deeper than 1000" in last["reasons"][0]["detail"]
    assert last["inputText"].encode() == too_deep


def test_an_event_timestamp_beyond_year_9999_does_not_stop_the_pair():
    pair, _ = make_pair()
    f = Feed()
    far = 300_000_000_000_000  # year 11,476
    pair.take("events", [f.rec("events", started(), far, key=None), f.rec("events", started(), 5)])
    pair.process(None, 0, 0)
    warning = jsonio.loads(pair.round.out[0].value)
    assert warning["rule"] == "missing_key" and warning["at"] == f"{far} ms since the epoch"
    assert pair.state("t1").status == "active"


def test_a_key_too_long_to_be_a_thread_id_is_refused_and_never_written_back():
    pair, _ = make_pair()
    f = Feed()
    huge = "k" * (9 * 1024)
    pair.take("events", [f.rec("events", started(), 1, key=huge)])
    pair.take("requests", [f.rec("requests", answer(), 2, key=huge)])
    pair.set_fence(1)
    pair.process(1, 0, 0)
    warning, rejection = pair.round.out
    assert warning.key is None and rejection.key is None
    assert "a key of 9,216 bytes" in jsonio.loads(warning.value)["detail"]
    assert jsonio.loads(rejection.value)["reasons"][0]["code"] == "thread_mismatch"
    assert pair.round.changelog_records() == []


def test_warnings_of_an_aborted_round_are_published_when_it_is_replayed():
    pair, registry = make_pair()  # burst 5 per thread and code
    f = Feed()
    unknown = [f.rec("events", {"type": f"CUSTOM_{n}"}, n) for n in range(5)]
    pair.take("events", unknown)
    pair.process(None, 0, 0)
    assert len(pair.round.out) == 5
    pair.aborted()
    pair.take("events", unknown)  # read again from the last commit
    pair.process(None, 0, 0)
    assert len(pair.round.out) == 5  # not suppressed by the aborted attempt
    commit(pair, 0)
    assert (
        sample(
            registry,
            "agui_gateway_warnings_suppressed_total",
            agent="bot",
            code="unknown_event_type",
        )
        == 0
    )


def test_a_state_too_large_for_one_record_is_written_without_its_schemas():
    from gateway.kafka.pairs.shaping import MAX_RECORD_BYTES

    pair, _ = make_pair()
    f = Feed()
    finished = interrupted("r1", "a", "b")
    big = {"description": "x" * 600_000}
    for item in finished["outcome"]["interrupts"]:
        item["responseSchema"] = big
        item["message"] = "answer me"
    pair.take("events", [f.rec("events", started(), 1), f.rec("events", finished, 2)])
    pair.process(None, 0, 0)
    (record,) = pair.round.changelog_records()
    assert len(record.value) <= MAX_RECORD_BYTES
    written = changelog.decode(record.value)
    assert [(i.id, i.response_schema, i.message) for i in written.interrupts] == [
        ("a", None, "answer me"),
        ("b", None, "answer me"),
    ]
    assert pair.state("t1") == written  # memory judges as a restart would


def _encode_failing_for(monkeypatch, thread_id: str, from_call: int = 1):
    """changelog.encode raising for one thread's states, from its `from_call`th on."""

    real = changelog.encode
    calls = {"n": 0}

    def encode(state):
        if state.thread_id == thread_id:
            calls["n"] += 1
            if calls["n"] >= from_call:
                raise TypeError("cannot encode this state")
        return real(state)

    monkeypatch.setattr(changelog, "encode", encode)


def test_a_state_that_cannot_be_encoded_rejects_its_request_and_the_partition_moves_on(
    monkeypatch,
):
    _encode_failing_for(monkeypatch, "t1", from_call=3)  # the state the answer builds
    pair, registry = make_pair()
    f = Feed()
    pair.take("events", [f.rec("events", started(), 1), f.rec("events", interrupted(), 2)])
    first = f.rec("requests", answer(), 3)
    other = f.rec("requests", {**answer("r5"), "threadId": "t2"}, 4, key="t2")
    pair.take("requests", [first, other])
    pair.set_fence(2)
    pair.process(2, 0, 0)
    # the answer of t1 built a state that cannot be encoded: rejected, nothing forwarded
    rejection = jsonio.loads(pair.round.out[0].value)
    assert pair.round.out[0].topic == "agui.rejections"
    assert [r["code"] for r in rejection["reasons"]] == ["internal_error"]
    assert "TypeError: cannot encode this state" in rejection["reasons"][0]["detail"]
    # the partition moves on: the next request (another thread) is judged and forwarded
    assert [r.key for r in pair.round.out if r.topic == "agui.bot.run-requests"] == [b"t2"]
    assert len(pair.state("t1").interrupts) == 1  # still open, as before the request
    assert pair.round.offsets == {"events": 2, "requests": 2}  # the partition moved on
    # every changelog record the round writes can be built
    monkeypatch.undo()  # the cached values are used: no encoding when the round commits
    records = pair.round.changelog_records()
    assert [r.key for r in records] == [b"t1", b"t2"]
    assert len(changelog.decode(records[0].value).interrupts) == 1
    commit(pair, 0)
    assert (
        sample(registry, "agui_gateway_rejections_total", agent="bot", reason="internal_error") == 1
    )


def test_an_event_whose_state_cannot_be_encoded_is_a_warning_and_leaves_the_state(monkeypatch):
    _encode_failing_for(monkeypatch, "t2")
    pair, _ = make_pair()
    f = Feed()
    bad = f.rec("events", {"type": "RUN_STARTED", "threadId": "t2", "runId": "r9"}, 2, key="t2")
    pair.take("events", [f.rec("events", started(), 1), bad])
    pair.process(None, 0, 0)
    (warning,) = [jsonio.loads(r.value) for r in pair.round.out]
    assert warning["code"] == "internal_error" and warning["threadId"] == "t2"
    assert pair.state("t2") is None
    assert [r.key for r in pair.round.changelog_records()] == [b"t1"]


BINARY_ID = bytes([0x8F, 0xFF, 0x00, 0x41]) + bytes(range(12))  # 16 bytes, not UTF-8


@pytest.mark.parametrize(
    ("raw", "members"),
    [
        (
            BINARY_ID,
            {"correlationId": "j/8AQQABAgMEBQYHCAkKCw==", "correlationIdEncoding": "base64"},
        ),
        ("c-é".encode(), {"correlationId": "c-é"}),
        (b"", {"correlationId": ""}),
    ],
)
def test_a_correlation_id_is_carried_as_received_and_never_dropped(raw, members):
    pair, _ = make_pair()
    f = Feed()
    headers = [("agui-reply-to", b"replies"), ("agui-correlation-id", raw)]
    pair.take("events", [f.rec("events", started(), 1), f.rec("events", interrupted(), 2)])
    pair.take(
        "requests",
        [
            f.rec("requests", answer(), 3, headers=headers),  # forwarded
            f.rec("requests", answer("r9", "zz"), 4, headers=headers),  # rejected
        ],
    )
    pair.set_fence(2)
    pair.process(2, 0, 0)
    outs = [r for r in pair.round.out if r.topic != "agui.warnings"]
    assert [r.topic for r in outs] == [
        "agui.bot.run-requests",
        "replies",
        "agui.rejections",
        "replies",
    ]
    for record in outs:
        assert record.headers == [("agui-correlation-id", raw)]
    for record in outs[1:]:
        body = jsonio.loads(record.value)
        assert {k: v for k, v in body.items() if k.startswith("correlationId")} == members


def test_an_internal_error_rejection_carries_a_binary_correlation_id(monkeypatch):
    import gateway.kafka.pairs.decide as decide_module

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(decide_module, "judge", boom)
    pair, _ = make_pair(wait_s=0.0)
    f = Feed()
    headers = [("agui-correlation-id", BINARY_ID)]
    pair.take("requests", [f.rec("requests", answer(), 3, headers=headers)])
    pair.set_fence(0)
    pair.process(0, 0, 0)  # the events side is caught up: judged (and the judge fails)
    (rejection,) = pair.round.out
    assert rejection.headers == [("agui-correlation-id", BINARY_ID)]
    body = jsonio.loads(rejection.value)
    assert [r["code"] for r in body["reasons"]] == ["internal_error"]
    assert body["correlationIdEncoding"] == "base64"
    assert body["correlationId"] == "j/8AQQABAgMEBQYHCAkKCw=="


def test_a_lifecycle_event_hidden_behind_a_duplicate_type_is_malformed_on_every_path():
    # `type` twice: the fast path would count a TOOL_CALL_END, any JSON parser reads the last
    # `type` (RUN_FINISHED). Neither: a record naming a member twice is malformed.
    hidden = (
        b'{"type":"TOOL_CALL_END","toolCallId":"x","type":"RUN_FINISHED","threadId":"t1",'
        b'"runId":"r1","outcome":{"type":"interrupt","interrupts":[{"id":"a","reason":"x"}]}}'
    )
    pair, _ = make_pair()
    f = Feed()
    pair.take("events", [f.rec("events", started(), 10), f.rec("events", hidden, 11)])
    pair.take("requests", [f.rec("requests", answer(), 30)])
    pair.set_fence(events_end=2)
    pair.process(events_position=2, mono_now=0.0, wall_ms=0)
    warnings = [orjson.loads(r.value) for r in pair.round.out if r.topic == "agui.warnings"]
    assert [(w["code"], w["rule"]) for w in warnings] == [("protocol_violation", "malformed_event")]
    assert "same member twice" in warnings[0]["detail"]
    rejection = orjson.loads(next(r.value for r in pair.round.out if r.topic == "agui.rejections"))
    assert [r["code"] for r in rejection["reasons"]] == ["run_active"]  # the run is still active


def test_a_request_naming_a_member_twice_is_malformed_input():
    pair, _ = make_pair()
    f = Feed()
    request = b'{"threadId":"t1","runId":"r2","messages":[],"resume":[],"resume":[]}'
    pair.take("requests", [f.rec("requests", request, 5)])
    pair.set_fence(0)
    pair.process(0, 0, 0)
    (rejection,) = [orjson.loads(r.value) for r in pair.round.out if r.topic == "agui.rejections"]
    assert [r["code"] for r in rejection["reasons"]] == ["malformed_input"]
    assert "same member twice" in rejection["reasons"][0]["detail"]
    assert rejection["inputText"] == request.decode()
