"""6. A fleet: what one gateway instance costs as the number of agents it fronts grows.

For each fleet size (agents, 4 partitions each; `--fleet 1,10,50`), in a
namespace of its own:

1. every agent's topics, as `topics create` lays them out, and a few
   interrupted threads per agent on its events topic;
2. one `agui-gateway run` process (default settings). Ready after start: from
   starting the process to the first `/readyz` that answers 200 with every
   pair of the fleet assigned; then its group's committed offsets must cover
   the events;
3. idle (no traffic): gateway CPU, RSS (`/proc/PID/status`), TCP connections
   to the broker (the process's sockets in `/proc/PID/net/tcp*` whose remote
   port is the broker's, established), `/metrics` size and scrape time
   (median of 3);
4. light traffic spread over all agents (round-robin), 50 and then 200
   requests/s in total: request → visible forward p50/p99 (a read_committed
   consumer of every run-requests topic) and gateway CPU;
5. one agent added under 50 requests/s: its topics are created, and the
   worst request → forward latency of the other agents' requests sent from
   then until 2 s after `/readyz` shows the new agent's pairs assigned is the
   pause the rebalance caused (an upper bound: it includes the normal latency).

Everything is read from outside the gateway (its process, HTTP endpoints and
topics). A fleet size whose gateway is not ready within the ready timeout is
reported as such and the larger sizes are skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import resource
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, cast

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench.broker import Admin
from bench.config import Context
from bench.gatewayrun import GatewayProcess
from bench.outside import (
    GatewayExited,
    broker_connections,
    rss_bytes,
    scrape,
    wait_assigned,
    wait_committed,
)
from bench.report import Figure, figure, percentile
from bench.scenarios.latency import REQUESTS_PER_THREAD, _cpu_seconds
from bench.workload import EXPECTED, DecisionWorkload, Request
from gateway.kafka.wire.clients import know_topics
from gateway.kafka.wire.topics import agent_topic_layout
from gateway.settings import Settings

PARTITIONS = 4
RATES = (50.0, 200.0)
ADD_AGENT_RATE = 50.0
AFTER_ASSIGNED_S = 2.0
CREATE_BATCH = 200  # topics per create request
# settings of the fleet's gateway on top of its defaults (`--fleet-setting`), e.g. to measure
# one beside the defaults in the same session
SETTINGS: dict[str, str] = {}


@dataclass
class Fleet:
    ns: str
    bootstrap: str
    agents: list[str]

    def settings(self) -> dict[str, Any]:
        ns = self.ns
        return {
            "bootstrap_servers": self.bootstrap,
            "client_id": f"{ns}-gw",
            "group_id": f"{ns}-gw",
            "events_topic": f"{ns}.{{agent}}.events",
            "requests_topic": f"{ns}.{{agent}}.requests",
            "run_requests_topic": f"{ns}.{{agent}}.run-requests",
            "changelog_topic": f"{ns}.{{agent}}.gateway-changelog",
            "rejections_topic": f"{ns}.rejections",
            "warnings_topic": f"{ns}.warnings",
            "log_level": "INFO",
        }

    def topic(self, agent: str, kind: str) -> str:
        return f"{self.ns}.{agent}.{kind}"

    @property
    def replies(self) -> str:
        return f"{self.ns}.replies"


async def create_agents(admin: Admin, fleet: Fleet, agents: list[str]) -> None:
    settings = Settings(**fleet.settings())
    layout: dict[str, tuple[int, dict[str, str]]] = {fleet.replies: (1, {})}
    for agent in agents:
        layout.update(agent_topic_layout(settings, agent, PARTITIONS, PARTITIONS))
    names = list(layout)
    for start in range(0, len(names), CREATE_BATCH):
        await admin.create({n: layout[n] for n in names[start : start + CREATE_BATCH]})


async def learn_topics(producer: AIOKafkaProducer, topics: Iterable[str]) -> None:
    """The producer's metadata tracks every one of `topics`, learned in one update.

    Left to itself, a producer learns a topic at its first send to it: one metadata
    update each, every one asking for all the topics tracked so far and retried 100 ms
    later while the topic is missing. A thousand agents' topics took minutes that way
    (and, in the load, held up the first request to each agent). The gateway's
    `know_topics` does it for a consumer, whose client is `_client`; a producer's is
    `client`.
    """
    await know_topics(cast(AIOKafkaConsumer, SimpleNamespace(_client=producer.client)), topics)


async def produce_events(bootstrap: str, records: list[tuple[str, int, bytes, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20)
    await producer.start()
    try:
        await learn_topics(producer, {topic for topic, _, _, _ in records})
        pending = [
            await producer.send(topic, value, key=key, partition=partition)
            for topic, partition, key, value in records
        ]
        await asyncio.gather(*pending)
    finally:
        await producer.stop()


# --- load ----------------------------------------------------------------------------------


class Load:
    """Requests to the fleet's agents in turn; forwards seen on every run-requests topic."""

    def __init__(
        self, fleet: Fleet, workloads: dict[str, DecisionWorkload], gateway: GatewayProcess
    ) -> None:
        self.fleet = fleet
        self.gateway = gateway
        self.workloads = workloads
        queues = {a: w.requests() for a, w in workloads.items()}
        self.queue: list[tuple[str, Request]] = []  # round-robin over the agents
        for n in range(max(len(q) for q in queues.values())):
            self.queue += [(a, q[n]) for a, q in queues.items() if n < len(q)]
        self.next = 0
        self.latencies: list[tuple[float, float]] = []  # (sent at wall, latency s)
        self.expected = 0
        self.stop = asyncio.Event()

    async def __aenter__(self) -> Load:
        self.producer = AIOKafkaProducer(
            bootstrap_servers=self.fleet.bootstrap, acks="all", linger_ms=0
        )
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=self.fleet.bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
        )
        await self.producer.start()
        await learn_topics(
            self.producer, {self.fleet.topic(a, "requests") for a in self.fleet.agents}
        )
        await self.consumer.start()
        tps = [
            TopicPartition(self.fleet.topic(a, "run-requests"), p)
            for a in self.fleet.agents
            for p in range(PARTITIONS)
        ]
        self.consumer.assign(tps)
        await self.consumer.seek_to_beginning(*tps)
        await self.consumer.getmany(timeout_ms=100)
        self.collector = asyncio.create_task(self._collect())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop.set()
        with contextlib.suppress(Exception):
            await self.collector
        await self.producer.stop()
        with contextlib.suppress(Exception):
            await self.consumer.stop()

    async def _collect(self) -> None:
        while not self.stop.is_set():
            batch = await self.consumer.getmany(timeout_ms=50)
            now = time.time()
            for messages in batch.values():
                for m in messages:
                    sent = orjson.loads(m.value)["forwardedProps"]["benchSentAt"]
                    self.latencies.append((sent, now - sent))

    def left(self) -> int:
        return len(self.queue) - self.next

    async def offer(self, rate: float, seconds: float) -> tuple[float, float]:
        """Send at `rate` for `seconds` (or until the requests run out); wait for the forwards.

        Returns the wall time sending started and ended.
        """
        count = min(self.left(), max(1, round(rate * seconds)))
        interval = 1.0 / rate
        started_wall, started = time.time(), time.perf_counter()
        pending = []
        for n in range(count):
            delay = started + n * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            agent, request = self.queue[self.next]
            self.next += 1
            sent = time.time()
            pending.append(
                await self.producer.send(
                    self.fleet.topic(agent, "requests"),
                    request.value(sent_at=sent),
                    key=request.key,
                    partition=self.workloads[agent].partition(request),
                    headers=request.headers(self.fleet.replies),
                )
            )
            self.expected += EXPECTED[request.kind] == "forward"
        ended_wall = time.time()
        await asyncio.gather(*pending)
        deadline = time.monotonic() + 60
        while len(self.latencies) < self.expected and time.monotonic() < deadline:
            assert self.gateway.proc is not None
            if self.gateway.proc.poll() is not None:
                break
            await asyncio.sleep(0.05)
        return started_wall, ended_wall

    def between(self, start: float, end: float) -> list[float]:
        return [lat for sent, lat in self.latencies if start <= sent < end]


