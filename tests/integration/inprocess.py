"""An in-process gateway on the real broker, and the thread traffic its tests send."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

from prometheus_client import CollectorRegistry

from gateway.kafka.runner import Gateway
from gateway.observe.metrics import Metrics
from gateway.settings import Settings
from tests.integration.support import Namespace, collect, header, produce


def settings_for(ns: Namespace, **overrides: Any) -> Settings:
    """Settings for a gateway on this namespace's topics, quick to notice a rebalance."""
    return Settings(
        bootstrap_servers=ns.bootstrap,
        group_id=ns.group,
        events_topic=f"{ns.prefix}.{{agent}}.events",
        requests_topic=f"{ns.prefix}.{{agent}}.requests",
        run_requests_topic=f"{ns.prefix}.{{agent}}.run-requests",
        changelog_topic=f"{ns.prefix}.{{agent}}.gateway-changelog",
        rejections_topic=ns.rejections,
        warnings_topic=ns.warnings,
        audit_topic=ns.audit,
        interrupts_topic=ns.interrupts,
        discovery_interval_ms=1000,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
        **overrides,
    )


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


async def forwarded_once(ns: Namespace, agent: str, threads: list[str]) -> None:
    """Each thread's answer reached the agent's run requests exactly once."""
    forwarded = await collect(
        ns.bootstrap, ns.run_requests(agent), count=len(threads), timeout=90, settle=3.0
    )
    seen = Counter(header(r, "agui-correlation-id") for r in forwarded)
    assert [c for c, n in seen.items() if n > 1] == [], "duplicate forwards"
    assert set(seen) == set(threads), f"missing {sorted(set(threads) - set(seen))}"


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
