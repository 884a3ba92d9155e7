"""Clients that trickle their requests in, and more connections than the edge allows, over
real sockets (loopback) against a real `agui-gateway edge`: the trickling connections are
closed after their deadline, connections beyond the cap are answered 503 and closed at
once, and meanwhile a run's event stream and ordinary requests are served."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from tests.client.simulated_agent import SimulatedAgent
from tests.edge.support import EdgeProcess, post_run, sse_events
from tests.edge.test_app import run_input
from tests.integration.support import GatewayProcess, Namespace

AGENT = "slowpoke"
HEADER_TIMEOUT_S = 6.0
BODY_TIMEOUT_S = 8.0  # past the cap's check below, whose count includes the slow body
TRICKLERS = 50
MAX_CONNECTIONS = 60
TRICKLE_EVERY_S = 0.5
SLACK_S = 3.0  # how late after its deadline a connection may still be closed


@pytest.fixture
async def ns(kafka_bootstrap: str) -> Namespace:
    namespace = Namespace(kafka_bootstrap)
    await namespace.create_agent(AGENT, partitions=1)
    return namespace


class Trickle:
    """One connection that sends `head`, then one byte of `rest` every TRICKLE_EVERY_S
    (never the end of the request), until the edge closes it or `give_up_s` passes."""

    def __init__(self, port: int, head: bytes, rest: bytes, give_up_s: float) -> None:
        self.port, self.head, self.rest, self.give_up_s = port, head, rest, give_up_s
        self.closed_after: float | None = None  # seconds from connecting; None: still open
        self.answer = b""

    async def run(self) -> Trickle:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        started = time.monotonic()
        try:
            writer.write(self.head)
            sent = 0
            while time.monotonic() - started < self.give_up_s:
                try:
                    chunk = await asyncio.wait_for(reader.read(4096), TRICKLE_EVERY_S)
                except TimeoutError:
                    writer.write(self.rest[sent % len(self.rest) :][:1])
                    sent += 1
                    continue
                if not chunk:
                    self.closed_after = time.monotonic() - started
                    break
                self.answer += chunk
        except (ConnectionResetError, BrokenPipeError):
            self.closed_after = time.monotonic() - started
        finally:
            writer.close()
        return self


async def one_more_connection(port: int) -> str:
    """Connect and wait a moment: 'refused' when the edge answers 503 and closes at once;
    else send a whole GET /healthz and return 'served' when it is answered 200 (the
    connection is left open, kept alive)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        unasked = await asyncio.wait_for(reader.read(), 0.3)
    except TimeoutError:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: edge\r\n\r\n")
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert answer.startswith(b"HTTP/1.1 200 "), answer
        KEPT.append(writer)
        return "served"
    writer.close()
    assert unasked.startswith(b"HTTP/1.1 503 "), unasked
    assert b'"error":"busy"' in unasked
    return "refused"


KEPT: list[asyncio.StreamWriter] = []


