"""The HTTP endpoints, served for real on a free port and asked over HTTP."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from gateway.http import HttpServer, app


def registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    Counter("agui_gateway_test", "A test counter.", registry=reg).inc(3)
    return reg


async def test_the_endpoints_answer_as_documented():
    state = {"ready": False}
    server = HttpServer(
        "127.0.0.1", 0, registry(), lambda: (state["ready"], {"restoring": ["bot/0"]})
    )
    port = await server.start()
    assert port > 0
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            health = await client.get("/healthz")
            assert health.status_code == 200 and health.json() == {"status": "alive"}
            not_ready = await client.get("/readyz")
            assert not_ready.status_code == 503
            assert not_ready.json() == {"ready": False, "restoring": ["bot/0"]}
            state["ready"] = True
            assert (await client.get("/readyz")).status_code == 200
            metrics = await client.get("/metrics?name[]=x")
            assert metrics.status_code == 200
            assert metrics.headers["content-type"].startswith("text/plain; version=")
            assert "agui_gateway_test_total 3.0" in metrics.text
            head = await client.head("/metrics")
            assert head.status_code == 200 and head.content == b""
            assert (await client.post("/healthz")).status_code == 405
            assert (await client.get("/nowhere")).status_code == 404
    finally:
        await server.stop()
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient() as client:
            await client.get(f"http://127.0.0.1:{port}/healthz")


async def test_a_port_in_use_is_an_oserror_from_start():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        port = taken.getsockname()[1]
        server = HttpServer("127.0.0.1", port, registry(), lambda: (True, {}))
        with pytest.raises(OSError):
            await server.start()
        await server.stop()  # harmless when never started
    finally:
        taken.close()


async def test_the_app_is_a_starlette_app_usable_on_its_own():
    transport = httpx.ASGITransport(app=app(registry(), lambda: (True, {"running": True})))
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        answer = await client.get("/readyz")
    assert answer.status_code == 200 and answer.json() == {"ready": True, "running": True}


class _Blocking:
    """A collector that holds the scrape until the event loop has ticked `ticks` times."""

    def __init__(self, ticks: int) -> None:
        self.entered = threading.Event()
        self.ticked = threading.Event()
        self.ticks = ticks
        self.released = False

    def collect(self) -> Iterator[Metric]:
        self.entered.set()
        # on the event loop this would wait in vain: the ticker could not run
        self.released = self.ticked.wait(timeout=30)
        yield GaugeMetricFamily("agui_gateway_test_slow", "A slow collector.", value=1)


async def test_a_slow_scrape_does_not_stall_the_event_loop():
    reg = registry()
    slow = _Blocking(ticks=5)
    reg.register(slow)
    transport = httpx.ASGITransport(app=app(reg, lambda: (True, {})))
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while not slow.entered.is_set():
            await asyncio.sleep(0.01)
        for _ in range(slow.ticks):  # the loop keeps running while the collector works
            await asyncio.sleep(0)
            ticks += 1
        slow.ticked.set()

    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        answer, _ = await asyncio.gather(client.get("/metrics"), ticker())
    assert slow.released and ticks == slow.ticks
    assert answer.status_code == 200
    assert "agui_gateway_test_slow 1.0" in answer.text


async def test_metrics_leave_out_created_samples_and_compress_when_asked():
    transport = httpx.ASGITransport(app=app(registry(), lambda: (True, {})))
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        plain = await client.get("/metrics", headers={"Accept-Encoding": "identity"})
        packed = await client.get("/metrics", headers={"Accept-Encoding": "gzip"})
    assert "content-encoding" not in plain.headers
    assert "agui_gateway_test_total 3.0" in plain.text
    assert "_created" not in plain.text
    assert (
        "agui_gateway_test_created" in generate_latest(registry()).decode()
    )  # as the client has it
    assert packed.headers["content-encoding"] == "gzip"
    assert packed.text == plain.text  # httpx decompressed it
    assert int(packed.headers["content-length"]) < len(plain.content)
