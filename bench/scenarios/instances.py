"""Several instances as one (issue 27): three gateway processes on one group at a steady load.

Three `agui-gateway run` processes (instance names gw-0..2, warm standbys on:
`standby_replicas` 1) share one agent's pairs. A driver offers requests at a
steady rate: each on an idle thread, its interrupting run's events first, then
the resume answering it, the wait timed from the resume's send to its forward on
run-requests (`read_committed`). A thread is used again only once its request
was decided. Meanwhile:

1. one instance is killed with SIGKILL. Its pairs wait for the session timeout,
   then the survivors take them over from their standbys. Reported: the longest
   wait of a request on its pairs sent between the kill and the takeover (the
   time until they are decided again), and the longest wait on the other pairs
   in that time. It is then started again.
2. a rolling restart: each instance in turn gets SIGTERM, is started again, and
   is waited for (ready) before the next. Reported: the longest wait of any
   request sent meanwhile.
3. then: the pairs per instance (balance), each instance's standby gauges, and
   the standby memory, that of a replica of the whole changelog (read as a
   standby reads it, measured with tracemalloc in this process) per thread it
   holds (after the run).
4. a fourth instance added (gw-3). Reported: which pairs moved (the owner of
   each before and after), how many that is against the fewest a balanced
   assignment must move (`must_move`), the longest wait of a request sent from
   its start until the four hold every pair, on the pairs that moved and on
   those that did not, and the balance after.

Every request is checked to be forwarded exactly once: lost or duplicated ones
are reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import time
import tracemalloc
from collections import deque
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench.broker import Admin
from bench.config import Context
from bench.gatewayrun import SETTING_OVERRIDES, GatewayProcess, Names, create_topics, make_settings
from bench.report import Figure, figure
from bench.workload import partition_for
from gateway.kafka.assign.restore import Restorer

INSTANCES = 3
SETTLE_TIMEOUT_S = 120.0


class Driver:
    """Offers requests at a steady rate and times each to its forward."""

    def __init__(self, ctx: Context, names: Names, threads: int, partitions: int) -> None:
        self.ctx = ctx
        self.names = names
        self.partitions = partitions
        self.free: deque[str] = deque(f"th-{i}" for i in range(threads))
        self.turn: dict[str, int] = {}
        self.sent: dict[str, tuple[float, int, str]] = {}  # corr -> (sent at, partition, thread)
        self.forwarded: dict[str, list[float]] = {}
        self.rejected: dict[str, float] = {}
        self.skipped = 0  # ticks with no idle thread
        self.origin = time.monotonic()
        self._tasks: set[asyncio.Task[None]] = set()

    def now(self) -> float:
        return time.monotonic() - self.origin

    async def offer(self, rate: float, stop: asyncio.Event) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=self.ctx.bootstrap, linger_ms=0)
        await producer.start()
        try:
            tick = 1.0 / rate
            next_at = time.monotonic()
            while not stop.is_set():
                if self.free:
                    task = asyncio.create_task(self._one(producer, self.free.popleft()))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                else:
                    self.skipped += 1
                next_at += tick
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
        finally:
            await producer.stop()

    async def _one(self, producer: AIOKafkaProducer, thread: str) -> None:
        k = self.turn[thread] = self.turn.get(thread, 0) + 1
        run, interrupt, corr = f"{thread}-r{k}", f"{thread}-i{k}", f"{thread}:{k}"
        key = thread.encode()
        events = [
            {"type": "RUN_STARTED", "threadId": thread, "runId": run},
            {
                "type": "RUN_FINISHED",
                "threadId": thread,
                "runId": run,
                "outcome": {"type": "interrupt", "interrupts": [{"id": interrupt, "reason": "x"}]},
            },
        ]
        sends = [await producer.send(self.names.events, orjson.dumps(e), key=key) for e in events]
        await asyncio.gather(*sends)
        body = {
            "threadId": thread,
            "runId": f"{thread}-n{k}",
            "messages": [],
            "resume": [{"interruptId": interrupt, "status": "resolved", "payload": True}],
        }
        self.sent[corr] = (self.now(), partition_for(key, self.partitions), thread)
        await producer.send_and_wait(
            self.names.requests,
            orjson.dumps(body),
            key=key,
            headers=[("agui-correlation-id", corr.encode())],
        )

    async def tail(self, stop: asyncio.Event) -> None:
        """Forwards and rejections, as they commit."""
        reader = AIOKafkaConsumer(
            bootstrap_servers=self.ctx.bootstrap,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await reader.start()
        try:
            tps = [TopicPartition(self.names.run_requests, p) for p in range(self.partitions)]
            tps += [TopicPartition(self.names.rejections, p) for p in range(self.partitions)]
            reader.assign(tps)
            while not stop.is_set():
                batch = await reader.getmany(timeout_ms=100)
                at = self.now()
                for tp, records in batch.items():
                    for record in records:
                        corr = dict(record.headers).get("agui-correlation-id")
                        if corr is None:
                            continue
                        key = corr.decode()
                        if tp.topic == self.names.run_requests:
                            self.forwarded.setdefault(key, []).append(at)
                        else:
                            self.rejected[key] = at
                        sent = self.sent.get(key)
                        if sent is not None and len(self.forwarded.get(key, ())) <= 1:
                            self.free.append(sent[2])
        finally:
            await reader.stop()

    def waits(
        self, start: float, end: float, partitions: set[int] | None = None, inside: bool = True
    ) -> list[float]:
        """Waits (s) of the requests sent in [start, end) on `partitions` (or not on them);
        one not decided yet waits until now."""
        out = []
        now = self.now()
        for corr, (sent, partition, _) in self.sent.items():
            if not start <= sent < end:
                continue
            if partitions is not None and (partition in partitions) != inside:
                continue
            done = self.forwarded.get(corr, [self.rejected.get(corr, now)])[0]
            out.append(done - sent)
        return out


def assigned(gateway: GatewayProcess) -> list[int]:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{gateway.port}/readyz", timeout=5) as r:
        body = orjson.loads(r.read())
    return sorted(int(p.rsplit("/", 1)[1]) for p in body["assigned"])


async def settled(gateways: list[GatewayProcess], partitions: int) -> list[list[int]]:
    """Until every instance is ready and the pairs are all held, apart."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            await asyncio.gather(*(g.wait_ready(5) for g in gateways))
            held = [await asyncio.to_thread(assigned, g) for g in gateways]
            every = [p for h in held for p in h]
            if sorted(every) == list(range(partitions)):
                return held
        await asyncio.sleep(0.3)
    raise TimeoutError("the instances did not settle")


