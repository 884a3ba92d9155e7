"""2b. Request-to-visible-forward latency at a fixed offered load.

The gateway runs as the service does (`python -m gateway run`, a process of
its own), with the interrupted threads' events already consumed. The bench
then offers requests at a fixed rate and a read_committed consumer of the
run-requests topic notes when each forward becomes visible. Latency is that
receive wall time minus the send wall time the request carries in its
`forwardedProps` (which the gateway passes through untouched). Both clocks
are this process's. Requests sent during the warm-up are left out.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench.broker import Admin, end_offsets, produce
from bench.config import Context
from bench.cpu import broker_pid, cpu_seconds
from bench.gatewayrun import GatewayProcess, Names, create_topics, make_settings
from bench.report import Figure, figure, median, percentile
from bench.workload import EXPECTED, DecisionWorkload

REQUESTS_PER_THREAD = 1.45  # mean script length (bench.workload.SCRIPTS)


def _machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs, from /proc/stat."""
    try:
        fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    except (OSError, ValueError):
        return math.nan, math.nan
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


class CpuHog:
    """A process that keeps one core busy (a Python busy loop) while the context lasts."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.cpu_percent = math.nan

    def __enter__(self) -> CpuHog:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "while True: pass"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._started = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        seconds = time.perf_counter() - self._started
        self.cpu_percent = round(100 * cpu_seconds(self.proc.pid) / max(seconds, 1e-9), 1)
        self.proc.kill()
        self.proc.wait()


async def _wait_committed(
    admin: Admin, group: str, targets: dict[TopicPartition, int], timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        committed = await admin.committed(group)
        if all(committed.get(tp, -1) >= end for tp, end in targets.items()):
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"the gateway did not consume the events within {timeout} s")


Disturb = Callable[[GatewayProcess, float], Coroutine[Any, Any, dict[str, Any]]]


async def one_run(
    ctx: Context,
    rep: int | str,
    workload: DecisionWorkload,
    rate: float | None = None,
    disturb: Disturb | None = None,
    hog: bool = False,
    profile_out: Path | None = None,
) -> dict[str, Any]:
    """One gateway process, its threads' events consumed, then requests offered at `rate`.

    With `disturb`, that coroutine runs beside the offered load (given the
    gateway process and the wall time sending started) and its answer is
    kept under "disturbance". The raw (sent at, latency) pairs are under
    "latencies" (the caller drops them before writing results). With `hog`,
    a CPU hog (a busy loop in a process of its own) runs from just before
    the first request until the last forward was seen. With `profile_out`, the gateway
    runs under pyinstrument (bench/profiledgateway.py), sampled from the first request
    sent until the last forward was seen; the summary is under "profile".
    """
    size = ctx.size
    names = Names(
        f"{ctx.namespace}-l{rep}", f"{ctx.namespace}-l{rep}", f"{ctx.namespace}-l{rep}-gw"
    )
    settings = names.settings(ctx.bootstrap)
    async with Admin(ctx.bootstrap) as admin:
        await create_topics(
            admin, names, make_settings(names, ctx.bootstrap), size.partitions, inputs=True
        )
        await produce(ctx.bootstrap, names.events, workload.events())
        event_ends = await end_offsets(ctx.bootstrap, names.events, size.partitions)
        command = None
        if profile_out is not None:
            (profile_out / "profile-latency.json").unlink(missing_ok=True)  # a previous run's
            command = [sys.executable, "-m", "bench.profiledgateway", str(profile_out)]
        gateway = GatewayProcess(settings, ctx.work / f"gateway-latency-{rep}.log", command)
        gateway.start()
        try:
            await gateway.wait_ready(120)
            await _wait_committed(admin, names.group, event_ends, 300)
            with CpuHog() if hog else contextlib.nullcontext() as hogging:
                result = await _offer(
                    ctx,
                    names,
                    workload,
                    gateway,
                    rate or size.latency_rate,
                    disturb,
                    profiled=profile_out is not None,
                )
            if hogging is not None:
                result["hog_cpu_percent"] = hogging.cpu_percent
        finally:
            await gateway.stop()
    # Kafka >= 3.6 answers a transactional produce it cannot verify yet (the previous
    # transaction's markers still being written) with NOT_ENOUGH_REPLICAS; aiokafka
    # retries it after retry_backoff_ms (100 ms).
    result["gateway_not_enough_replicas_retries"] = gateway.log_count("NotEnoughReplicasError")
    return result


async def _offer(
    ctx: Context,
    names: Names,
    workload: DecisionWorkload,
    gateway: GatewayProcess,
    rate: float,
    disturb: Disturb | None,
    profiled: bool = False,
) -> dict[str, Any]:
    size = ctx.size
    requests = workload.requests()
    expected_forwards = sum(1 for r in requests if EXPECTED[r.kind] == "forward")
    consumer = AIOKafkaConsumer(
        bootstrap_servers=ctx.bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    producer = AIOKafkaProducer(bootstrap_servers=ctx.bootstrap, acks="all", linger_ms=0)
    await consumer.start()
    await producer.start()
    latencies: list[tuple[float, float]] = []  # (sent at, latency s)
    received = 0
    stop = asyncio.Event()
    disturbing: asyncio.Task[dict[str, Any]] | None = None
    profile: dict[str, Any] | None = None

    async def collect() -> None:
        nonlocal received
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=50)
            now = time.time()
            for messages in batch.values():
                for m in messages:
                    sent = orjson.loads(m.value)["forwardedProps"]["benchSentAt"]
                    latencies.append((sent, now - sent))
                    received += 1

    try:
        tps = [TopicPartition(names.run_requests, p) for p in range(size.partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        await consumer.getmany(timeout_ms=100)  # connected and fetching before the first send
        # keep this process's collector off the workload's objects while it times things
        gc.collect()
        gc.freeze()
        collector = asyncio.create_task(collect())
        assert gateway.proc is not None
        metrics_before = await asyncio.to_thread(gateway.metrics)
        cpu_before = cpu_seconds(gateway.proc.pid)
        broker = broker_pid(ctx.bootstrap)
        broker_before = cpu_seconds(broker) if broker else math.nan
        bench_before = cpu_seconds(os.getpid())
        busy_before, total_before = _machine_busy()
        if profiled:
            gateway.proc.send_signal(signal.SIGUSR1)  # sampling starts with the load
        started_wall = time.time()
        started = time.perf_counter()
        interval = 1.0 / rate
        disturbing = (
            asyncio.create_task(disturb(gateway, started_wall)) if disturb is not None else None
        )
        pending: list[asyncio.Future[Any]] = []
        for n, request in enumerate(requests):
            due = started + n * interval
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            sent = time.time()
            pending.append(
                await producer.send(
                    names.requests,
                    request.value(sent_at=sent),
                    key=request.key,
                    partition=workload.partition(request),
                    headers=request.headers(names.replies),
                )
            )
        sent_seconds = time.perf_counter() - started
        await asyncio.gather(*pending)
        disturbance = await disturbing if disturbing is not None else None
        deadline = time.monotonic() + 60
        while received < expected_forwards and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        drained_seconds = time.perf_counter() - started
        cpu = cpu_seconds(gateway.proc.pid) - cpu_before
        broker_cpu = (cpu_seconds(broker) - broker_before) if broker else math.nan
        bench_cpu = cpu_seconds(os.getpid()) - bench_before
        busy_after, total_after = _machine_busy()
        stop.set()
        await collector
        if profiled:  # stop sampling; writing the profile holds the gateway's loop a while
            gateway.proc.send_signal(signal.SIGUSR2)
            profile = await _profile_summary(ctx.out)
        metrics = await asyncio.to_thread(gateway.metrics)
    finally:
        gc.unfreeze()
        stop.set()
        if disturbing is not None and not disturbing.done():
            disturbing.cancel()
            with contextlib.suppress(BaseException):
                await disturbing
        await producer.stop()
        with contextlib.suppress(Exception):
            await consumer.stop()
    warm = [lat for sent, lat in latencies if sent - started_wall >= size.latency_warmup_seconds]
    worst = sorted(latencies, key=lambda x: x[1], reverse=True)[:10]
    internal = _histogram(metrics, "agui_gateway_decision_seconds")
    # during the load only: the transactions committed and the requests decided in them
    committed = "agui_gateway_transactions_total{result=committed}"
    transactions = metrics.get(committed, 0.0) - metrics_before.get(committed, 0.0)
    decided = sum(
        v - metrics_before.get(k, 0.0)
        for k, v in metrics.items()
        if k.startswith("agui_gateway_requests_total")
    )
    if not warm:
        raise RuntimeError("no forward was seen after the warm-up")
    return {
        "requests": len(requests),
        "offered_rate": round(len(requests) / sent_seconds, 1),
        "forwards_expected": expected_forwards,
        "forwards_seen": received,
        "measured": len(warm),
        "p50_ms": 1000 * percentile(warm, 50),
        "p90_ms": 1000 * percentile(warm, 90),
        "p99_ms": 1000 * percentile(warm, 99),
        "max_ms": 1000 * max(warm),
        "gateway_cpu_percent": round(100 * cpu / drained_seconds, 1),
        # CPU time per request sent: what the machine's load changes least
        "gateway_cpu_ms_per_request": round(1000 * cpu / len(requests), 3),
        "broker_cpu_percent": round(100 * broker_cpu / drained_seconds, 1),
        "bench_client_cpu_percent": round(100 * bench_cpu / drained_seconds, 1),
        # the broker's CPU time per request decided during the load (issue 25): on a
        # machine the gateway shares with its broker, the broker's work per request
        "broker_cpu_ms_per_request": round(1000 * broker_cpu / decided, 3) if decided else None,
        "machine_busy_percent": round(
            100 * (busy_after - busy_before) / max(1, total_after - total_before), 1
        ),
        "gateway_decision_seconds": internal,
        "gateway_transactions": transactions,
        "gateway_requests_per_transaction": round(decided / transactions, 2)
        if transactions
        else None,
        "gateway_transactions_per_s": round(transactions / drained_seconds, 1),
        "gateway_merge_wait_expired": sum(
            v for k, v in metrics.items() if k.startswith("agui_gateway_merge_wait_expired_total")
        ),
        "timeline": _timeline(latencies, started_wall),
        "disturbance": disturbance,
        "profile": profile,
        "latencies": [(sent - started_wall, lat) for sent, lat in latencies],
        "worst": [
            {"sent_after_s": round(sent - started_wall, 3), "latency_ms": round(1000 * lat, 1)}
            for sent, lat in worst
        ],
    }


def _timeline(latencies: list[tuple[float, float]], start: float) -> list[list[float]]:
    """Per second of sending: [second, count, p50 ms, max ms]."""
    by_second: dict[int, list[float]] = {}
    for sent, lat in latencies:
        by_second.setdefault(int(sent - start), []).append(lat)
    return [
        [second, len(lats), round(1000 * percentile(lats, 50), 1), round(1000 * max(lats), 1)]
        for second, lats in sorted(by_second.items())
    ]


def _histogram(metrics: dict[str, float], name: str) -> dict[str, Any]:
    """Count, mean and bucket-bound p50/p99 of one histogram from scraped samples."""
    count = metrics.get(f"{name}_count", 0.0)
    total = metrics.get(f"{name}_sum", 0.0)
    buckets = sorted(
        (float(k.split("le=")[1].rstrip("}")), v)
        for k, v in metrics.items()
        if k.startswith(f"{name}_bucket{{")
    )

    def bound(q: float) -> float | None:
        for le, cumulative in buckets:
            if count and cumulative >= q * count:
                return le
        return None

    return {
        "count": count,
        "mean_ms": round(1000 * total / count, 1) if count else None,
        "p50_le_ms": (b * 1000 if (b := bound(0.5)) is not None else None),
        "p99_le_ms": (b * 1000 if (b := bound(0.99)) is not None else None),
    }


def workload_for(ctx: Context, rate: float, seconds: float, seed: int) -> DecisionWorkload:
    """Enough threads for `rate` requests/s over `seconds` (at least 10), each with its
    interrupted run; `seed` sets this scenario's workload apart from the others'."""
    threads = max(10, math.ceil(rate * seconds / REQUESTS_PER_THREAD))
    return DecisionWorkload(threads, ctx.size.partitions, ctx.seed + seed)


def rounded(result: dict[str, Any]) -> dict[str, Any]:
    """A run's result as reported: floats to two decimals."""
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in result.items()}


