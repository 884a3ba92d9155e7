"""The demo composed: topics, the gateway in-process, the simulators, the console.

Start order: topics, HTTP (with the inbox's API and page), gateway (until ready) and
the inbox's reader, simulators (with a real agent: the agent, the bridge until ready,
its client), console.
Stop order: traffic (with a real agent: its conversations drained, then its
client, the bridge, the agent), a short drain of awaited replies, the
gateway, the reply counter, HTTP, the inbox. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TextIO

from aiokafka.errors import KafkaError
from prometheus_client import CollectorRegistry
from pydantic import SecretStr
from starlette.routing import BaseRoute

from gateway.demo.agents import Agents
from gateway.demo.bridged import RealAgentDemo
from gateway.demo.clients import Clients
from gateway.demo.console import Console, Header
from gateway.demo.stats import DemoStats
from gateway.demo.wire import DemoSetupError
from gateway.http import HttpServer
from gateway.inbox.service import InboxService
from gateway.kafka.runner import Gateway
from gateway.kafka.wire import clients as kafka_clients
from gateway.kafka.wire.topics import LEGAL_TOPIC, TopicNames, agent_topic_layout, ensure_topics
from gateway.observe.metrics import Metrics
from gateway.settings import Settings

CONNECT_TIMEOUT_S = 20.0
READY_TIMEOUT_S = 60.0
DRAIN_S = 3.0  # after the traffic stops, wait this long at most for awaited replies
GATEWAY_STOP_S = 30.0
SHARED_PARTITIONS = 3  # agui.rejections and agui.warnings, when the demo creates them
AGENT_PLACEHOLDER = "{agent}"


class DemoFailed(RuntimeError):
    """A part of the demo failed while it ran."""


def reply_topic(settings: Settings, agent: str) -> str:
    """The simulated clients' reply topic, beside the agent's own topics."""
    head = settings.events_topic.split(AGENT_PLACEHOLDER)[0]
    return f"{head}{agent}.demo-replies"


async def create_topics(settings: Settings, agent: str, partitions: int, replies: str) -> None:
    admin = kafka_clients.admin(settings, client_id=f"{settings.client_id}-demo-topics")
    try:
        await asyncio.wait_for(admin.start(), timeout=CONNECT_TIMEOUT_S)
        layout = agent_topic_layout(settings, agent, partitions, SHARED_PARTITIONS)
        layout[replies] = (partitions, {})
        reports = await asyncio.wait_for(ensure_topics(admin, layout), timeout=CONNECT_TIMEOUT_S)
    except (KafkaError, TimeoutError, OSError) as exc:
        raise DemoSetupError(
            f"cannot reach Kafka at {settings.bootstrap_servers}: {exc!r}"
        ) from None
    finally:
        with contextlib.suppress(Exception):
            await admin.close()
    # Only the co-partitioned topics must match: the gateway refuses an agent otherwise.
    names = TopicNames(settings).for_agent(agent)
    must_match = {names.events, names.requests, names.changelog}
    bad = [r for r in reports if r.action in ("mismatch", "refused") and r.topic in must_match]
    if bad:
        raise DemoSetupError(
            "; ".join(f"{r.topic}: {r.detail}" for r in bad)
            + " (choose another --agent or a matching --partitions)"
        )


async def start_http(
    settings: Settings,
    registry: CollectorRegistry,
    gateway: Gateway,
    routes: Sequence[BaseRoute] = (),
) -> tuple[HttpServer, str, str]:
    """The HTTP endpoints on the configured port or, when it is taken, on any free one:
    the server, the metrics' URL (saying so when the port was taken) and the base URL."""
    problem: OSError | None = None
    for port in dict.fromkeys((settings.http_port, 0)):
        http = HttpServer(settings.http_host, port, registry, gateway.ready, routes)
        try:
            bound = await http.start()
        except OSError as exc:
            problem = exc
            continue
        base = f"http://{settings.http_host}:{bound}"
        url = f"{base}/metrics"
        if port != settings.http_port:
            url += f" (port {settings.http_port} was taken)"
        return http, url, base
    raise DemoSetupError(f"cannot listen on {settings.http_host}: {problem}")


