"""Who answered reaches the agent: the bridge passes a forward's `agui-identity` header
(the gateway's verified identity) as an HTTP header of its POST, and never an identity
of anyone else's making (real broker, real HTTP)."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from gateway.client import ForwardReply, GatewayClient, RejectReply, Signer
from gateway.core import Identity
from gateway.demo.bridged import run_input
from gateway.kafka.wire.attestation import HEADER_IDENTITY, forwarded_json, generate_key
from tests.bridge.agents import Served, approval_agent
from tests.bridge.support import BridgeProcess, TopicReader, bridge_settings, closed_runs
from tests.bridge.test_loop import USER, history_after
from tests.client.test_client import settings_for
from tests.integration.support import GatewayProcess, Namespace, produce

pytestmark = pytest.mark.integration

AGENT = "ledger"


def recording_agent() -> tuple[Starlette, dict[str, dict[str, str]]]:
    """An agent that closes each run at once, keeping each POST's headers by thread."""
    seen: dict[str, dict[str, str]] = {}

    async def run(request: Request) -> Response:
        body = json.loads(await request.body())
        seen[body["threadId"]] = {k.lower(): v for k, v in request.headers.items()}
        thread, run_id = body["threadId"], body["runId"]

        async def stream():
            for kind in ("RUN_STARTED", "RUN_FINISHED"):
                event = {"type": kind, "threadId": thread, "runId": run_id}
                yield b"data: " + json.dumps(event).encode() + b"\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    return Starlette(routes=[Route("/", run, methods=["POST"])]), seen


def request(thread: str) -> dict[str, Any]:  # a run request as the gateway forwards it
    return {"threadId": thread, "runId": f"run-{uuid.uuid4().hex[:8]}", "messages": []}


async def test_the_identity_on_a_forward_reaches_the_agent_as_a_header(
    ns: Namespace, tmp_path
) -> None:
    await ns.create_agent(AGENT, partitions=1)
    app, seen = recording_agent()
    alice = Identity("alice", ("payments-approvers",), "https://idp.example", "edge-1")
    named = Identity("Zoë", (), "https://idp.example", "edge-1")  # not ASCII
    async with Served(app) as agent:
        # the agent's configured headers may not speak for the gateway
        endpoints = {AGENT: {"url": agent.url, "headers": {"x-agui-identity": "forged"}}}
        bridge = await BridgeProcess(
            ns, tmp_path, "bridge", **bridge_settings(ns, endpoints)
        ).start()
        try:
            await produce(
                ns.bootstrap,
                ns.run_requests(AGENT),
                [("t-alice", request("t-alice"))],
                headers=[(HEADER_IDENTITY, forwarded_json(alice))],
            )
            await produce(
                ns.bootstrap,
                ns.run_requests(AGENT),
                [("t-named", request("t-named"))],
                headers=[(HEADER_IDENTITY, forwarded_json(named))],
            )
            await produce(ns.bootstrap, ns.run_requests(AGENT), [("t-none", request("t-none"))])
            for _ in range(600):
                if len(seen) == 3:
                    break
                await asyncio.sleep(0.05)
        finally:
            await bridge.stop()
    assert set(seen) == {"t-alice", "t-named", "t-none"}
    assert json.loads(seen["t-alice"]["x-agui-identity"]) == {
        "groups": ["payments-approvers"],
        "issuer": "https://idp.example",
        "signer": "edge-1",
        "subject": "alice",
    }
    assert seen["t-named"]["x-agui-identity"].isascii()
    assert json.loads(seen["t-named"]["x-agui-identity"])["subject"] == "Zoë"
    assert "x-agui-identity" not in seen["t-none"]


class HeaderTap:
    """ASGI middleware keeping each POST's identity header (None: it had none)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.seen: list[str | None] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            headers = dict(scope["headers"])
            value = headers.get(b"x-agui-identity")
            self.seen.append(None if value is None else value.decode())
        await self.app(scope, receive, send)


async def test_who_approved_reaches_the_real_pydantic_ai_agent(
    ns: Namespace, create_topics, tmp_path
) -> None:
    """The whole loop: a service signs as alice and bob through GatewayClient, the gateway
    judges them by its policy, the bridge calls the real pydantic-ai agent, and the
    approving resume reaches it with alice's identity; bob's never reaches it."""
    agent_name = "payments"
    await ns.create_agent(agent_name, partitions=1)
    [replies] = await create_topics([f"{ns.prefix}.replies"], partitions=1)
    pem, public = generate_key()
    (tmp_path / "svc.pem").write_bytes(pem)
    signer = Signer.from_file("svc-1", tmp_path / "svc.pem")
    app, counters = approval_agent()
    tap = HeaderTap(app)
    policy = [{"agent": agent_name, "answer_subjects": ["alice"], "unattested": True}]
    alice = Identity("alice", ("payments-approvers",), "https://idp.example")
    async with Served(tap) as served:
        gateway = await GatewayProcess(
            ns,
            tmp_path,
            "gateway",
            approvers=json.dumps(policy),
            attest_trusted_keys=json.dumps({"svc-1": public}),
        ).start()
        bridge = await BridgeProcess(
            ns, tmp_path, "bridge", **bridge_settings(ns, {agent_name: {"url": served.url}})
        ).start()
        settings = settings_for(ns)
        try:
            async with (
                GatewayClient(reply_topic=replies, settings=settings, signer=signer) as client,
                TopicReader(ns.bootstrap, ns.events(agent_name)) as events,
            ):
                thread = "t-pay"
                first = await client.send(agent_name, run_input(thread, USER), 60)
                assert isinstance(first, ForwardReply)
                await events.wait(lambda _: closed_runs(events.thread(thread)) >= 1)
                run1 = events.thread(thread)
                interrupt = run1[-1]["outcome"]["interrupts"][0]
                entry = {"interruptId": interrupt["id"], "status": "resolved"}
                entry["payload"] = {"approved": True}
                approve = run_input(thread, history_after(run1), [entry])
                by_bob = await client.send(agent_name, approve, 60, identity=Identity("bob"))
                assert isinstance(by_bob, RejectReply)
                assert by_bob.codes() == ["approver_not_allowed"]
                by_alice = await client.send(agent_name, approve, 60, identity=alice)
                assert isinstance(by_alice, ForwardReply)
                await events.wait(lambda _: closed_runs(events.thread(thread)) >= 2)
        finally:
            await bridge.stop()
            await gateway.stop()
    assert counters.requests == 2 and counters.tool_calls == 1
    first_post, approving_post = tap.seen
    assert first_post is None  # the first run answered nothing and was sent unattested
    assert approving_post is not None
    assert json.loads(approving_post) == {
        "groups": ["payments-approvers"],
        "issuer": "https://idp.example",
        "signer": "svc-1",
        "subject": "alice",
    }