async def sample_standby_lag(
    gateways: list[GatewayProcess], stop: asyncio.Event, seen: list[tuple[float, float]], now: Any
) -> None:
    """Once a second: the largest `standby_lag_seconds` of the instances answering."""
    while not stop.is_set():
        values = []
        for g in list(gateways):
            with contextlib.suppress(Exception):
                metrics = await asyncio.to_thread(g.metrics)
                values.append(metrics.get("agui_gateway_standby_lag_seconds", 0.0))
        if values:
            seen.append((now(), max(values)))
        await asyncio.sleep(1.0)


def must_move(counts: list[int], members: int) -> int:
    """The fewest pairs that move when the instances holding `counts` pairs become
    `members` (counts within one of each other): each keeps up to its share, the
    larger shares going to those that hold most."""
    total = sum(counts)
    base, extra = divmod(total, members)
    kept = 0
    for rank, count in enumerate(sorted(counts, reverse=True)):
        kept += min(count, base + (1 if rank < extra else 0))
    return total - kept


def owners(held: list[list[int]]) -> dict[int, int]:
    """partition -> index of the instance holding it."""
    return {p: i for i, pairs in enumerate(held) for p in pairs}


async def standby_memory(ctx: Context, names: Names, partitions: int) -> tuple[float, int]:
    """Bytes a replica of the whole changelog holds, and its threads (tracemalloc)."""
    settings = make_settings(names, ctx.bootstrap)
    restorer = Restorer(settings)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        held = [await restorer.restore(names.changelog, p) for p in range(partitions)]
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return float(after - before), sum(len(r.store) for r in held)