def worst_of(runs: list[dict[str, Any]]) -> str:
    """How a figure that takes the worst of repeated disturbed runs was made."""
    return f"worst of {len(runs)} runs" if len(runs) > 1 else "single run"


async def _profile_summary(out: Path, timeout: float = 60) -> dict[str, Any] | None:
    """The profiled gateway's summary, once it has written it (after SIGUSR2)."""
    path = out / "profile-latency.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            found: dict[str, Any] = orjson.loads(path.read_bytes())
            return found
        await asyncio.sleep(0.2)
    return None


async def run(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    size = ctx.size
    workload = workload_for(ctx, size.latency_rate, size.latency_seconds, 2)
    runs = []
    for rep in range(size.repeat):
        result = await one_run(ctx, rep, workload)
        result.pop("latencies")
        runs.append(rounded(result))
        ctx.log(
            f"latency rep {rep + 1}/{size.repeat} at {result['offered_rate']:.0f} req/s: "
            f"p50 {result['p50_ms']:.1f} ms, p99 {result['p99_ms']:.1f} ms, "
            f"{result['forwards_seen']}/{result['forwards_expected']} forwards, "
            f"CPU: gateway {result['gateway_cpu_percent']}%, broker {result['broker_cpu_percent']}%, "
            f"machine {result['machine_busy_percent']}% of all cores, gateway CPU "
            f"{result['gateway_cpu_ms_per_request']} ms per request, broker CPU "
            f"{result['broker_cpu_ms_per_request']} ms per decided request, "
            f"{result['gateway_transactions_per_s']} transactions/s, "
            f"{result['gateway_requests_per_transaction']} requests per transaction"
        )
    profile: dict[str, Any] | None = None
    if ctx.profile:  # an extra run, never one of the measured ones
        profiled = await one_run(ctx, "profile", workload, profile_out=ctx.out)
        profile = profiled.get("profile")
        ctx.log(
            f"latency: profiled run p50 {profiled['p50_ms']:.1f} ms, p99 "
            f"{profiled['p99_ms']:.1f} ms; profile written to {ctx.out}/profile-latency.txt"
        )
    how = (
        f"median of {size.repeat} runs' percentiles" if size.repeat > 1 else "single run"
    ) + f" at {size.latency_rate:,.0f} requests/s offered for {size.latency_seconds:g} s"
    figures = [
        figure(
            "latency.p50_ms",
            "Request → visible forward, p50",
            median([r["p50_ms"] for r in runs]),
            "ms",
            how,
        ),
        figure(
            "latency.p99_ms",
            f"Request → visible forward, p99 (at {size.latency_rate:,.0f} req/s)",
            median([r["p99_ms"] for r in runs]),
            "ms",
            how,
            target="<= 250",
        ),
        figure(
            "latency.broker_cpu_ms_per_request",
            "Broker CPU per decided request during the latency run",
            median([r["broker_cpu_ms_per_request"] or math.nan for r in runs]),
            "ms",
            f"median of {size.repeat} runs" if size.repeat > 1 else "single run",
        ),
        figure(
            "latency.gateway_cpu_percent",
            "Gateway CPU during the latency run (one core = 100%)",
            median([r["gateway_cpu_percent"] for r in runs]),
            "%",
            f"median of {size.repeat} runs" if size.repeat > 1 else "single run",
        ),
    ]

    def mid(key: str) -> float:
        return median([r[key] for r in runs])

    note = (
        f"Latency runs: {size.latency_rate:,.0f} requests/s offered for "
        f"{size.latency_seconds:g} s ({mid('requests'):,.0f} requests, first "
        f"{size.latency_warmup_seconds:g} s excluded); median CPU: gateway "
        f"{mid('gateway_cpu_percent')}%, broker {mid('broker_cpu_percent')}%, bench client "
        f"{mid('bench_client_cpu_percent')}% of one core; all cores "
        f"{mid('machine_busy_percent')}% busy. Transactional produce retries "
        f"(NOT_ENOUGH_REPLICAS from KIP-890 verification) in the gateway's log: "
        f"{mid('gateway_not_enough_replicas_retries'):.0f} per run."
    )
    detail = {
        "threads": len(workload.threads),
        "offered_rate": size.latency_rate,
        "offered_seconds": size.latency_seconds,
        "warmup_seconds": size.latency_warmup_seconds,
        "runs": runs,
        "gateway": "subprocess: python -m gateway run (default settings, INFO logs to a file)",
        "profile": profile,
        "note": note,
    }
    return figures, detail
