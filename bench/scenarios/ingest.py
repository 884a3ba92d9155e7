"""1. Event ingest: the gateway against a raw consumer on the same events topic.

The events topic is produced once. Each measurement reads all of it from the
beginning: the baseline with a bare aiokafka consumer (read_committed, the
gateway's fetch settings, no processing), the gateway with a fresh group and
a fresh output namespace (its own changelog), exactly-once on as always.
The baseline is timed from its first record received to its last; the
gateway from the moment every pair is ready (its first record, if later) to
the commit that covers the last record, counting only the records consumed
in that span (pairs are prepared one after another, so the first ones start
consuming while the others still restore).
"""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
import time
from typing import Any

import orjson
from aiokafka import TopicPartition

from bench.broker import REPO_ROOT, Admin, end_offsets, produce, reading_from_start
from bench.config import Context
from bench.cpu import CpuMeter, per_record_us
from bench.gatewayrun import Names, counter_total, create_topics, make_settings, run_in_process
from bench.profiling import Profile
from bench.report import Figure, best, figure, median
from bench.workload import EventShape, EventStream
from gateway.settings import Settings


async def raw_consume(
    bootstrap: str, topic: str, partitions: int, total: int, settings: Settings
) -> float:
    """Seconds a bare consumer takes from its first record to the last of `total`."""
    async with reading_from_start(
        bootstrap, topic, partitions, settings.max_poll_records
    ) as consumer:
        seen = 0
        first: float | None = None
        deadline = time.monotonic() + 600
        while seen < total:
            batch = await consumer.getmany(timeout_ms=settings.poll_timeout_ms)
            if batch and first is None:
                first = time.perf_counter()
            for messages in batch.values():
                seen += len(messages)
            if time.monotonic() > deadline:
                raise TimeoutError(f"raw consumer saw {seen} of {total} records")
        assert first is not None
        return time.perf_counter() - first


QUIX_COMMIT_INTERVAL_S = 1.0
# The peer reads the whole topic at a fraction of the gateway's rate (several minutes at
# full size), so it runs beside the first repeat only.
QUIX_RUNS = 1


def quix_missing() -> str | None:
    """Why the Quix Streams peer cannot run here (None: it can)."""
    if importlib.util.find_spec("quixstreams") is None:
        return "the quixstreams package is not installed (pip install -e '.[bench]')"
    return None


async def quix_consume(
    ctx: Context, topic: str, ends: dict[TopicPartition, int], total: int, tag: str
) -> dict[str, Any]:
    """The Quix Streams peer (bench/quixpeer.py) over the same events topic, in a process.

    Timed as the gateway is: from its first record processed to the moment
    the group's committed offsets (its exactly-once transactions) cover the
    last record, polled every 20 ms from here.
    """
    group = f"{ctx.namespace}-quix{tag}"
    report = ctx.work / f"quix-{tag}.jsonl"
    log_path = ctx.work / f"quix-{tag}.log"
    args = [sys.executable, "-m", "bench.quixpeer", "--bootstrap", ctx.bootstrap]
    args += ["--topic", topic, "--group", group, "--total", str(total)]
    args += ["--state-dir", str(ctx.work / f"quix-state-{tag}"), "--report", str(report)]
    args += ["--commit-interval", str(QUIX_COMMIT_INTERVAL_S)]
    started = time.time()
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            args, cwd=str(REPO_ROOT), stdout=log, stderr=log, stdin=subprocess.DEVNULL
        )
    try:
        async with Admin(ctx.bootstrap) as admin:
            deadline = time.monotonic() + 900
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"the Quix Streams peer exited {proc.returncode}:\n"
                        + "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
                    )
                committed = await admin.committed(group)
                if all(committed.get(tp, -1) >= end for tp, end in ends.items()):
                    done = time.time()
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"the Quix Streams peer did not commit to the end: {committed}"
                    )
                await asyncio.sleep(0.02)
    finally:
        proc.terminate()
        try:
            await asyncio.wait_for(asyncio.to_thread(proc.wait), timeout=60)
        except TimeoutError:
            proc.kill()
            await asyncio.to_thread(proc.wait)
        async with Admin(ctx.bootstrap) as admin:  # its changelog topic is named after the group
            await admin.delete_containing(group)
    notes = {n["what"]: n for n in map(orjson.loads, report.read_bytes().splitlines())}
    if "first" not in notes or "total" not in notes:
        raise RuntimeError(f"the Quix Streams peer processed {notes} of {total} records")
    first, last = notes["first"]["at"], notes["total"]["at"]
    return {
        "quix_events_per_s": round(total / (done - first)),
        "quix_seconds": round(done - first, 3),
        "quix_processing_seconds": round(last - first, 3),
        "quix_startup_seconds": round(first - started, 3),
    }