# --- one fleet size ------------------------------------------------------------------------


def _requests_per_agent(ctx: Context, agents: int) -> int:
    size = ctx.size
    total = sum(RATES) * size.fleet_load_seconds
    total += ADD_AGENT_RATE * (size.fleet_add_seconds + 10)
    return math.ceil(1.15 * total / agents)  # margin: not every request is a forward


async def one_size(ctx: Context, agents: int) -> dict[str, Any]:
    size = ctx.size
    fleet = Fleet(f"{ctx.namespace}-f{agents}", ctx.bootstrap, [f"a{n:04d}" for n in range(agents)])
    threads = max(2, math.ceil(_requests_per_agent(ctx, agents) / REQUESTS_PER_THREAD))
    workloads = {
        a: DecisionWorkload(threads, PARTITIONS, ctx.seed + 100 + n)
        for n, a in enumerate(fleet.agents)
    }
    out: dict[str, Any] = {
        "agents": agents,
        "pairs": agents * PARTITIONS,
        "threads_per_agent": threads,
    }
    started = time.perf_counter()
    async with Admin(ctx.bootstrap) as admin:
        await create_agents(admin, fleet, fleet.agents)
        out["create_topics_seconds"] = round(time.perf_counter() - started, 1)
        records = [
            (fleet.topic(a, "events"), p, k, v)
            for a, w in workloads.items()
            for p, k, v in w.events()
        ]
        await produce_events(ctx.bootstrap, records)
        ends: dict[TopicPartition, int] = {}
        for topic, p, _, _ in records:
            tp = TopicPartition(topic, p)
            ends[tp] = ends.get(tp, 0) + 1
        ctx.log(
            f"fleet {agents}: {agents * 5 + 3} topics created and {len(records):,} events "
            f"produced in {time.perf_counter() - started:.1f} s; starting the gateway"
        )
        settings = fleet.settings()
        if size.fleet_discovery_ms is not None:
            settings["discovery_interval_ms"] = size.fleet_discovery_ms
        out["discovery_interval_ms"] = size.fleet_discovery_ms or "default"
        settings["producer_scope"] = out["producer_scope"] = ctx.fleet_producer_scope
        settings.update(SETTINGS)
        if SETTINGS:
            out["settings"] = dict(SETTINGS)
        gateway = GatewayProcess(settings, ctx.work / f"gateway-fleet-{agents}.log")
        gateway.start()
        try:
            assert gateway.proc is not None
            pid = gateway.proc.pid
            try:
                ready, seen = await wait_assigned(
                    gateway, agents * PARTITIONS, size.fleet_ready_timeout
                )
            except GatewayExited as exc:
                out["not_ready"] = str(exc)
                ctx.log(f"fleet {agents}: {exc}")
                return out
            if ready is None:
                out["not_ready"] = (
                    f"not ready with {agents * PARTITIONS} pairs assigned within "
                    f"{size.fleet_ready_timeout:g} s ({seen} assigned)"
                )
                ctx.log(f"fleet {agents}: {out['not_ready']}")
                return out
            out["ready_seconds"] = round(ready, 2)
            await wait_committed(admin, fleet.settings()["group_id"], ends, 300)
            # let the catch-up's last rounds and commits settle
            await asyncio.sleep(min(1.0, size.fleet_idle_seconds))
            out.update(await _idle(gateway, pid, ctx, size.fleet_idle_seconds))
            async with Load(fleet, workloads, gateway) as load:
                for rate in RATES:
                    cpu_before, t0 = _cpu_seconds(pid), time.perf_counter()
                    sent_before = load.next
                    start, end = await load.offer(rate, size.fleet_load_seconds)
                    cpu = (_cpu_seconds(pid) - cpu_before) / (time.perf_counter() - t0)
                    warm = load.between(start + size.latency_warmup_seconds, end)
                    key = f"{rate:.0f}rps"
                    out[f"p50_ms_{key}"] = round(1000 * percentile(warm, 50), 1)
                    out[f"p99_ms_{key}"] = round(1000 * percentile(warm, 99), 1)
                    out[f"cpu_percent_{key}"] = round(100 * cpu, 1)
                    out[f"forwards_{key}"] = len(warm)
                    out[f"offered_rate_{key}"] = round(
                        (load.next - sent_before) / max(end - start, 1e-9), 1
                    )
                out["rss_bytes_after_load"] = rss_bytes(pid)
                try:
                    out.update(await _add_agent(ctx, admin, fleet, gateway, load))
                except GatewayExited as exc:
                    out["add_agent_error"] = str(exc)
                    ctx.log(f"fleet {agents}: while one agent was added, the {exc}")
        finally:
            await gateway.stop()
    ctx.log(
        f"fleet {agents}: ready {out['ready_seconds']} s, RSS {out['rss_bytes'] / 2**20:.0f} MiB, "
        f"{out['connections']} broker connections, /metrics {out['metrics_bytes'] / 1000:.0f} KB "
        f"({out['scrape_ms']:.0f} ms), CPU idle {out['cpu_percent_idle']}%; "
        + ", ".join(
            f"{r:.0f} req/s: p99 {out[f'p99_ms_{r:.0f}rps']:.0f} ms, CPU {out[f'cpu_percent_{r:.0f}rps']}%"
            for r in RATES
        )
        + (
            f"; adding one agent: worst latency {out['add_agent_worst_ms']:.0f} ms"
            if "add_agent_worst_ms" in out
            else f"; adding one agent: {out.get('add_agent_error')}"
        )
    )
    return out