def demo_inbox(settings: Settings, registry: CollectorRegistry) -> tuple[InboxService, str]:
    """The inbox for the demo, on the gateway's HTTP port, and what to sign in with: the
    settings' inbox_token (not shown), or a token made for this demo run (shown)."""
    if settings.inbox_open:
        return InboxService(settings, registry), "no token needed (inbox_open)"
    if settings.inbox_token is not None:
        return InboxService(settings, registry), "sign in with your inbox_token"
    token = secrets.token_urlsafe(18)
    inbox = InboxService(settings.model_copy(update={"inbox_token": SecretStr(token)}), registry)
    return inbox, f"sign in with token {token} (made for this demo run)"


async def wait_ready(gateway: Gateway, task: asyncio.Task[None]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not gateway.ready()[0]:
        if task.done():
            raise DemoSetupError(f"the gateway stopped while starting: {_failure(task)}")
        if time.monotonic() > deadline:
            raise DemoSetupError(
                f"the gateway was not ready within {READY_TIMEOUT_S:.0f} s: {gateway.ready()[1]}"
            )
        await asyncio.sleep(0.1)


def _failure(task: asyncio.Task[Any]) -> str:
    if task.cancelled():
        return "cancelled"
    exc = task.exception()
    return repr(exc) if exc else "returned"


async def _bounded(awaitable: Awaitable[object], timeout: float) -> None:
    """Wait for a part to finish, at most `timeout`; its failure is not ours to raise."""
    try:
        await asyncio.wait_for(awaitable, timeout=timeout)
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise  # we are cancelled ourselves, not just the part
    except Exception:  # TimeoutError included: the part is abandoned
        pass


async def _until(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


def _signals(stop: asyncio.Event, err: TextIO) -> None:
    """The first SIGINT/SIGTERM stops the demo cleanly; a second one exits at once.

    Exiting at once is deliberate: cancelling the tasks instead would also
    cancel the Kafka clients' own tasks while the gateway still awaits them.
    """
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if stop.is_set():
            with contextlib.suppress(Exception):
                err.write("agui-gateway demo: stopped again; exiting without a clean shutdown\n")
                err.flush()
            os._exit(130)
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, on_signal)


async def run(
    settings: Settings,
    agent: str,
    partitions: int,
    rate: float,
    duration: float | None,
    log_path: str,
    out: TextIO,
    real_agent: str | None = None,
    members: list[str] | None = None,
) -> None:
    """The whole demo. Raises DemoSetupError (cannot start) or DemoFailed (broke while running).

    With `real_agent` (a name), also that agent behind the bridge (`gateway.demo.bridged`).
    With `members`, `agent` is a group (in `settings.groups`) and the simulated agents
    are its members, sharing the group's topics.
    """
    stop = asyncio.Event()
    _signals(stop, sys.stderr)
    names = TopicNames(settings).for_agent(agent)
    replies = reply_topic(settings, agent)
    if not LEGAL_TOPIC.match(replies):
        raise DemoSetupError(f"{replies!r} is not a legal topic name")
    try:
        await kafka_clients.preflight(settings)
    except kafka_clients.SecurityFailure as exc:
        raise DemoSetupError(str(exc)) from None
    await create_topics(settings, agent, partitions, replies)
    real_replies = reply_topic(settings, real_agent) if real_agent else ""
    if real_agent:
        if not LEGAL_TOPIC.match(real_replies):
            raise DemoSetupError(f"{real_replies!r} is not a legal topic name")
        await create_topics(settings, real_agent, partitions, real_replies)

    registry = CollectorRegistry()
    gateway = Gateway(settings, Metrics(registry))
    inbox, sign_in = demo_inbox(settings, registry)
    http, metrics_url, base = await start_http(settings, registry, gateway, inbox.routes)
    inbox_url = f"{base}/inbox"
    stop_gateway = asyncio.Event()
    gateway_task = asyncio.create_task(gateway.run(stop_gateway), name="gateway")
    stop_inbox = asyncio.Event()
    inbox_task = asyncio.create_task(inbox.run(stop_inbox), name="inbox")
    stats = DemoStats()
    token = uuid.uuid4().hex[:8]
    agents = Agents(
        settings,
        names,
        stats,
        rate,
        f"{settings.group_id}.demo-{token}.agents",
        members=members,
        agent=agent,
    )
    clients = Clients(
        settings,
        names,
        replies,
        stats,
        f"{settings.group_id}.demo-{token}",
        agent=None if members else agent,
        grouped=bool(members),
    )
    stop_traffic, stop_replies = asyncio.Event(), asyncio.Event()
    traffic: list[asyncio.Task[None]] = []
    replies_task: asyncio.Task[None] | None = None
    real: RealAgentDemo | None = None
    if real_agent:
        real = RealAgentDemo(settings, real_agent, real_replies, registry)
    header = Header(
        agent,
        partitions,
        rate,
        duration,
        metrics_url,
        log_path,
        tuple(members or ()),
        f"{inbox_url} ({sign_in})",
    )
    sources = [real.section] if real is not None else []
    console = Console(header, registry, stats, out, time.monotonic(), sources)
    elapsed = 0.0
    failure: str | None = None
    try:
        out.write(f"agui-gateway demo: starting (metrics {metrics_url}, gateway log {log_path})\n")
        out.write(f"agui-gateway demo: the inbox is at {inbox_url}: {sign_in}\n")
        out.flush()
        await wait_ready(gateway, gateway_task)
        try:
            await agents.start()
            await clients.start()
            if real is not None:
                await real.start()
        except (KafkaError, TimeoutError, OSError) as exc:
            raise DemoSetupError(
                f"the simulated agents and clients cannot start: {exc!r}"
            ) from None
        console.started = time.monotonic()
        traffic = [
            asyncio.create_task(agents.run(stop_traffic), name="agents"),
            asyncio.create_task(clients.answer(stop_traffic), name="clients"),
        ]
        replies_task = asyncio.create_task(clients.count_replies(stop_replies), name="replies")
        watched = [asyncio.create_task(stop.wait()), gateway_task, *traffic, replies_task]
        if real is not None:
            traffic.append(real.converse(stop_traffic))
            watched += [traffic[-1], *real.watched()]
        drawing = asyncio.create_task(console.run(stop), name="console")
        done, _ = await asyncio.wait(watched, timeout=duration, return_when="FIRST_COMPLETED")
        broken = [t for t in done if t is not watched[0]]
        if broken:
            failure = f"{broken[0].get_name()} stopped: {_failure(broken[0])}"
        elapsed = console.elapsed()
        stop.set()
        watched[0].cancel()
        await _bounded(drawing, 2)
    finally:
        stop.set()
        stop_traffic.set()
        for task in traffic:
            await _bounded(task, 5)
        if real is not None:
            if failure is None and not gateway_task.done():
                await real.drain()  # approvals sent get their runs, so the counts compare
            await real.close()
        await agents.close()
        await clients.cancel_answers()
        if failure is None and not gateway_task.done():
            await _until(lambda: stats.awaiting <= 0, DRAIN_S)
        stop_gateway.set()
        await _bounded(asyncio.shield(gateway_task), GATEWAY_STOP_S)
        if not gateway_task.done():
            gateway_task.cancel()
            await _bounded(gateway_task, 5)
        if failure is None:
            await _until(lambda: stats.awaiting <= 0, 1.0)
        stop_replies.set()
        if replies_task is not None:
            await _bounded(replies_task, 5)
        await clients.close()
        await http.stop()
        stop_inbox.set()
        await _bounded(inbox_task, 5)
        await inbox.aclose()  # the page's sender, if an answer from the page started it
    console.final(elapsed)
    if failure is not None:
        raise DemoFailed(failure)
