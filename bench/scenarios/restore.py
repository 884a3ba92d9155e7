"""4. Restore: the gateway rebuilding its state from the changelog, against a raw read of it.

A changelog of N threads (a share of them with open interrupts) is made by
the gateway's own `Round.changelog_records()` (each state put into a pair's
open round as the gateway puts it; values from `gateway.codec.changelog.encode`,
with whatever headers the gateway writes)
and produced, in transactions as the gateway writes it, to a compacted topic
laid out as the gateway's own. Then,
partition by partition as the gateway prepares its pairs:

- gateway: what preparing a pair does, `Restorer.restore` (its restore consumer,
  decoding each value as it does) then `PartitionPair.load_store`;
- baseline: a raw consumer with the same settings reading the same partition
  from its beginning to its end, no decoding.

Each side is timed under the service's collector settings (`agui-gateway run`'s,
`gateway.commands.collector`), the bench's own objects frozen first: the restore
runs in that process, and the workload held here must not make either side's
collections slower.

The figure is a speed ratio: baseline seconds ÷ gateway seconds. If the
gateway defers decoding to a thread's first read, "restore, then read every
thread" shows the deferred cost (informative).
"""

from __future__ import annotations

import dataclasses
import random
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from prometheus_client import CollectorRegistry

from bench.broker import Admin, produce_transactional
from bench.config import Context
from bench.gatewayrun import AGENT, Names, make_settings, service_collector
from bench.profiling import Profile
from bench.report import Figure, best, figure
from bench.workload import Ids, idle_thread_events, interrupted_thread_events, iso, partition_for
from gateway.core import ThreadState, apply_event
from gateway.kafka.assign.restore import Restorer
from gateway.kafka.pairs.pair import PartitionPair
from gateway.kafka.runner import Gateway
from gateway.kafka.wire.topics import changelog_configs
from gateway.observe.metrics import Metrics


def states(threads: int, interrupt_share: float, seed: int) -> list[ThreadState]:
    rng = random.Random(seed)
    ids = Ids(rng)
    now = datetime.now(UTC)
    expires = iso(now + timedelta(days=1))
    at = int(now.timestamp() * 1000)
    out = []
    for _ in range(threads):
        thread_id = ids.uuid()
        if rng.random() < interrupt_share:
            events, _ = interrupted_thread_events(rng, ids, thread_id, expires)
        else:
            events = idle_thread_events(rng, ids, thread_id)
        state = None
        for value in events:
            state = apply_event(state, thread_id, orjson.loads(value), at).state
        assert state is not None
        out.append(state)
    return out


async def raw_read(bootstrap: str, topic: str, partitions: int) -> tuple[float, int]:
    """Read every partition as `Restorer.restore` does, without decoding. (seconds, records)."""
    records = 0
    started = time.perf_counter()
    for partition in range(partitions):
        tp = TopicPartition(topic, partition)
        reader = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            max_poll_records=10000,
        )
        await reader.start()
        try:
            reader.assign([tp])
            end = (await reader.end_offsets([tp]))[tp]
            start = (await reader.beginning_offsets([tp]))[tp]
            reader.seek(tp, start)
            while await reader.position(tp) < end:
                batch = await reader.getmany(tp, timeout_ms=1000)
                records += len(batch.get(tp, ()))
        finally:
            await reader.stop()
    return time.perf_counter() - started, records


def _pair(gateway: Gateway, partition: int) -> PartitionPair:
    context = dataclasses.replace(gateway.context, topic_exists=lambda topic: True)
    return PartitionPair(gateway.names.for_agent(AGENT), partition, context)


def changelog_records(
    gateway: Gateway, built: list[ThreadState], partitions: int
) -> list[tuple[int, bytes, bytes | None, list[tuple[str, bytes]]]]:
    """The changelog records the gateway itself writes for these states."""
    pairs = [_pair(gateway, p) for p in range(partitions)]
    for state in built:
        pairs[partition_for(state.thread_id.encode(), partitions)].round.put(None, state)
    out = []
    for pair in pairs:
        for r in pair.round.changelog_records():
            assert r.key is not None and r.partition == pair.partition
            out.append((pair.partition, r.key, r.value, list(r.headers)))
    return out


