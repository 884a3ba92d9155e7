"""2a. Decisions: judging a request stream end to end, against consume → transactional produce.

Per measurement, in a fresh namespace and group:

1. the interrupted threads' events (RUN_STARTED + an interrupting RUN_FINISHED)
   go on the events topic and a gateway consumes them (state built, committed,
   written to its changelog), then stops;
2. the gateway starts again in the same group and restores its state from
   its changelog; once every pair is ready, the request stream is produced
   (in large batches: a fraction of a second, overlapping the start of the
   measurement) and the gateway judges every request, timed from the first
   request received to the commit covering the last one.

The baseline reads the same request records with a bare read_committed
consumer and, per fetched batch, one transaction producing one record per
input plus the consumed offsets (send_offsets_to_transaction).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition

from bench.broker import Admin, end_offsets, produce, reading_from_start
from bench.config import Context
from bench.cpu import CpuMeter, per_record_us
from bench.gatewayrun import (
    Names,
    counter_total,
    create_topics,
    make_settings,
    run_in_process,
)
from bench.profiling import Profile
from bench.report import Figure, best, figure, median
from bench.workload import EXPECTED, DecisionWorkload
from gateway.kafka.wire import txnretry
from gateway.settings import Settings


async def raw_decide(
    bootstrap: str,
    topic: str,
    out_topic: str,
    partitions: int,
    total: int,
    group: str,
    settings: Settings,
) -> float:
    """Seconds a consume → transactional produce loop takes from first record to last commit."""
    txnretry.install()  # the same retry of a transaction's first write as the gateway's
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=f"{group}-{uuid.uuid4().hex[:8]}",
        enable_idempotence=True,
        transaction_timeout_ms=settings.transaction_timeout_ms,
        linger_ms=2,  # as the gateway's producers
    )
    async with reading_from_start(
        bootstrap, topic, partitions, settings.max_poll_records
    ) as consumer:
        await producer.start()
        try:
            done = 0
            first: float | None = None
            deadline = time.monotonic() + 900
            while done < total:
                batch = await consumer.getmany(timeout_ms=settings.poll_timeout_ms)
                if not batch:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"baseline decided {done} of {total}")
                    continue
                if first is None:
                    first = time.perf_counter()
                await producer.begin_transaction()
                offsets = {}
                for tp, messages in batch.items():
                    for m in messages:
                        await producer.send(
                            out_topic, value=m.value, key=m.key, partition=tp.partition
                        )
                    offsets[tp] = messages[-1].offset + 1
                    done += len(messages)
                await producer.send_offsets_to_transaction(offsets, group)
                await producer.commit_transaction()
            assert first is not None
            return time.perf_counter() - first
        finally:
            await producer.stop()


async def prepare_state(
    ctx: Context, names: Names, settings: Settings, workload: DecisionWorkload
) -> dict[TopicPartition, int]:
    """Topics, the threads' events, and a gateway run that consumed them. Returns their ends."""
    async with Admin(ctx.bootstrap) as admin:
        await create_topics(admin, names, settings, ctx.size.partitions, inputs=True)
    await produce(ctx.bootstrap, names.events, workload.events())
    ends = await end_offsets(ctx.bootstrap, names.events, ctx.size.partitions)
    await run_in_process(settings, ends, timeout=600)
    return ends