async def _idle(gateway: GatewayProcess, pid: int, ctx: Context, seconds: float) -> dict[str, Any]:
    cpu_before, t0 = _cpu_seconds(pid), time.perf_counter()
    await asyncio.sleep(seconds)
    cpu = (_cpu_seconds(pid) - cpu_before) / (time.perf_counter() - t0)
    scrapes = [await asyncio.to_thread(scrape, gateway.port) for _ in range(3)]
    return {
        "cpu_percent_idle": round(100 * cpu, 1),
        "rss_bytes": rss_bytes(pid),
        "connections": broker_connections(pid, int(ctx.bootstrap.rsplit(":", 1)[1])),
        "metrics_bytes": scrapes[-1][0],
        "scrape_ms": round(1000 * statistics.median(s for _, s in scrapes), 1),
    }


async def _add_agent(
    ctx: Context, admin: Admin, fleet: Fleet, gateway: GatewayProcess, load: Load
) -> dict[str, Any]:
    """One more agent's topics while the others serve 50 requests/s."""
    new = f"a{len(fleet.agents):04d}"
    pairs = (len(fleet.agents) + 1) * PARTITIONS

    async def add() -> tuple[float, float | None]:
        await asyncio.sleep(1.0)
        created = time.time()
        await create_agents(admin, fleet, [new])
        waited, _ = await wait_assigned(gateway, pairs, ctx.size.fleet_add_seconds + 30)
        return created, (time.time() if waited is not None else None)

    adding = asyncio.create_task(add())
    start, _ = await load.offer(ADD_AGENT_RATE, ctx.size.fleet_add_seconds)
    created, assigned = await adding
    until = (assigned or time.time()) + AFTER_ASSIGNED_S
    if load.left() and time.time() < until:  # keep the load on until the window closes
        await load.offer(ADD_AGENT_RATE, until - time.time())
    window = load.between(created, until)
    return {
        "add_agent_assigned_seconds": round(assigned - created, 2) if assigned else None,
        "add_agent_worst_ms": round(1000 * max(window), 1) if window else math.nan,
        "add_agent_p50_ms": round(1000 * percentile(window, 50), 1) if window else math.nan,
        "add_agent_requests": len(window),
        "add_agent_window_seconds": round(until - created, 2),
        "add_agent_load_started_s_before": round(created - start, 2),
    }


