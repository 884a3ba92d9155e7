"""The edge over real HTTP, through the real broker and a real gateway subprocess."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx
import orjson
import pytest

from gateway.client import parse_reply
from tests.client.simulated_agent import SimulatedAgent
from tests.edge.support import EdgeProcess, post_run, sse_events
from tests.integration.support import GatewayProcess, Namespace

AGENT = "desk"


def run_input(thread: str, run: str | None = None, **more: object) -> dict:
    return {"threadId": thread, "runId": run or f"r-{uuid.uuid4().hex[:8]}", "messages": [], **more}


@pytest.fixture
async def ns(kafka_bootstrap: str) -> Namespace:
    namespace = Namespace(kafka_bootstrap)
    await namespace.create_agent(AGENT, partitions=2)
    return namespace


async def test_every_answer_of_the_edge(ns: Namespace, tmp_path: Path) -> None:
    gateway = await GatewayProcess(ns, tmp_path).start()
    edge = await EdgeProcess(
        ns,
        tmp_path,
        edge_run_start_timeout_s=2,
        edge_keepalive_s=0.5,
        edge_cors_origins='["https://app.example"]',
        edge_max_body_bytes=50_000,
    ).start()
    agent = SimulatedAgent(ns.bootstrap, ns.run_requests(AGENT), ns.events(AGENT))
    url = f"{edge.url}/agents/{AGENT}"
    try:
        async with agent, httpx.AsyncClient(timeout=60) as http:
            # forward: the run's events from RUN_STARTED to its close, LF-framed
            status, ctype, raw = await post_run(http, url, run_input("t-1", "r-1"))
            assert (status, ctype.split(";")[0]) == (200, "text/event-stream")
            events, _ = sse_events(raw)
            assert events[0] == {"type": "RUN_STARTED", "threadId": "t-1", "runId": "r-1"}
            assert events[-1]["type"] == "RUN_FINISHED"
            assert events[-1]["outcome"]["type"] == "interrupt"
            assert [e["type"] for e in events[1:-1]] == ["TEXT_MESSAGE_START"] + [
                "TEXT_MESSAGE_CONTENT"
            ] * 4 + ["TEXT_MESSAGE_END"]

            # reject: the interrupt left uncovered -> 422 with the rejection record
            status, ctype, raw = await post_run(http, url, run_input("t-1", "r-2"))
            assert (status, ctype) == (422, "application/json")
            record = orjson.loads(raw)
            assert [r["code"] for r in record["reasons"]] == ["uncovered_interrupt"]
            assert record["reasons"][0]["interruptId"] == "approve-r-1"
            assert parse_reply(record).verdict == "reject"

            # duplicate: the first request again -> 409 with the reply, no hang
            status, ctype, raw = await post_run(http, url, run_input("t-1", "r-1"))
            assert (status, ctype) == (409, "application/json")
            assert orjson.loads(raw)["verdict"] == "duplicate"

            # malformed before publishing: not JSON, no threadId -> 422, nothing sent
            for body, path in ((b"{not json", None), (orjson.dumps({"runId": "x"}), "/threadId")):
                status, _, raw = await post_run(http, url, body)
                assert status == 422
                reason = orjson.loads(raw)["reasons"][0]
                assert reason["code"] == "malformed_input"
                assert reason.get("path") == path
            # ... or malformed as the gateway judges it
            status, _, raw = await post_run(http, url, run_input("t-2", messages="no"))
            assert status == 422
            assert orjson.loads(raw)["reasons"][0]["path"] == "/messages"

            status, _, raw = await post_run(http, url, b"[" + b" " * 60_000 + b"]")
            assert status == 413
            assert orjson.loads(raw)["reasons"][0]["code"] == "input_too_large"

            status, _, raw = await post_run(http, f"{edge.url}/agents/nobody", run_input("t"))
            assert status == 404
            assert orjson.loads(raw)["error"] == "unknown_agent"

            # a forwarded run nobody starts: keep-alive comments, then the edge's RUN_ERROR
            agent.script = lambda _input: []
            status, _, raw = await post_run(http, url, run_input("t-3"))
            assert status == 200
            events, comments = sse_events(raw)
            assert [e["type"] for e in events] == ["RUN_ERROR"]
            assert events[0]["code"] == "run_not_started"
            assert comments, "keep-alive comments while waiting"

            preflight = await http.options(
                url,
                headers={
                    "Origin": "https://app.example",
                    "Access-Control-Request-Method": "POST",
                    "Access-Control-Request-Headers": "content-type",
                },
            )
            assert preflight.headers["access-control-allow-origin"] == "https://app.example"

            assert (await http.get(edge.url + "/healthz")).status_code == 200
            assert (await http.get(edge.url + "/readyz")).status_code == 200
            metrics = (await http.get(edge.url + "/metrics")).text
            for line in (
                'agui_gateway_edge_requests_total{status="200",verdict="forward"} 2.0',
                'agui_gateway_edge_requests_total{status="422",verdict="reject"} 4.0',
                'agui_gateway_edge_requests_total{status="409",verdict="duplicate"} 1.0',
                'agui_gateway_edge_requests_total{status="413",verdict="none"} 1.0',
                'agui_gateway_edge_requests_total{status="404",verdict="none"} 1.0',
                "agui_gateway_edge_open_streams 0.0",
                'agui_gateway_edge_streams_ended_total{end="run_not_started"} 1.0',
                "agui_gateway_edge_first_event_seconds_count 1.0",
                "agui_gateway_edge_verdict_seconds_count 5.0",
            ):
                assert line in metrics, line
    finally:
        await edge.stop()
        await gateway.stop()


async def test_no_verdict_in_time_is_a_504(ns: Namespace, tmp_path: Path) -> None:
    edge = await EdgeProcess(ns, tmp_path, edge_verdict_timeout_s=1).start()  # no gateway
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            status, ctype, raw = await post_run(
                http, f"{edge.url}/agents/{AGENT}", run_input("t-x", "r-x")
            )
        assert (status, ctype) == (504, "application/json")
        body = orjson.loads(raw)
        assert body["error"] == "verdict_timeout"
        assert (body["threadId"], body["runId"]) == ("t-x", "r-x")
    finally:
        await edge.stop()


async def test_a_client_that_disconnects_costs_nothing_further(
    ns: Namespace, tmp_path: Path
) -> None:
    gateway = await GatewayProcess(ns, tmp_path).start()
    edge = await EdgeProcess(ns, tmp_path, edge_run_start_timeout_s=600).start()
    try:
        async with httpx.AsyncClient(timeout=60) as http:
            async with http.stream(
                "POST", f"{edge.url}/agents/{AGENT}", content=orjson.dumps(run_input("t-d"))
            ) as response:
                assert response.status_code == 200
                metrics = (await http.get(edge.url + "/metrics")).text
                assert "agui_gateway_edge_open_streams 1.0" in metrics
            # closed by the client while the run had not started: the stream goes away
            for _ in range(100):
                metrics = (await http.get(edge.url + "/metrics")).text
                if "agui_gateway_edge_open_streams 0.0" in metrics:
                    break
                await asyncio.sleep(0.1)
            assert "agui_gateway_edge_open_streams 0.0" in metrics
            assert 'agui_gateway_edge_streams_ended_total{end="disconnected"} 1.0' in metrics
    finally:
        await edge.stop()
        await gateway.stop()