async def run(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    size = ctx.size
    workload = DecisionWorkload(size.decision_threads, size.partitions, ctx.seed + 1)
    requests = workload.requests()
    expected = Counter(EXPECTED[r.kind] for r in requests)
    kinds = Counter(r.kind for r in requests)
    encoded = [r.value() for r in requests]
    total = len(requests)

    baseline: list[float] = []
    gateway: list[float] = []
    runs: list[dict[str, Any]] = []
    profile: dict[str, Any] | None = None
    meter = CpuMeter(ctx.bootstrap)
    producing = [0.0]  # this process's CPU producing the request stream (not the gateway's)
    reps = list(range(size.repeat)) + (["profile"] if ctx.profile else [])
    for rep in reps:
        names = Names(
            f"{ctx.namespace}-d{rep}", f"{ctx.namespace}-d{rep}", f"{ctx.namespace}-d{rep}-gw"
        )
        settings = make_settings(names, ctx.bootstrap)
        event_ends = await prepare_state(ctx, names, settings, workload)

        async def produce_requests(names: Names = names) -> dict[TopicPartition, int]:
            """The request stream, produced once the gateway is ready (restore done)."""
            started = time.process_time()
            await produce(
                ctx.bootstrap,
                names.requests,
                [
                    (workload.partition(r), r.key, value, r.headers(names.replies))
                    for r, value in zip(requests, encoded, strict=True)
                ],
            )
            producing[0] = time.process_time() - started
            return await end_offsets(ctx.bootstrap, names.requests, size.partitions)

        if rep == "profile":
            prof = Profile("decisions", ctx.out)
            await run_in_process(
                settings, event_ends, timeout=1800, span=prof, when_ready=produce_requests
            )
            profile = prof.summary()
            ctx.log(f"decisions: profile written to {prof.text_path}")
            continue
        start_cpu = meter.now()
        result = await run_in_process(
            settings, event_ends, timeout=900, when_ready=produce_requests
        )
        gateway_cpu = meter.since(start_cpu, less_own_s=producing[0])
        decided = counter_total(result.registry, "agui_gateway_requests")
        if int(decided) != total:
            raise AssertionError(f"gateway decided {decided} of {total} requests")
        verdicts = {
            v: int(counter_total(result.registry, "agui_gateway_requests", verdict=v))
            for v in ("forward", "reject", "duplicate")
        }
        gateway.append((total - result.records_before) / result.seconds)

        out_topic = f"{names.outputs}.baseline-out"
        async with Admin(ctx.bootstrap) as admin:
            await admin.create({out_topic: (size.partitions, {})})
        start_cpu = meter.now()
        seconds = await raw_decide(
            ctx.bootstrap,
            names.requests,
            out_topic,
            size.partitions,
            total,
            f"{names.group}-baseline",
            settings,
        )
        baseline_cpu = meter.since(start_cpu)
        baseline.append(total / seconds)
        runs.append(
            {
                # CPU per request (issue 25): the gateway's run includes its start and
                # restore; its broker share includes taking the produced request stream
                "gateway_cpu_us_per_request": per_record_us(gateway_cpu.own_s, total),
                "baseline_cpu_us_per_request": per_record_us(baseline_cpu.own_s, total),
                "gateway_broker_cpu_us_per_request": per_record_us(gateway_cpu.broker_s, total),
                "baseline_broker_cpu_us_per_request": per_record_us(baseline_cpu.broker_s, total),
                "gateway_decisions_per_s": round(gateway[-1]),
                "baseline_decisions_per_s": round(baseline[-1]),
                "gateway_seconds": round(result.seconds, 3),
                "gateway_startup_seconds": round(result.startup_seconds, 3),
                "gateway_restore_overlap_seconds": round(result.restore_overlap_seconds, 3),
                "gateway_rounds": result.rounds,
                "gateway_commits": result.commits,
                "gateway_decided_in_commits": result.decided,
                "transactions": counter_total(
                    result.registry, "agui_gateway_transactions", result="committed"
                ),
                "verdicts": verdicts,
                "verdicts_as_expected": verdicts == {k: expected.get(k, 0) for k in verdicts},
            }
        )
        ctx.log(
            f"decisions rep {rep + 1}/{size.repeat}: baseline {baseline[-1]:,.0f}/s, "
            f"gateway {gateway[-1]:,.0f}/s (ratio {gateway[-1] / baseline[-1]:.3f}), {verdicts}"
        )

    how = f"best of {size.repeat}" if size.repeat > 1 else "single run"
    mid = f"median of {size.repeat}" if size.repeat > 1 else "single run"

    def cpu(key: str) -> float:
        return median([r[key] for r in runs])

    figures = [
        figure(
            "decisions.ratio",
            "Decisions: gateway ÷ consume→transactional produce",
            best(gateway) / best(baseline),
            "ratio",
            f"{how} each, requests/s first record → last committed",
            target=">= 0.7",
        ),
        figure("decisions.gateway_per_s", "Decisions, gateway", best(gateway), "requests/s", how),
        figure(
            "decisions.baseline_per_s",
            "Decisions, consume→transactional produce",
            best(baseline),
            "requests/s",
            how,
        ),
        figure(
            "decisions.cpu_ratio",
            "Decisions, CPU per request: consume→transactional produce ÷ gateway",
            cpu("baseline_cpu_us_per_request") / cpu("gateway_cpu_us_per_request"),
            "ratio",
            f"{mid} each, this process's CPU time (the gateway's from its start)",
        ),
        figure(
            "decisions.gateway_broker_cpu_us_per_request",
            "Decisions, broker CPU per request decided by the gateway",
            cpu("gateway_broker_cpu_us_per_request"),
            "µs",
            f"{mid}, the gateway's whole run, taking the request stream included",
        ),
        figure(
            "decisions.baseline_broker_cpu_us_per_request",
            "Decisions, broker CPU per request of consume→transactional produce",
            cpu("baseline_broker_cpu_us_per_request"),
            "µs",
            mid,
        ),
    ]
    detail = {
        "workload": {
            "threads": size.decision_threads,
            "requests": total,
            "mean_request_bytes": round(sum(map(len, encoded)) / total, 1),
            "kinds": dict(kinds.most_common()),
            "expected_verdicts": dict(expected),
        },
        "runs": runs,
        "profile": profile,
    }
    return figures, detail