async def run(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    size = ctx.size
    partitions, rate = size.instances_partitions, size.instances_rate
    session_ms = size.instances_session_timeout_ms
    names = Names(f"{ctx.namespace}-inst", f"{ctx.namespace}-insto", f"{ctx.namespace}-inst")
    overrides: dict[str, Any] = {"session_timeout_ms": session_ms, "standby_replicas": 1}
    # a setting given with --gateway-setting is measured instead of the scenario's own
    overrides.update({k: v for k, v in SETTING_OVERRIDES.items() if k in overrides})
    settings = make_settings(names, ctx.bootstrap, **overrides)
    async with Admin(ctx.bootstrap) as admin:
        await create_topics(admin, names, settings, partitions, inputs=True)

    def process(i: int, attempt: int) -> GatewayProcess:
        return GatewayProcess(
            names.settings(ctx.bootstrap, instance_name=f"gw-{i}", **overrides),
            ctx.work / f"instances-gw{i}-{attempt}.log",
        )

    gateways = [process(i, 0) for i in range(INSTANCES)]
    driver = Driver(ctx, names, size.instances_threads, partitions)
    stop_offer, stop_tail = asyncio.Event(), asyncio.Event()
    marks: dict[str, float] = {}
    lag_seen: list[tuple[float, float]] = []  # (time, largest standby_lag_seconds)
    sampler: asyncio.Task[None] | None = None
    try:
        for g in gateways:
            g.start()
        await settled(gateways, partitions)
        tail = asyncio.create_task(driver.tail(stop_tail))
        offer = asyncio.create_task(driver.offer(rate, stop_offer))
        sampler = asyncio.create_task(
            sample_standby_lag(gateways, stop_offer, lag_seen, driver.now)
        )
        marks["warm"] = driver.now()
        await asyncio.sleep(size.instances_warmup_seconds)

        # 1. kill -9 of one instance
        victim = gateways[0]
        lost = set(await asyncio.to_thread(assigned, victim))
        assert victim.proc is not None
        marks["kill"] = driver.now()
        os.kill(victim.proc.pid, signal.SIGKILL)
        await asyncio.to_thread(victim.proc.wait)
        held = await settled(gateways[1:], partitions)
        marks["taken_over"] = driver.now()
        ctx.log(
            f"instances: kill -9 of gw-0 (pairs {sorted(lost)}); survivors hold {held} "
            f"{marks['taken_over'] - marks['kill']:.1f} s later"
        )
        await asyncio.sleep(size.instances_settle_seconds)
        gateways[0] = process(0, 1)
        gateways[0].start()
        await settled(gateways, partitions)
        await asyncio.sleep(size.instances_settle_seconds)

        # 2. rolling restart
        marks["rolling"] = driver.now()
        for i in range(INSTANCES):
            await gateways[i].stop()
            gateways[i] = process(i, 2 + i)
            gateways[i].start()
            await settled(gateways, partitions)
        marks["rolled"] = driver.now()
        await asyncio.sleep(size.instances_settle_seconds)
        held_before = await settled(gateways, partitions)
        balance = [len(h) for h in held_before]
        scraped = [await asyncio.to_thread(g.metrics) for g in gateways]
        standby_threads = [m.get("agui_gateway_standby_threads", 0.0) for m in scraped]
        standby_lag_s = [m.get("agui_gateway_standby_lag_seconds", 0.0) for m in scraped]
        standby_lag_records = [m.get("agui_gateway_standby_lag_records", 0.0) for m in scraped]

        # 4. a fourth instance added
        marks["add"] = driver.now()
        gateways.append(process(INSTANCES, 0))
        gateways[-1].start()
        await settled(gateways, partitions)
        marks["added"] = driver.now()
        await asyncio.sleep(size.instances_settle_seconds)
        held_after = await settled(gateways, partitions)
        before_of, after_of = owners(held_before), owners(held_after)
        moved = {p for p in range(partitions) if before_of.get(p) != after_of.get(p)}
        must = must_move(balance, len(gateways))
        ctx.log(
            f"instances: gw-{INSTANCES} added; {held_before} -> {held_after} "
            f"{marks['added'] - marks['add']:.1f} s later; moved {sorted(moved)} (must: {must})"
        )
        stop_offer.set()
        await offer
        await sampler
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(
            c not in driver.forwarded and c not in driver.rejected for c in driver.sent
        ):
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)  # duplicates would show by now
        stop_tail.set()
        await tail
    finally:
        stop_offer.set()
        stop_tail.set()
        if sampler is not None:
            sampler.cancel()
        for g in gateways:
            await g.stop()

    memory, replica_threads = await standby_memory(ctx, names, partitions)
    kill_on = driver.waits(marks["kill"], marks["taken_over"], lost, inside=True)
    kill_off = driver.waits(marks["kill"], marks["taken_over"], lost, inside=False)
    rolling = driver.waits(marks["rolling"], marks["rolled"])
    add_moved = driver.waits(marks["add"], marks["added"], moved, inside=True)
    add_stayed = driver.waits(marks["add"], marks["added"], moved, inside=False)
    balance_added = [len(h) for h in held_after]
    steady_lag = [
        v
        for t, v in lag_seen
        if marks["warm"] <= t < marks["kill"] or marks["rolled"] <= t < marks["add"]
    ]
    lost_requests = [
        c for c in driver.sent if c not in driver.forwarded and c not in driver.rejected
    ]
    twice = [c for c, at in driver.forwarded.items() if len(at) > 1]
    how = (
        f"{INSTANCES} processes, {partitions} pairs, {rate:g} requests/s offered, "
        f"session_timeout_ms={session_ms}, "
        f"heartbeat_interval_ms={settings.heartbeat_interval_ms}, standby_replicas=1"
    )
    how_added = f"{INSTANCES} -> {INSTANCES + 1} processes, " + how.split(", ", 1)[1]
    figures = [
        figure(
            "instances.kill_takeover_s",
            "kill -9 of one instance: longest wait of a request on its pairs (until decided again)",
            max(kill_on, default=0.0),
            "s",
            how,
            target=f"<= {session_ms / 1000 + 1:g}",
        ),
        figure(
            "instances.kill_others_max_wait_s",
            "kill -9 of one instance: longest wait of a request on the other instances' pairs",
            max(kill_off, default=0.0),
            "s",
            how,
            target="<= 1",
        ),
        figure(
            "instances.rolling_max_wait_s",
            "rolling restart (SIGTERM, start, ready, one after another): longest wait",
            max(rolling, default=0.0),
            "s",
            how,
            target="<= 2",
        ),
        figure(
            "instances.balance",
            "pairs per instance after the rolling restart: max - min",
            max(balance) - min(balance),
            "pairs",
            how,
            target="<= 1",
        ),
        figure(
            "instances.add_others_max_wait_s",
            "instance added: longest wait of a request on the pairs that did not move",
            max(add_stayed, default=0.0),
            "s",
            how_added,
            target="<= 1",
        ),
        figure(
            "instances.add_moved_max_wait_s",
            "instance added: longest wait of a request on the pairs that moved to it",
            max(add_moved, default=0.0),
            "s",
            how_added,
        ),
        figure(
            "instances.add_moved_pairs",
            f"instance added: pairs that moved (a balanced assignment must move {must})",
            len(moved),
            "pairs",
            how_added,
            target=f"<= {must}",
        ),
        figure(
            "instances.add_balance",
            "instance added: pairs per instance after, max - min",
            max(balance_added) - min(balance_added),
            "pairs",
            how_added,
            target="<= 1",
        ),
        figure(
            "instances.standby_bytes_per_thread",
            "standby memory: a replica of the changelog, per thread it holds",
            memory / max(1, replica_threads),
            "B",
            f"{replica_threads} threads, tracemalloc",
        ),
        figure(
            "instances.not_exactly_once",
            "requests lost or forwarded twice",
            len(lost_requests) + len(twice),
            "requests",
            how,
            target="<= 0",
        ),
    ]
    detail = {
        "instances": INSTANCES,
        "partitions": partitions,
        "offered_rate": rate,
        "threads": size.instances_threads,
        "session_timeout_ms": session_ms,
        "requests_sent": len(driver.sent),
        "requests_rejected": len(driver.rejected),
        "ticks_without_idle_thread": driver.skipped,
        "marks_s": {k: round(v, 2) for k, v in marks.items()},
        "killed_pairs": sorted(lost),
        "kill_requests_on_its_pairs": len(kill_on),
        "kill_requests_elsewhere": len(kill_off),
        "rolling_requests": len(rolling),
        "pairs_per_instance": balance,
        "standby_threads_per_instance": standby_threads,
        "standby_lag_seconds_per_instance": standby_lag_s,
        "standby_lag_seconds_max_steady": max(steady_lag, default=0.0),
        "standby_lag_seconds_max_any": max((v for _, v in lag_seen), default=0.0),
        "standby_lag_samples": len(lag_seen),
        "standby_lag_records_per_instance": standby_lag_records,
        "added_pairs_before": held_before,
        "added_pairs_after": held_after,
        "added_moved_pairs": sorted(moved),
        "added_must_move": must,
        "added_settled_s": round(marks["added"] - marks["add"], 2),
        "added_requests_on_moved_pairs": len(add_moved),
        "added_requests_elsewhere": len(add_stayed),
        "replica_bytes": memory,
        "replica_threads": replica_threads,
        "lost": lost_requests[:20],
        "forwarded_twice": twice[:20],
    }
    ctx.log(
        f"instances: kill -9 wait on its pairs {max(kill_on, default=0):.2f} s, elsewhere "
        f"{max(kill_off, default=0):.2f} s; rolling restart {max(rolling, default=0):.2f} s; "
        f"balance {balance}; instance added: {len(moved)} pairs moved (must {must}), "
        f"wait on them {max(add_moved, default=0):.2f} s, elsewhere "
        f"{max(add_stayed, default=0):.2f} s, balance {balance_added}; "
        f"standby {memory / max(1, replica_threads):.0f} B/thread; "
        f"lost {len(lost_requests)}, twice {len(twice)}"
    )
    return figures, detail