# --- the scenario --------------------------------------------------------------------------


def _raise_open_files() -> int:
    """The soft open-files limit raised to the hard one (the gateway inherits it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


TARGETS = [
    # (key in a size's result, label, unit, target, scale)
    ("ready_seconds", "ready after start", "s", "<= 30", 1.0),
    ("rss_mib", "RSS", "MiB", "<= 1024", 1.0),
    ("connections", "TCP connections to the broker (one broker)", "connections", "<= 8", 1.0),
    ("metrics_kb", "/metrics size", "KB", "<= 200", 1.0),
    ("cpu_percent_idle", "gateway CPU idle (one core = 100%)", "%", "<= 5", 1.0),
    (
        "p99_ms_200rps",
        "request → visible forward p99 at 200 requests/s in total",
        "ms",
        "<= 250",
        1.0,
    ),
    (
        "add_agent_worst_ms",
        "adding one agent: worst latency of the others (the pause)",
        "ms",
        "<= 1000",
        1.0,
    ),
]
SUPPORTING = [
    ("scrape_ms", "/metrics scrape time", "ms"),
    ("p99_ms_50rps", "request → visible forward p99 at 50 requests/s in total", "ms"),
    ("cpu_percent_50rps", "gateway CPU at 50 requests/s", "%"),
    ("cpu_percent_200rps", "gateway CPU at 200 requests/s", "%"),
]


async def run(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    sizes = list(ctx.fleet or ctx.size.fleet_agents)
    open_files = _raise_open_files()
    results: list[dict[str, Any]] = []
    skipped: list[int] = []
    for n, agents in enumerate(sizes):
        result = await one_size(ctx, agents)
        results.append(result)
        async with Admin(ctx.bootstrap) as admin:  # free the broker before the next size
            await admin.delete_namespace(f"{ctx.namespace}-f{agents}.")
        if "not_ready" in result:
            skipped = sizes[n + 1 :]
            break
    for r in results:
        if "rss_bytes" in r:
            r["rss_mib"] = round(r["rss_bytes"] / 2**20, 1)
            r["metrics_kb"] = round(r["metrics_bytes"] / 1000, 1)
    measured = [r for r in results if "not_ready" not in r]
    figures: list[Figure] = []
    for r in measured:
        n = r["agents"]
        at_largest = r is measured[-1]
        for key, label, unit, target, _ in TARGETS:
            value = r.get(key)
            if value is None or (isinstance(value, float) and math.isnan(value)):
                continue
            figures.append(
                figure(
                    f"fleet.{n}.{key}",
                    f"Fleet of {n:,} agents ({n * PARTITIONS:,} pairs): {label}",
                    value,
                    unit,
                    "one gateway process, read from outside",
                    target=target if at_largest else None,
                )
            )
        for key, label, unit in SUPPORTING:
            if r.get(key) is not None:
                figures.append(
                    figure(
                        f"fleet.{n}.{key}",
                        f"Fleet of {n:,} agents: {label}",
                        r[key],
                        unit,
                        "one gateway process",
                    )
                )
    header = [
        "agents (pairs)",
        "ready after start",
        "RSS",
        "TCP connections to the broker",
        "/metrics size (scrape)",
        "gateway CPU idle / 50 / 200 req/s",
        "p99 at 50 / 200 req/s",
        "add one agent: worst latency",
    ]
    rows = []
    for r in results:
        n = r["agents"]
        if "not_ready" in r:
            rows.append([f"{n:,} ({n * PARTITIONS:,})", r["not_ready"]] + ["—"] * 6)
            continue
        rows.append(
            [
                f"{n:,} ({n * PARTITIONS:,})",
                f"{r['ready_seconds']:.1f} s",
                f"{r['rss_mib']:.0f} MiB",
                f"{r['connections']:,}",
                f"{r['metrics_kb']:,.0f} KB ({r['scrape_ms']:.0f} ms)",
                f"{r['cpu_percent_idle']}% / {r['cpu_percent_50rps']}% / {r['cpu_percent_200rps']}%",
                f"{r['p99_ms_50rps']:,.0f} / {r['p99_ms_200rps']:,.0f} ms",
                f"{r['add_agent_worst_ms']:,.0f} ms"
                if "add_agent_worst_ms" in r
                else f"**{r.get('add_agent_error')}**",
            ]
        )
    largest = measured[-1]["agents"] if measured else 0
    note = (
        f"Fleet: sizes {sizes} (agents × {PARTITIONS} partitions), largest measured {largest:,}"
        + (f"; skipped {skipped} after a size was not ready" if skipped else "")
        + f"; targets apply at the largest size measured (issue targets are at 1,000 agents); "
        f"open-files limit {open_files:,}; {size_note(ctx)}"
    )
    failed_adds = [
        f"{r['agents']}: {r['add_agent_error']}" for r in results if "add_agent_error" in r
    ]
    if failed_adds:
        note += "; the gateway EXITED while one agent was added at " + "; ".join(failed_adds)
    detail = {
        "sizes": sizes,
        "skipped": skipped,
        "open_files_limit": open_files,
        "broker_heap": os.environ.get("KAFKA_HEAP_OPTS", "deploy/kafka.sh default"),
        "results": results,
        "table": {"title": "Fleet", "header": header, "rows": rows},
        "note": note,
    }
    return figures, detail


def size_note(ctx: Context) -> str:
    s = ctx.size
    return (
        f"idle {s.fleet_idle_seconds:g} s, each rate for {s.fleet_load_seconds:g} s, "
        f"adding one agent under {ADD_AGENT_RATE:.0f} requests/s"
    )
