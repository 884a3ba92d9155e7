"""Verified approvers on the real broker: a gateway with an approver policy and trusted
keys, services signing through GatewayClient, and someone publishing straight to the
requests topic with an identity they do not hold."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from gateway.client import ForwardReply, GatewayClient, Identity, RejectReply, Signer
from gateway.codec import changelog
from gateway.codec.records import HEADER_AGENT, HEADER_CORRELATION_ID, HEADER_REPLY_TO
from gateway.kafka.wire.attestation import HEADER_IDENTITY, generate_key, parse_forwarded
from gateway.settings import Settings
from tests.integration.inprocess import interrupted, running, settings_for
from tests.integration.support import Namespace, collect, header, produce

pytestmark = pytest.mark.integration

AGENT = "payments"
ALICE = Identity("alice", ("payments-approvers",), "https://idp.example")
BOB = Identity("bob", ("support",), "https://idp.example")


def key(tmp_path: Path, key_id: str, file: str = "") -> Signer:
    pem, _ = generate_key()
    path = tmp_path / f"{file or key_id}.pem"
    path.write_bytes(pem)
    return Signer.from_file(key_id, path)


@contextlib.asynccontextmanager
async def policed(
    ns: Namespace, rule: dict, edge: Signer, replies: str
) -> AsyncIterator[tuple[Settings, GatewayClient, GatewayClient]]:
    """A gateway judging with `rule`, trusting `edge`'s key; its settings, and a client
    signing with that key and one signing nothing."""
    settings = settings_for(ns, approvers=[rule], attest_trusted_keys={"edge-1": edge.public_key()})
    client_settings = settings.model_copy(update={"group_id": "unused"})
    async with running(settings):
        async with (
            GatewayClient(reply_topic=replies, settings=client_settings, signer=edge) as signed,
            GatewayClient(reply_topic=replies, settings=client_settings) as unsigned,
        ):
            yield settings, signed, unsigned


def answer(thread: str) -> dict:
    return {
        "threadId": thread,
        "runId": f"{thread}-r2",
        "messages": [],
        "resume": [{"interruptId": "a", "status": "resolved"}],
    }


async def test_only_a_verified_allowed_approver_is_forwarded(
    kafka_bootstrap: str, create_topics, tmp_path: Path
) -> None:
    ns = Namespace(kafka_bootstrap)
    await ns.create_agent(AGENT, partitions=2)
    [replies] = await create_topics([f"{ns.prefix}.replies"], partitions=1)
    edge = key(tmp_path, "edge-1")
    forger = key(tmp_path, "edge-1", "forged")  # another key under the trusted key's id
    threads = ["t-alice", "t-bob", "t-nobody", "t-forged", "t-lifted"]
    for thread in threads:
        await produce(ns.bootstrap, ns.events(AGENT), interrupted(thread))
    rule = {"agent": AGENT, "reason": "tool", "answer_groups": ["payments-approvers"]}
    async with policed(ns, rule, edge, replies) as (settings, signed, unsigned):
        allowed = await signed.send(AGENT, answer("t-alice"), 60, identity=ALICE)
        assert isinstance(allowed, ForwardReply), allowed

        disallowed = await signed.send(AGENT, answer("t-bob"), 60, identity=BOB)
        assert isinstance(disallowed, RejectReply)
        assert disallowed.codes() == ["approver_not_allowed"]
        assert "'bob'" in disallowed.reasons[0].detail

        nobody = await unsigned.send(AGENT, answer("t-nobody"), 60)
        assert isinstance(nobody, RejectReply)
        assert nobody.codes() == ["approver_unverified"]
        assert "carries no identity" in nobody.reasons[0].detail

        # Someone publishing straight to the requests topic, claiming alice: signed
        # with a key the gateway does not trust under that id ...
        body = orjson.dumps(answer("t-forged"))
        base = [
            (HEADER_CORRELATION_ID, b"forged"),
            (HEADER_REPLY_TO, replies.encode()),
            (HEADER_AGENT, AGENT.encode()),
        ]
        forged = base + forger.headers(ALICE, AGENT.encode(), b"t-forged", b"forged", body)
        # ... and alice's real headers lifted from another request onto this one
        lifted_body = orjson.dumps(answer("t-lifted"))
        real = edge.headers(ALICE, AGENT.encode(), b"t-alice", b"lifted", lifted_body)
        lifted = [(HEADER_CORRELATION_ID, b"lifted"), *base[1:], *real]
        await produce(ns.bootstrap, ns.requests(AGENT), [("t-forged", body)], headers=forged)
        await produce(ns.bootstrap, ns.requests(AGENT), [("t-lifted", lifted_body)], headers=lifted)
        rejected = await collect(ns.bootstrap, ns.rejections, count=4, timeout=60)
        by_thread = {r.key.decode(): orjson.loads(r.value) for r in rejected}
        assert {t: [x["code"] for x in r["reasons"]] for t, r in by_thread.items()} == {
            "t-bob": ["approver_not_allowed"],
            "t-nobody": ["approver_unverified"],
            "t-forged": ["approver_unverified"],
            "t-lifted": ["approver_unverified"],
        }
        assert "does not verify" in by_thread["t-forged"]["reasons"][0]["detail"]
        assert "does not verify" in by_thread["t-lifted"]["reasons"][0]["detail"]

    # the one forward names who answered, for the agent
    [forward] = await collect(ns.bootstrap, ns.run_requests(AGENT), count=1, settle=2.0)
    assert forward.key == b"t-alice"
    assert header(forward, HEADER_IDENTITY) is not None
    assert parse_forwarded(dict(forward.headers)[HEADER_IDENTITY]) == Identity(
        "alice", ("payments-approvers",), "https://idp.example", "edge-1"
    )


def tool_interrupted(thread: str, tool: str) -> list[tuple[str, dict]]:
    """A thread whose run calls `tool` (TOOL_CALL_START, a delta, TOOL_CALL_END) and ends
    with one interrupt, `a`, about that call."""
    run, call = f"{thread}-r1", f"{thread}-call"
    return [
        (thread, {"type": "RUN_STARTED", "threadId": thread, "runId": run}),
        (thread, {"type": "TOOL_CALL_START", "toolCallId": call, "toolCallName": tool}),
        (thread, {"type": "TOOL_CALL_ARGS", "toolCallId": call, "delta": '{"amount": 5}'}),
        (thread, {"type": "TOOL_CALL_END", "toolCallId": call}),
        (
            thread,
            {
                "type": "RUN_FINISHED",
                "threadId": thread,
                "runId": run,
                "outcome": {
                    "type": "interrupt",
                    "interrupts": [{"id": "a", "reason": "tool", "toolCallId": call}],
                },
            },
        ),
    ]


async def test_a_rule_by_tool_name_governs_that_tool_s_interrupts_only(
    kafka_bootstrap: str, create_topics, tmp_path: Path
) -> None:
    ns = Namespace(kafka_bootstrap)
    await ns.create_agent(AGENT, partitions=2)
    [replies] = await create_topics([f"{ns.prefix}.replies"], partitions=1)
    edge = key(tmp_path, "edge-1")
    tools = {"t-transfer-bob": "transfer", "t-transfer-alice": "transfer"}
    tools |= {"t-lookup-bob": "lookup", "t-lookup-nobody": "lookup"}
    for thread, tool in tools.items():
        await produce(ns.bootstrap, ns.events(AGENT), tool_interrupted(thread, tool))
    rule = {"agent": AGENT, "tool": "transfer", "answer_groups": ["payments-approvers"]}
    async with policed(ns, rule, edge, replies) as (settings, signed, unsigned):
        refused = await signed.send(AGENT, answer("t-transfer-bob"), 60, identity=BOB)
        assert isinstance(refused, RejectReply), refused
        assert refused.codes() == ["approver_not_allowed"]
        assert "tool 'transfer'" in refused.reasons[0].detail
        allowed = await signed.send(AGENT, answer("t-transfer-alice"), 60, identity=ALICE)
        assert isinstance(allowed, ForwardReply), allowed
        # the same agent's other tool: no rule names it, anyone answers
        by_bob = await signed.send(AGENT, answer("t-lookup-bob"), 60, identity=BOB)
        assert isinstance(by_bob, ForwardReply), by_bob
        by_nobody = await unsigned.send(AGENT, answer("t-lookup-nobody"), 60)
        assert isinstance(by_nobody, ForwardReply), by_nobody
    forwards = await collect(ns.bootstrap, ns.run_requests(AGENT), count=3, settle=2.0)
    assert sorted(r.key.decode() for r in forwards) == [
        "t-lookup-bob",
        "t-lookup-nobody",
        "t-transfer-alice",
    ]


async def test_a_gateway_restarted_mid_run_keeps_the_run_s_tool_names(
    kafka_bootstrap: str, create_topics, tmp_path: Path
) -> None:
    """The run's tool calls are in the changelog: a gateway that takes the thread over
    between TOOL_CALL_START and RUN_FINISHED still names the interrupt's tool."""
    ns = Namespace(kafka_bootstrap)
    await ns.create_agent(AGENT, partitions=1)
    [replies] = await create_topics([f"{ns.prefix}.replies"], partitions=1)
    edge = key(tmp_path, "edge-1")
    thread = "t-restored"
    *opening, finished = tool_interrupted(thread, "transfer")
    await produce(ns.bootstrap, ns.events(AGENT), opening)
    settings = settings_for(
        ns,
        approvers=[{"agent": AGENT, "tool": "transfer", "answer_groups": ["payments-approvers"]}],
        attest_trusted_keys={"edge-1": edge.public_key()},
    )
    async with running(settings):
        states: list = []
        for count in range(1, 4):  # one record per round that changed the thread
            records = await collect(ns.bootstrap, ns.changelog(AGENT), count=count, timeout=30)
            states = [changelog.decode(r.value) for r in records]
            if states[-1].tool_calls:
                break
        assert states[-1].tool_calls == ((f"{thread}-call", "transfer"),)
    await produce(ns.bootstrap, ns.events(AGENT), [finished])
    client_settings = settings.model_copy(update={"group_id": "unused"})
    async with running(settings):
        async with GatewayClient(
            reply_topic=replies, settings=client_settings, signer=edge
        ) as signed:
            refused = await signed.send(AGENT, answer(thread), 60, identity=BOB)
            assert isinstance(refused, RejectReply), refused
            assert refused.codes() == ["approver_not_allowed"]
            assert "tool 'transfer'" in refused.reasons[0].detail