async def test_slow_requests_are_cut_off_and_connections_capped(
    ns: Namespace, tmp_path: Path
) -> None:
    gateway = await GatewayProcess(ns, tmp_path).start()
    edge = await EdgeProcess(
        ns,
        tmp_path,
        edge_header_timeout_s=HEADER_TIMEOUT_S,
        edge_body_timeout_s=BODY_TIMEOUT_S,
        edge_max_connections=MAX_CONNECTIONS,
        edge_keepalive_s=0.5,
    ).start()
    # a run whose events take ~8 s: its stream is open through what follows
    agent = SimulatedAgent(ns.bootstrap, ns.run_requests(AGENT), ns.events(AGENT), gap_s=1.0)
    url = f"{edge.url}/agents/{AGENT}"
    give_up = max(HEADER_TIMEOUT_S, BODY_TIMEOUT_S) + SLACK_S + 2
    try:
        async with agent, httpx.AsyncClient(timeout=60) as http:
            stream = asyncio.create_task(post_run(http, url, run_input("t-s", "r-s")))
            for _ in range(100):
                if agent.inputs:
                    break
                await asyncio.sleep(0.1)
            assert agent.inputs, "the run was not forwarded"

            request = b"GET /healthz HTTP/1.1\r\nHost: edge\r\nX-Slow: " + b"a" * 64
            headers = [
                asyncio.create_task(Trickle(edge.port, request[:1], request[1:], give_up).run())
                for _ in range(TRICKLERS)
            ]
            post = (
                f"POST /agents/{AGENT} HTTP/1.1\r\nHost: edge\r\n"
                "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
            ).encode()
            body = asyncio.create_task(Trickle(edge.port, post + b"{", b" " * 100, give_up).run())
            await asyncio.sleep(1.0)  # every trickling connection is accepted

            # the cap: 1 stream + 51 trickling connections open; the next ones are served
            # until MAX_CONNECTIONS are open, then each is refused at once
            outcomes = [await one_more_connection(edge.port) for _ in range(12)]
            served = MAX_CONNECTIONS - 1 - TRICKLERS - 1
            assert outcomes == ["served"] * served + ["refused"] * (12 - served), outcomes
            assert not any(t.done() for t in [*headers, body]), "closed before the deadline"

            # the trickling connections: closed after their deadline, not before
            trickles = await asyncio.gather(*headers)
            for trickle in trickles:
                assert trickle.closed_after is not None, "still open after the deadline"
                assert HEADER_TIMEOUT_S - 0.5 <= trickle.closed_after <= HEADER_TIMEOUT_S + SLACK_S
                assert trickle.answer.startswith(b"HTTP/1.1 408 "), trickle.answer
            slow_body = await body
            assert slow_body.closed_after is not None, "a trickling body was not cut off"
            assert BODY_TIMEOUT_S - 0.5 <= slow_body.closed_after <= BODY_TIMEOUT_S + SLACK_S
            assert slow_body.answer.startswith(b"HTTP/1.1 408 "), slow_body.answer
            assert b'"error":"request_timeout"' in slow_body.answer

            # the stream opened before all this went on to its close
            status, _, raw = await stream
            events, _ = sse_events(raw)
            assert status == 200
            assert len(events) == 8
            assert [e["type"] for e in events][0::7] == ["RUN_STARTED", "RUN_FINISHED"]

            # room again: new connections are served
            for writer in KEPT:
                writer.close()
            await asyncio.sleep(0.5)
            assert (await http.get(edge.url + "/healthz")).status_code == 200
            metrics = (await http.get(edge.url + "/metrics")).text
            refused = 12 - served
            for line in (
                f'agui_gateway_edge_connections_closed_total{{reason="too_many_connections"}} '
                f"{refused}.0",
                f'agui_gateway_edge_connections_closed_total{{reason="header_timeout"}} '
                f"{TRICKLERS}.0",
                'agui_gateway_edge_connections_closed_total{reason="body_timeout"} 1.0',
                'agui_gateway_edge_requests_total{status="408",verdict="none"} 1.0',
            ):
                assert line in metrics, line
    finally:
        for writer in KEPT:
            writer.close()
        KEPT.clear()
        await edge.stop()
        await gateway.stop()


async def test_a_kept_alive_connection_and_a_silent_one_are_held_no_longer(
    ns: Namespace, tmp_path: Path
) -> None:
    deadline = 2.0
    edge = await EdgeProcess(ns, tmp_path, edge_header_timeout_s=deadline).start()  # no gateway
    try:
        # a whole request answered, then the next one trickled in on the same connection:
        # the deadline runs again from the end of the response
        reader, writer = await asyncio.open_connection("127.0.0.1", edge.port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: edge\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 200 ")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
        kept_started = time.monotonic()
        answer = b""
        for byte in b"GET /healthz HTTP/1.1\r\nHost: edge\r\nX-Slow: aaaaaaaaaaaaaaaa":
            try:
                writer.write(bytes([byte]))
                chunk = await asyncio.wait_for(reader.read(4096), 0.3)
            except TimeoutError:
                continue
            except ConnectionResetError:
                break
            if not chunk:
                break
            answer += chunk
        closed_after = time.monotonic() - kept_started
        writer.close()
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        assert deadline - 0.5 <= closed_after <= deadline + SLACK_S

        # a connection that never sends a byte: closed without a word
        reader, writer = await asyncio.open_connection("127.0.0.1", edge.port)
        started = time.monotonic()
        said = await asyncio.wait_for(reader.read(), deadline + SLACK_S + 5)
        writer.close()
        assert said == b""
        assert deadline - 0.5 <= time.monotonic() - started <= deadline + SLACK_S
    finally:
        await edge.stop()