async def gateway_restore(
    gateway: Gateway, partitions: int, read_all: bool = False
) -> tuple[float, int]:
    """Seconds to restore every partition (and with read_all, to read every thread)."""
    threads = 0
    restorer = Restorer(gateway.settings)
    started = time.perf_counter()
    for partition in range(partitions):
        pair = _pair(gateway, partition)
        restored = await restorer.restore(pair.topics.changelog, partition)
        pair.load_store(restored.store, restored.active, restored.open_interrupts)
        threads += len(pair.store)
        if read_all:
            for _ in pair.store.committed():
                pass
    return time.perf_counter() - started, threads


async def run(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    size = ctx.size
    n = size.restore_threads
    started = time.perf_counter()
    built = states(n, ctx.interrupt_share, ctx.seed + 3)
    names = Names(f"{ctx.namespace}-r", f"{ctx.namespace}-r", f"{ctx.namespace}-r-gw")
    gateway = Gateway(make_settings(names, ctx.bootstrap), Metrics(CollectorRegistry()))
    records = changelog_records(gateway, built, size.partitions)
    del built
    build_s = time.perf_counter() - started
    async with Admin(ctx.bootstrap) as admin:
        await admin.create({names.changelog: (size.partitions, changelog_configs())})
    started = time.perf_counter()
    await produce_transactional(ctx.bootstrap, names.changelog, records, per_transaction=1000)
    produce_s = time.perf_counter() - started
    ctx.log(f"restore: {n:,} threads encoded in {build_s:.1f} s, produced in {produce_s:.1f} s")

    baseline: list[float] = []
    restored: list[float] = []
    read_all: list[float] = []
    runs = []
    for rep in range(size.repeat):
        with service_collector():
            raw_s, seen = await raw_read(ctx.bootstrap, names.changelog, size.partitions)
        if seen != n:
            raise AssertionError(f"raw read saw {seen} of {n} changelog records")
        with service_collector():
            gw_s, threads = await gateway_restore(gateway, size.partitions)
        if threads != n:
            raise AssertionError(f"restore loaded {threads} of {n} threads")
        all_s, _ = await gateway_restore(gateway, size.partitions, read_all=True)
        baseline.append(n / raw_s)
        restored.append(n / gw_s)
        read_all.append(n / all_s)
        runs.append(
            {
                "raw_seconds": round(raw_s, 3),
                "gateway_seconds": round(gw_s, 3),
                "gateway_then_read_all_seconds": round(all_s, 3),
            }
        )
        ctx.log(
            f"restore rep {rep + 1}/{size.repeat}: raw read {raw_s:.2f} s, gateway {gw_s:.2f} s "
            f"(ratio {raw_s / gw_s:.3f})"
        )
    profile: dict[str, Any] | None = None
    if ctx.profile:  # an extra restore, not one of the measured ones
        prof = Profile("restore", ctx.out)
        prof.start()
        await gateway_restore(gateway, size.partitions)
        prof.stop()
        profile = prof.summary()
        ctx.log(f"restore: profile written to {prof.text_path}")
    how = f"best of {size.repeat}" if size.repeat > 1 else "single run"
    figures = [
        figure(
            "restore.ratio",
            f"Restore of {n:,} threads: raw read time ÷ gateway restore time",
            best(restored) / best(baseline),
            "ratio",
            f"{how} each, all partitions in turn",
            target=">= 0.9",
        ),
        figure(
            "restore.gateway_threads_per_s", "Restore, gateway", best(restored), "threads/s", how
        ),
        figure(
            "restore.baseline_records_per_s",
            "Changelog read, raw consumer",
            best(baseline),
            "records/s",
            how,
        ),
    ]
    detail = {
        "threads": n,
        "open_interrupt_share": ctx.interrupt_share,
        "changelog_value_bytes": sum(len(r[2] or b"") for r in records),
        "mean_value_bytes": round(sum(len(r[2] or b"") for r in records) / n, 1),
        "headers": sorted({k for r in records for k, _ in r[3]}),
        "runs": runs,
        "profile": profile,
    }
    return figures, detail
