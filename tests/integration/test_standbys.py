"""Warm standbys on the real broker: three `agui-gateway run` processes, one killed with kill -9.

Three instances share a group's six pairs, two each, and each keeps warm standbys
of two other pairs (`standby_replicas` = 1). Threads wait on interrupts in every
partition, half of them are answered, and the standbys catch up. Then one instance
is killed with SIGKILL: at the session timeout its two pairs go to the two
survivors that kept them warm, whose restores read only the changelog past their
replicas (no restore from the beginning anywhere), and the answers sent after the
death are decided. Every request is forwarded exactly once (read back with
`read_committed`).
"""

from __future__ import annotations

import asyncio
import signal

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.integration.support import GatewayProcess, Namespace, collect, header, produce
from tests.integration.test_groups_e2e import (
    GROUP,
    GROUPS,
    agent_header,
    create_group,
    interrupted,
    resume,
    started,
)

PARTITIONS = 6
THREADS = [f"t{i}" for i in range(24)]
FIRST, SECOND = THREADS[:12], THREADS[12:]


@pytest.fixture
async def ns(kafka_bootstrap: str) -> Namespace:
    return Namespace(kafka_bootstrap)


def metric(gateway: GatewayProcess, sample: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in gateway.metrics().splitlines()
        if line.startswith(sample)
    )


async def spread(gateways: list[GatewayProcess], timeout: float = 60) -> dict[str, set[str]]:
    """Until every instance is ready, the pairs held apart and evenly, and each keeps
    as many standbys as it holds pairs (one standby per pair)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last = None
    while loop.time() < deadline:
        answers = [await asyncio.to_thread(g.http, "/readyz") for g in gateways]
        if all(status == 200 for status, _ in answers):
            held = {
                g.log_path.stem: set(orjson.loads(body)["assigned"])
                for g, (_, body) in zip(gateways, answers, strict=True)
            }
            every = [p for pairs in held.values() for p in pairs]
            warm = [metric(g, "agui_gateway_standby_pairs_held") for g in gateways]
            last = (held, warm)
            if (
                len(every) == len(set(every)) == PARTITIONS
                and max(map(len, held.values())) - min(map(len, held.values())) <= 1
                and warm == [len(held[g.log_path.stem]) for g in gateways]
            ):
                return held
        await asyncio.sleep(0.3)
    tails = "\n".join(g.log_tail(15) for g in gateways)
    raise AssertionError(f"the instances did not settle: {last}\n{tails}")


async def caught_up(gateways: list[GatewayProcess], threads: int, timeout: float = 60) -> None:
    """Until the standbys hold every thread once and are behind by nothing, in records
    and in seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    seen = None
    while loop.time() < deadline:
        seen = [
            (
                metric(g, "agui_gateway_standby_threads"),
                metric(g, "agui_gateway_standby_lag_records"),
                metric(g, "agui_gateway_standby_lag_seconds"),
            )
            for g in gateways
        ]
        if sum(t for t, _, _ in seen) == threads and not any(
            lag or seconds for _, lag, seconds in seen
        ):
            return
        await asyncio.sleep(0.3)
    raise AssertionError(f"standbys not caught up: {seen}")


def takeovers(gateway: GatewayProcess) -> dict[str, dict]:
    """The pairs this instance restored, by `group/partition`, with what each read."""
    found = {}
    for line in gateway.log_path.read_text().splitlines():
        if '"msg":"pair ready"' in line:
            record = orjson.loads(line)
            if record.get("restored"):
                found[f"{record['agent']}/{record['partition']}"] = record
    return found


async def changelog_records(bootstrap: str, topic: str) -> dict[int, int]:
    """Committed records in each partition of a changelog."""
    reader = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await reader.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        reader.assign(tps)
        ends = await reader.end_offsets(tps)
        counts = dict.fromkeys(range(PARTITIONS), 0)
        while any([await reader.position(tp) < ends[tp] for tp in tps]):
            for tp, records in (await reader.getmany(timeout_ms=500)).items():
                counts[tp.partition] += len(records)
        return counts
    finally:
        await reader.stop()


async def answer(ns: Namespace, threads: list[str]) -> None:
    """A resume for each thread, correlation id `c-<thread>`."""
    producer = AIOKafkaProducer(bootstrap_servers=ns.bootstrap, acks="all")
    await producer.start()
    try:
        for t in threads:
            await producer.send_and_wait(
                ns.requests(GROUP),
                orjson.dumps(resume(t, "r1", f"i-{t}")),
                key=t.encode(),
                headers=[*agent_header("alpha"), ("agui-correlation-id", f"c-{t}".encode())],
            )
    finally:
        await producer.stop()


async def test_a_pair_taken_over_after_kill_9_restores_from_its_standby(
    ns: Namespace, tmp_path
) -> None:
    await create_group(ns, partitions=PARTITIONS)
    common = {
        "groups": GROUPS,
        "session_timeout_ms": "6000",
        "heartbeat_interval_ms": "1000",
        "standby_replicas": "1",
    }
    gateways = [GatewayProcess(ns, tmp_path, name, **common) for name in ("a", "b", "c")]
    try:
        for gateway in gateways:
            await gateway.start()
        await spread(gateways)
        await produce(
            ns.bootstrap,
            ns.events(GROUP),
            [(t, r) for t in THREADS for r in (started(t, "r1"), interrupted(t, "r1", f"i-{t}"))],
            agent_header("alpha"),
        )
        await answer(ns, FIRST)
        await collect(ns.bootstrap, ns.run_requests(GROUP), count=len(FIRST), timeout=60)
        await caught_up(gateways, threads=len(THREADS))

        victim, survivors = gateways[0], gateways[1:]
        lost = (await spread(gateways))["a"]
        assert lost and all(metric(g, "agui_gateway_standby_threads") for g in gateways)
        assert await victim.stop(signal.SIGKILL) == -signal.SIGKILL
        await answer(ns, SECOND)  # answers on the dead instance's pairs wait for the takeover

        held = await spread(survivors, timeout=90)
        assert set().union(*held.values()) == {f"{GROUP}/{p}" for p in range(PARTITIONS)}
        forwards = await collect(
            ns.bootstrap, ns.run_requests(GROUP), count=len(THREADS), timeout=60, settle=2.0
        )
        assert sorted(header(r, "agui-correlation-id") for r in forwards) == sorted(
            f"c-{t}" for t in THREADS
        ), "each request forwarded exactly once"

        # the dead instance's pairs were restored from the survivors' standbys, only
        # the changelog's tail read; no survivor read a changelog from its beginning
        taken = {pair: r for g in survivors for pair, r in takeovers(g).items() if pair in lost}
        assert set(taken) == lost, (taken, lost)
        records = await changelog_records(ns.bootstrap, ns.changelog(GROUP))
        for pair, record in taken.items():
            partition = int(pair.rsplit("/", 1)[1])
            assert record["standby_records"] is not None, record  # a replica was handed over
            assert record["restored_records"] <= record["standby_records"], record
            assert record["restored_records"] < max(records[partition], 1), (record, records)
        assert sum(r["standby_records"] for r in taken.values()) > 0
        for gateway in survivors:
            assert (
                metric(gateway, 'agui_gateway_state_restore_records_total{start="beginning"}') == 0
            )
    finally:
        for gateway in gateways:
            await gateway.stop()
