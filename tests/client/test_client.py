"""GatewayClient against the real broker and a real `agui-gateway run` subprocess."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from ag_ui.core import RunAgentInput, RunFinishedEvent, RunStartedEvent, TextMessageContentEvent

from gateway.client import (
    DuplicateReply,
    ForwardReply,
    GatewayClient,
    InvalidRunInput,
    RejectReply,
    ReplyTimeout,
    ReplyTopicMissing,
    RequestDuplicate,
    RequestRejected,
    RunNotStarted,
    UnknownAgent,
    parse_reply,
)
from gateway.core.values.codes import Reason, Verdict, Warn
from gateway.settings import Settings
from tests.client.simulated_agent import SimulatedAgent
from tests.integration.support import GatewayProcess, Namespace, collect, produce, values

AGENT = "helpdesk"


def settings_for(ns: Namespace) -> Settings:
    env = ns.env()
    return Settings(
        bootstrap_servers=ns.bootstrap,
        events_topic=env["AGUI_GATEWAY_EVENTS_TOPIC"],
        requests_topic=env["AGUI_GATEWAY_REQUESTS_TOPIC"],
        run_requests_topic=env["AGUI_GATEWAY_RUN_REQUESTS_TOPIC"],
        changelog_topic=env["AGUI_GATEWAY_CHANGELOG_TOPIC"],
        rejections_topic=env["AGUI_GATEWAY_REJECTIONS_TOPIC"],
        warnings_topic=env["AGUI_GATEWAY_WARNINGS_TOPIC"],
        audit_topic=env["AGUI_GATEWAY_AUDIT_TOPIC"],
        discovery_interval_ms=1000,
    )


def new_input(thread: str, run: str | None = None, **more: object) -> dict:
    return {
        "threadId": thread,
        "runId": run or f"run-{uuid.uuid4().hex[:8]}",
        "messages": [],
        **more,
    }


async def interrupt_thread(ns: Namespace, thread: str) -> str:
    """Publish a run on `thread` that ends in one approval interrupt; its id."""
    interrupt = {
        "id": f"i-{thread}",
        "reason": "approval_required",
        "responseSchema": {
            "type": "object",
            "properties": {"approved": {"type": "boolean"}},
            "required": ["approved"],
        },
    }
    await produce(
        ns.bootstrap,
        ns.events(AGENT),
        [
            (thread, {"type": "RUN_STARTED", "threadId": thread, "runId": "r0"}),
            (
                thread,
                {
                    "type": "RUN_FINISHED",
                    "threadId": thread,
                    "runId": "r0",
                    "outcome": {"type": "interrupt", "interrupts": [interrupt]},
                },
            ),
        ],
    )
    return str(interrupt["id"])


@pytest.fixture
async def ns(kafka_bootstrap: str) -> Namespace:
    namespace = Namespace(kafka_bootstrap)
    await namespace.create_agent(AGENT, partitions=2)
    return namespace


@pytest.fixture
async def replies(ns: Namespace, create_topics) -> str:
    """A reply topic that exists before the gateway starts, so it knows it from the first request."""
    return (await create_topics([f"{ns.prefix}.replies"], partitions=3))[0]


@pytest.fixture
async def gateway(ns: Namespace, replies: str, tmp_path: Path):
    process = await GatewayProcess(ns, tmp_path).start()
    yield process
    await process.stop()


async def test_every_verdict_typed_on_a_fresh_reply_topic(ns: Namespace, gateway) -> None:
    reply_topic = f"{ns.prefix}.svc-replies"
    async with GatewayClient(
        reply_topic=reply_topic, create_reply_topic=True, settings=settings_for(ns)
    ) as client:
        # forward: a thread the gateway knows nothing about, given as the protocol's model
        model = RunAgentInput(
            thread_id="t-new",
            run_id="r1",
            messages=[],
            tools=[],
            context=[],
            state={},
            forwarded_props={},
        )
        forward = await client.send(AGENT, model, timeout=30)
        assert isinstance(forward, ForwardReply)
        assert forward.verdict is Verdict.FORWARD
        assert (forward.thread_id, forward.run_id) == ("t-new", "r1")
        assert [w.code for w in forward.warnings] == [Warn.THREAD_UNKNOWN]

        # duplicate: the same runId and resume again
        duplicate = await client.send(AGENT, new_input("t-new", "r1"), timeout=30)
        assert isinstance(duplicate, DuplicateReply)
        assert duplicate.run_id == "r1"

        # reject: an open interrupt left uncovered, and a payload breaking its schema
        interrupt_id = await interrupt_thread(ns, "t-open")
        uncovered = await client.send(AGENT, new_input("t-open"), timeout=30)
        assert isinstance(uncovered, RejectReply)
        assert uncovered.codes() == [Reason.UNCOVERED_INTERRUPT]
        assert uncovered.reasons[0].interrupt_id == interrupt_id
        assert uncovered.input["threadId"] == "t-open"
        bad = new_input(
            "t-open",
            resume=[{"interruptId": interrupt_id, "status": "resolved", "payload": {"ok": 1}}],
        )
        mismatch = await client.send(AGENT, bad, timeout=30)
        assert isinstance(mismatch, RejectReply)
        assert Reason.PAYLOAD_SCHEMA_MISMATCH in mismatch.codes()

        # malformed: a known field the schema rejects
        malformed = await client.send(AGENT, new_input("t-m", messages="nope"), timeout=30)
        assert isinstance(malformed, RejectReply)
        assert malformed.codes() == [Reason.MALFORMED_INPUT]
        assert malformed.reasons[0].path == "/messages"

    # The reply models read the rejection records the gateway wrote, too.
    records = values(await collect(ns.bootstrap, ns.rejections, count=3))
    parsed = [parse_reply(record) for record in records]
    assert all(isinstance(p, RejectReply) for p in parsed)
    assert {p.correlation_id for p in parsed} == {
        uncovered.correlation_id,
        mismatch.correlation_id,
        malformed.correlation_id,
    }


async def test_input_errors_are_raised_before_publishing(ns: Namespace, create_topics) -> None:
    reply_topic = (await create_topics([f"{ns.prefix}.replies-in"]))[0]
    async with GatewayClient(reply_topic=reply_topic, settings=settings_for(ns)) as client:
        with pytest.raises(InvalidRunInput):
            await client.send(AGENT, {"threadId": 7, "runId": "r"})
        with pytest.raises(UnknownAgent):
            await client.send("nobody-here", new_input("t"))
        with pytest.raises(UnknownAgent):
            await client.send("bad name!", new_input("t"))


async def test_a_missing_reply_topic_is_an_error_unless_created(ns: Namespace) -> None:
    with pytest.raises(ReplyTopicMissing):
        async with GatewayClient(reply_topic=f"{ns.prefix}.absent", settings=settings_for(ns)):
            pass


async def test_no_gateway_times_out_then_a_restarted_gateway_replies(
    ns: Namespace, create_topics, tmp_path: Path
) -> None:
    reply_topic = (await create_topics([f"{ns.prefix}.replies-rs"]))[0]
    gateway = await GatewayProcess(ns, tmp_path).start()
    await gateway.stop()  # its group and state exist; nothing judges now
    async with GatewayClient(reply_topic=reply_topic, settings=settings_for(ns)) as client:
        with pytest.raises(ReplyTimeout) as timed_out:
            await client.send(AGENT, new_input("t-late", "r-late"), timeout=1.0)
        assert timed_out.value.timeout == 1.0

        # Sent while the gateway is down; its reply comes once a gateway is back.
        pending = await client.publish(
            AGENT, "t-back", b'{"threadId":"t-back","runId":"r","messages":[]}'
        )
        restarted = await GatewayProcess(ns, tmp_path, name="gw2").start()
        try:
            reply = await client.verdict(pending, timeout=60)
            assert isinstance(reply, ForwardReply)
            assert reply.correlation_id == pending.correlation_id
        finally:
            await restarted.stop()


async def test_run_streams_the_forwarded_runs_typed_events(
    ns: Namespace, gateway, replies: str
) -> None:
    reply_topic = replies
    agent = SimulatedAgent(ns.bootstrap, ns.run_requests(AGENT), ns.events(AGENT))
    async with agent, GatewayClient(reply_topic=reply_topic, settings=settings_for(ns)) as client:
        first = [e async for e in client.run(AGENT, new_input("t-run", "r-1"), timeout=30)]
        assert isinstance(first[0], RunStartedEvent) and first[0].run_id == "r-1"
        assert isinstance(first[-1], RunFinishedEvent)
        assert first[-1].outcome is not None and first[-1].outcome.type == "interrupt"
        words = [e.delta for e in first if isinstance(e, TextMessageContentEvent)]
        assert words == ["I ", "need ", "your ", "approval "]

        with pytest.raises(RequestRejected) as rejected:
            async for _ in client.run(AGENT, new_input("t-run", "r-2"), timeout=30):
                pass
        assert rejected.value.reply.codes() == [Reason.UNCOVERED_INTERRUPT]

        resume = [
            {"interruptId": "approve-r-1", "status": "resolved", "payload": {"approved": True}}
        ]
        second = [
            e async for e in client.run(AGENT, new_input("t-run", "r-3", resume=resume), timeout=30)
        ]
        assert isinstance(second[0], RunStartedEvent) and second[0].run_id == "r-3"
        assert isinstance(second[-1], RunFinishedEvent)
        assert second[-1].outcome is None or second[-1].outcome.type == "success"

        with pytest.raises(RequestDuplicate):
            async for _ in client.run(AGENT, new_input("t-run", "r-3", resume=resume), timeout=30):
                pass


async def test_a_run_that_never_starts_ends_with_run_not_started(
    ns: Namespace, gateway, replies: str
) -> None:
    reply_topic = replies
    async with GatewayClient(reply_topic=reply_topic, settings=settings_for(ns)) as client:
        stream = client.run(AGENT, new_input("t-idle"), timeout=30, start_timeout=1.0)
        with pytest.raises(RunNotStarted):
            async for _ in stream:
                pass
        tap = await client.tap(AGENT)
        assert tap.watching == 0  # the watch is gone with the stream


async def test_waits_are_independent_and_bounded(ns: Namespace, gateway, replies: str) -> None:
    reply_topic = replies
    async with GatewayClient(reply_topic=reply_topic, settings=settings_for(ns)) as client:
        answers = await asyncio.gather(
            *(client.send(AGENT, new_input(f"t-{i}", f"r-{i}"), timeout=60) for i in range(30))
        )
        assert [r.run_id for r in answers] == [f"r-{i}" for i in range(30)]
        assert all(isinstance(r, ForwardReply) for r in answers)
        assert client._rendezvous is not None and client._rendezvous.in_flight == 0