async def run(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    size = ctx.size
    names = Names(f"{ctx.namespace}-in", f"{ctx.namespace}-in0", f"{ctx.namespace}-in0-gw")
    shape = EventShape(
        threads=size.ingest_threads,
        partitions=size.partitions,
        interrupt_share=ctx.interrupt_share,
    )
    base_settings = make_settings(names, ctx.bootstrap)
    async with Admin(ctx.bootstrap) as admin:
        await create_topics(admin, names, base_settings, size.partitions, inputs=True)
    stream = EventStream(shape, ctx.seed)
    started = time.perf_counter()
    total = await produce(ctx.bootstrap, names.events, stream)
    produce_s = time.perf_counter() - started
    ctx.log(
        f"ingest: produced {total:,} events of {shape.threads:,} threads in {produce_s:.1f} s "
        f"({stream.stats.delta_share:.1%} deltas)"
    )
    ends = await end_offsets(ctx.bootstrap, names.events, size.partitions)

    baseline: list[float] = []
    gateway: list[float] = []
    runs: list[dict[str, Any]] = []
    quix: list[float] = []
    quix_not_run = quix_missing()
    meter = CpuMeter(ctx.bootstrap)
    for rep in range(size.repeat):
        start_cpu = meter.now()
        seconds = await raw_consume(
            ctx.bootstrap, names.events, size.partitions, total, base_settings
        )
        baseline_cpu = meter.since(start_cpu)
        baseline.append(total / seconds)
        rep_names = Names(
            names.inputs, f"{ctx.namespace}-in{rep + 1}", f"{ctx.namespace}-in{rep + 1}-gw"
        )
        settings = make_settings(rep_names, ctx.bootstrap)
        async with Admin(ctx.bootstrap) as admin:
            await create_topics(admin, rep_names, settings, size.partitions, inputs=False)
        start_cpu = meter.now()
        result = await run_in_process(settings, ends, timeout=900)
        gateway_cpu = meter.since(start_cpu)
        counted = counter_total(result.registry, "agui_gateway_events")
        if int(counted) != total:
            raise AssertionError(f"gateway counted {counted} events, {total} were produced")
        # timed once every pair is ready: records early pairs consumed before are left out
        gateway.append((total - result.records_before) / result.seconds)
        runs.append(
            {
                "baseline_events_per_s": round(baseline[-1]),
                # CPU per event (issue 25); the gateway's run includes its start
                "gateway_cpu_us_per_event": per_record_us(gateway_cpu.own_s, total),
                "baseline_cpu_us_per_event": per_record_us(baseline_cpu.own_s, total),
                "gateway_broker_cpu_us_per_event": per_record_us(gateway_cpu.broker_s, total),
                "baseline_broker_cpu_us_per_event": per_record_us(baseline_cpu.broker_s, total),
                "gateway_events_per_s": round(gateway[-1]),
                "gateway_seconds": round(result.seconds, 3),
                "gateway_startup_seconds": round(result.startup_seconds, 3),
                "gateway_restore_overlap_seconds": round(result.restore_overlap_seconds, 3),
                "gateway_records_before_all_ready": result.records_before,
                "gateway_rounds": result.rounds,
                "gateway_commits": result.commits,
                "transactions": counter_total(
                    result.registry, "agui_gateway_transactions", result="committed"
                ),
            }
        )
        ctx.log(
            f"ingest rep {rep + 1}/{size.repeat}: baseline {baseline[-1]:,.0f} ev/s, "
            f"gateway {gateway[-1]:,.0f} ev/s (ratio {gateway[-1] / baseline[-1]:.3f})"
        )
        if quix_not_run is None and rep < QUIX_RUNS:
            try:
                peer = await quix_consume(ctx, names.events, ends, total, str(rep))
            except (
                Exception
            ) as exc:  # the peer's failure is reported, not the gateway's figures lost
                quix_not_run = f"the peer failed: {str(exc).strip()[:600]}"
                ctx.log(f"ingest: Quix Streams peer {quix_not_run}")
                continue
            quix.append(peer["quix_events_per_s"])
            runs[-1].update(peer)
            ctx.log(
                f"ingest rep {rep + 1}/{size.repeat}: Quix Streams {quix[-1]:,.0f} ev/s "
                f"(gateway ÷ Quix {gateway[-1] / quix[-1]:.3f})"
            )

    profile: dict[str, Any] | None = None
    if ctx.profile:
        rep_names = Names(names.inputs, f"{ctx.namespace}-inp", f"{ctx.namespace}-inp-gw")
        settings = make_settings(rep_names, ctx.bootstrap)
        async with Admin(ctx.bootstrap) as admin:
            await create_topics(admin, rep_names, settings, size.partitions, inputs=False)
        prof = Profile("ingest", ctx.out)
        await run_in_process(settings, ends, timeout=1800, span=prof)
        profile = prof.summary()
        ctx.log(f"ingest: profile written to {prof.text_path}")

    how = f"best of {size.repeat}" if size.repeat > 1 else "single run"
    mid = f"median of {size.repeat}" if size.repeat > 1 else "single run"

    def cpu(key: str) -> float:
        return median([r[key] for r in runs])

    figures = [
        figure(
            "ingest.ratio",
            "Event ingest: gateway ÷ raw consumer",
            best(gateway) / best(baseline),
            "ratio",
            f"{how} each, events/s first record → last committed",
            target=">= 0.8",
        ),
        figure(
            "ingest.gateway_events_per_s", "Event ingest, gateway", best(gateway), "events/s", how
        ),
        figure(
            "ingest.baseline_events_per_s",
            "Event ingest, raw consumer (read_committed)",
            best(baseline),
            "events/s",
            how,
        ),
        figure(
            "ingest.cpu_ratio",
            "Event ingest, CPU per event: raw consumer ÷ gateway",
            cpu("baseline_cpu_us_per_event") / cpu("gateway_cpu_us_per_event"),
            "ratio",
            f"{mid} each, this process's CPU time (the gateway's from its start)",
        ),
        figure(
            "ingest.gateway_broker_cpu_us_per_event",
            "Event ingest, broker CPU per event the gateway consumed",
            cpu("gateway_broker_cpu_us_per_event"),
            "µs",
            mid,
        ),
    ]
    if quix and not quix_not_run:
        figures += [
            figure(
                "ingest.gateway_vs_quix",
                "Event ingest: gateway ÷ Quix Streams peer (exactly-once, RocksDB state, changelog)",
                best(gateway) / best(quix),
                "ratio",
                f"gateway {how}, the peer {len(quix)} run(s), events/s first record → last committed",
            ),
            figure(
                "ingest.quix_events_per_s",
                "Event ingest, Quix Streams peer (same core, exactly-once)",
                best(quix),
                "events/s",
                f"{len(quix)} run(s)",
            ),
        ]
    detail = {
        "quix_peer": (
            f"not run: {quix_not_run}"
            if quix_not_run
            else f"bench/quixpeer.py, commit_interval {QUIX_COMMIT_INTERVAL_S:g} s"
        ),
        "workload": stream.stats.to_json(),
        "produce_seconds": round(produce_s, 2),
        "runs": runs,
        "profile": profile,
    }
    if quix_not_run:
        detail["note"] = f"Quix Streams peer not run: {quix_not_run}"
    return figures, detail
