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

from gateway.core import Identity
from gateway.kafka.wire.attestation import HEADER_IDENTITY, forwarded_json
from tests.bridge.agents import Served
from tests.bridge.support import BridgeProcess, bridge_settings
from tests.integration.support import Namespace, produce

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


def request(thread: str) -> dict[str, Any]:
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
