"""An in-process gateway on the real broker, and the thread traffic its tests send."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from prometheus_client import CollectorRegistry

from gateway.kafka.runner import Gateway
from gateway.observe.metrics import Metrics
from gateway.settings import Settings
from tests.integration.support import Namespace, produce


def interrupted(thread: str) -> list[tuple[str, dict]]:
    """A thread whose first run ends with one interrupt, `a`."""
    run = f"{thread}-r1"
    return [
        (thread, {"type": "RUN_STARTED", "threadId": thread, "runId": run}),
        (
            thread,
            {
                "type": "RUN_FINISHED",
                "threadId": thread,
                "runId": run,
                "outcome": {"type": "interrupt", "interrupts": [{"id": "a", "reason": "tool"}]},
            },
        ),
    ]


async def send_answer(ns: Namespace, agent: str, thread: str) -> None:
    """The request resolving `a`, correlated by the thread's name."""
    answer = {
        "threadId": thread,
        "runId": f"{thread}-r2",
        "messages": [],
        "resume": [{"interruptId": "a", "status": "resolved"}],
    }
    await produce(
        ns.bootstrap,
        ns.requests(agent),
        [(thread, answer)],
        headers=[("agui-correlation-id", thread.encode())],
    )


async def eventually(check: Any, what: str, timeout: float = 60, step: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(step)


@contextlib.asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[Gateway]:
    """A gateway running in this process until the block ends (then stopped cleanly)."""
    gateway = Gateway(settings, Metrics(CollectorRegistry()))
    stop = asyncio.Event()
    task = asyncio.create_task(gateway.run(stop))
    try:
        yield gateway
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=60)
