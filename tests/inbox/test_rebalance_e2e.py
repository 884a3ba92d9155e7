"""The read model against the gateway's own state, on the real broker, across rebalances.

Two `agui-gateway run` processes share a group's partitions (one consumer group), and
an `agui-gateway inbox` process reads the interrupts topic. A seeded random run sends
agents' events for many threads (runs ending with several interrupts, some expiring
soon, runs ending normally or failing, superseding runs) and requests (resumes that
answer or abandon, resumes that leave an interrupt uncovered, resumes to expired
interrupts), in rounds; in the middle one gateway is killed with kill -9 (its pairs
move to the other), started again, and the other restarted gracefully. After each
round, once the traffic is decided, and at the end, once retention has nothing left
to forget, the open interrupts the inbox lists (GET /interrupts paged with its cursor;
at the end GET /threads per thread too) are exactly those the gateway holds, with
their run, reason, expiry and opening time: its committed changelog restored into
thread stores with the gateway's own restore code, each thread's open interrupts read
as the pair reads them (`interrupts.open_interrupts`).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from gateway.codec import interrupts as records
from gateway.codec.changelog import split_group_key
from gateway.core.reading import expiry
from gateway.core.values.thread import ThreadState
from gateway.kafka.assign.restore import Restorer
from gateway.kafka.pairs.agents import layout_for
from tests.inbox.support import check
from tests.inbox.test_inbox_e2e import AUTH, InboxProcess, poll
from tests.integration.inprocess import settings_for
from tests.integration.support import GatewayProcess, Namespace, Tail, header
from tests.integration.test_groups_e2e import GROUP, GROUPS, agent_header, create_group
from tests.integration.test_instances import held, settled

pytestmark = pytest.mark.integration

PARTITIONS = 4
PAIRS = {f"{GROUP}/{p}" for p in range(PARTITIONS)}
AGENTS = ["alpha", "beta", "w-7"]
THREADS = [f"t{n:02d}" for n in range(10)]
ROUNDS = 6
# the random run's seeds (one test each): INBOX_REBALANCE_SEEDS=3,4,5 runs others
SEEDS = [int(s) for s in os.environ.get("INBOX_REBALANCE_SEEDS", "1").split(",")]
EXPIRES_IN_S = 1.5  # an expiring interrupt's expiresAt, from when it is raised
# the gateways' retention: a thread whose interrupts all expire is forgotten a few
# seconds after (its interrupts close `expired`); the others are kept
RETENTION = {"thread_retention_s": "3", "interrupt_grace_s": "1", "sweep_interval_s": "1"}
# agent, thread, interrupt id, run, reason, expiresAt (ms), opened at (ms)
Item = tuple[str, str, str, str | None, str | None, int | None, int]


@pytest.fixture
async def ns(kafka_bootstrap: str) -> Namespace:
    return Namespace(kafka_bootstrap)


# --- the random run -----------------------------------------------------------------------


@dataclass
class Thread:
    """What the publishers believe of a thread (the gateway decides; this only steers)."""

    agent: str
    name: str
    runs: int = 0
    raised: dict[str, float | None] = field(default_factory=dict)  # open id -> expires at
    answered: bool = False  # a resume was sent that covers every open interrupt
    tried: bool = False  # an expired interrupt was answered (rejected); abandon it next
    left: bool = False  # every interrupt expires: left for retention to forget


def iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Run:
    """The seeded random traffic, round by round."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.threads = [Thread(a, t) for a in AGENTS for t in THREADS]
        self.sent: list[str] = []  # correlation ids of the requests sent

    def _run(self, th: Thread) -> list[dict[str, Any]]:
        """A new run of `th`: started, and mostly finished one way or another."""
        th.runs += 1
        run = f"r{th.runs}"
        out: list[dict[str, Any]] = [{"type": "RUN_STARTED", "threadId": th.name, "runId": run}]
        th.raised, th.answered, th.tried = {}, False, False
        how = self.rng.choices(["interrupt", "success", "error", "active"], [6, 2, 1, 1])[0]
        if how == "success":
            out.append({"type": "RUN_FINISHED", "threadId": th.name, "runId": run})
        elif how == "error":
            out.append({"type": "RUN_ERROR", "message": "boom"})
        elif how == "interrupt":
            ids = self.rng.sample(["a", "b", "c", "d"], self.rng.randint(1, 3))
            expiry = self.rng.choices(["none", "mixed", "all"], [6, 3, 1])[0]
            at = time.time() + EXPIRES_IN_S
            th.raised = {
                i: at if expiry == "all" or (expiry == "mixed" and n == 0) else None
                for n, i in enumerate(ids)
            }
            th.left = expiry == "all"
            interrupts = []
            for i, expires in th.raised.items():
                one: dict[str, Any] = {"id": i, "reason": self.rng.choice(["tool_call", "ask"])}
                if expires is not None:
                    one["expiresAt"] = iso(expires)
                interrupts.append(one)
            out.append(
                {
                    "type": "RUN_FINISHED",
                    "threadId": th.name,
                    "runId": run,
                    "outcome": {"type": "interrupt", "interrupts": interrupts},
                }
            )
        return out

    def events(self) -> list[tuple[Thread, dict[str, Any]]]:
        out: list[tuple[Thread, dict[str, Any]]] = []
        for th in self.threads:
            if th.left:
                continue
            if th.answered or (not th.raised and self.rng.random() < 0.8):
                out += [(th, e) for e in self._run(th)]  # a continuation, or a new run
            elif th.raised and not self.expiring(th) and self.rng.random() < 0.4:
                out += [(th, e) for e in self._run(th)]  # supersedes the open interrupts
        return out

    @staticmethod
    def expiring(th: Thread) -> bool:
        return any(at is not None for at in th.raised.values())

    def requests(self) -> list[tuple[Thread, str, dict[str, Any]]]:
        out: list[tuple[Thread, str, dict[str, Any]]] = []
        now = time.time()
        for th in self.threads:
            if th.left or th.answered:
                continue
            ids = list(th.raised)
            expired = [i for i, at in th.raised.items() if at is not None and at < now - 0.3]
            r = self.rng.random()
            resume: list[dict[str, Any]] = []
            if self.expiring(th) and not expired:
                continue  # one of them expires soon: answered once it has
            if expired and r < 0.8:  # answering an expired one is rejected; abandoning not
                resume = [
                    entry(i, "cancelled" if i in expired and th.tried else "resolved") for i in ids
                ]
                th.answered, th.tried = th.tried, True
            elif ids and not expired and r < 0.45:  # answers every one: forwarded
                resume = [entry(i, self.rng.choice(["resolved", "cancelled"])) for i in ids]
                th.answered = True
            elif ids and r < 0.7:  # leaves one uncovered (naming one nobody raised)
                resume = [entry(i, "resolved") for i in ids[:-1]] + [entry("zz", "resolved")]
            elif not ids and r < 0.1:  # a resume where nothing is open
                resume = [entry("a", "resolved")]
            if not resume:
                continue
            correlation = f"{th.agent}/{th.name}/{len(self.sent)}"
            self.sent.append(correlation)
            body = {
                "threadId": th.name,
                "runId": f"q{len(self.sent)}",
                "messages": [],
                "resume": resume,
            }
            out.append((th, correlation, body))
        return out


def entry(interrupt: str, status: str) -> dict[str, Any]:
    e: dict[str, Any] = {"interruptId": interrupt, "status": status}
    if status == "resolved":
        e["payload"] = True
    return e


# --- the broker side ------------------------------------------------------------------------


class Broker:
    """One producer for the run's records, one reader for offsets."""

    def __init__(self, ns: Namespace, admin: Any) -> None:
        self.ns = ns
        self.admin = admin

    async def __aenter__(self) -> Broker:
        self.producer = AIOKafkaProducer(
            bootstrap_servers=self.ns.bootstrap, acks="all", enable_idempotence=True
        )
        self.reader = AIOKafkaConsumer(bootstrap_servers=self.ns.bootstrap)
        await self.producer.start()
        await self.reader.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.producer.stop()
        await self.reader.stop()

    async def send_events(self, events: list[tuple[Thread, dict[str, Any]]]) -> None:
        sent = [
            await self.producer.send(
                self.ns.events(GROUP),
                orjson.dumps(e),
                key=th.name.encode(),
                headers=agent_header(th.agent),
            )
            for th, e in events
        ]
        await asyncio.gather(*sent)

    async def send_requests(self, requests: list[tuple[Thread, str, dict[str, Any]]]) -> None:
        sent = [
            await self.producer.send(
                self.ns.requests(GROUP),
                orjson.dumps(body),
                key=th.name.encode(),
                headers=[*agent_header(th.agent), ("agui-correlation-id", c.encode())],
            )
            for th, c, body in requests
        ]
        await asyncio.gather(*sent)

    async def partitions(self, topic: str) -> list[TopicPartition]:
        await self.reader._client.force_metadata_update()
        found = self.reader.partitions_for_topic(topic)
        assert found, f"topic {topic} not found"
        return [TopicPartition(topic, p) for p in sorted(found)]

    async def decided(self, timeout: float = 90) -> None:
        """Until the gateway's group has committed every record sent (its transactions
        commit their input offsets with their output: then all is decided)."""
        tps = [
            tp
            for topic in (self.ns.events(GROUP), self.ns.requests(GROUP))
            for tp in await self.partitions(topic)
        ]
        deadline = time.monotonic() + timeout
        while True:
            ends = await self.reader.end_offsets(tps)
            done = await self.admin.list_consumer_group_offsets(self.ns.group)
            behind = {
                f"{tp.topic}[{tp.partition}]": (done[tp].offset if tp in done else 0, ends[tp])
                for tp in tps
                if (done[tp].offset if tp in done else 0) < ends[tp]
            }
            if not behind:
                return
            assert time.monotonic() < deadline, f"not decided in {timeout} s: {behind}"
            await asyncio.sleep(0.2)

    async def everything(self, topic: str) -> list[Any]:
        """Every committed record of `topic`, read to its end."""
        async with Tail(self.ns.bootstrap, await self.partitions(topic)) as tail:
            await tail.caught_up(60)
            return list(tail.records)


async def gateway_states(ns: Namespace) -> dict[tuple[str, str], ThreadState]:
    """The thread states the gateway holds, by (agent, threadId): every partition of the
    group's changelog restored (read_committed) into a thread store by the gateway's own
    restore, as a pair taking the partition over would build it."""
    settings = settings_for(ns, groups=json.loads(GROUPS))
    thread_of = layout_for(GROUP, settings).thread_of
    restorer = Restorer(settings)
    states: dict[tuple[str, str], ThreadState] = {}
    for partition in range(PARTITIONS):
        restored = await restorer.restore(ns.changelog(GROUP), partition, thread_of)
        for key in restored.store.ids():
            state, named = restored.store.get(key), split_group_key(key)
            assert state is not None and named is not None, f"unreadable changelog key {key!r}"
            states[named] = state
    return states


def held_items(states: dict[tuple[str, str], ThreadState]) -> set[Item]:
    """Every open interrupt the states hold, read as the pair reads them
    (`interrupts.open_interrupts`): its thread, id, the run that raised it, its reason,
    expiry and when it opened."""
    return {
        (
            agent,
            thread,
            interrupt,
            state.interrupts_run_id,
            record.reason,
            None if record.expires_at is None else expiry.expires_at_ms(record.expires_at),
            state.interrupts_closed_at_ms or state.closed_at_ms or state.updated_ms,
        )
        for (agent, thread), state in states.items()
        for interrupt, record in records.open_interrupts(state).items()
    }


def item(listed: dict[str, Any]) -> Item:
    """The same of an interrupt the inbox lists."""
    return (
        listed["agent"],
        listed["thread"],
        listed["interrupt"],
        listed["run"],
        listed["reason"],
        listed["expiresAtMs"],
        listed["openedAtMs"],
    )


def forgettable(states: dict[tuple[str, str], ThreadState]) -> list[tuple[str, str]]:
    """Threads with open interrupts that all have an expiresAt: retention forgets them
    soon after (closing them `expired`); every other open interrupt stays."""
    return [
        named
        for named, state in states.items()
        if records.open_interrupts(state) and all(i.expires_at for i in state.interrupts)
    ]


async def inbox_open(base: str) -> tuple[set[Item], int]:
    """Every open interrupt GET /interrupts lists, paged with its cursor (and the pages)."""
    found: list[Item] = []
    pages = 0
    cursor: str | None = None
    async with httpx.AsyncClient(timeout=10) as client:
        while True:
            params = {"limit": "7"} | ({"cursor": cursor} if cursor else {})
            answer = await client.get(f"{base}/interrupts", params=params, headers=AUTH)
            assert answer.status_code == 200, answer.text
            body = answer.json()
            check("interrupts", body)
            pages += 1
            found += [item(i) for i in body["items"]]
            cursor = body["next"]
            if cursor is None:
                break
    assert len(found) == len(set(found)), "an interrupt listed twice across pages"
    return set(found), pages


async def inbox_thread(base: str, agent: str, thread: str) -> set[Item]:
    async with httpx.AsyncClient(timeout=10) as client:
        answer = await client.get(f"{base}/threads/{agent}/{thread}", headers=AUTH)
    if answer.status_code == 404:
        return set()
    assert answer.status_code == 200, answer.text
    body = answer.json()
    check("thread", body)
    assert (body["agent"], body["thread"]) == (agent, thread)
    return {item(i) for i in body["open"]}


async def inbox_runs(base: str, agent: str, thread: str) -> dict[str, str]:
    """The runs GET /threads/... shows for a thread, each with how it closed."""
    async with httpx.AsyncClient(timeout=10) as client:
        answer = await client.get(f"{base}/threads/{agent}/{thread}", headers=AUTH)
    assert answer.status_code == 200, answer.text
    return {run["run"]: run["status"] for run in answer.json()["runs"]}


async def agree(
    ns: Namespace, base: str, timeout: float = 30
) -> tuple[set[Item], tuple[set[Item], int]]:
    """Until the inbox lists exactly the open interrupts the gateway holds (the inbox
    reads the interrupts topic behind the gateway's commits, and retention may still
    forget a thread meanwhile, so both are read again until they agree); the gateway's,
    and the inbox's with the pages it took. Failing, it names the difference."""
    await poll(f"{base}/interrupts", lambda body: body["lagSeconds"] == 0)
    deadline = time.monotonic() + timeout
    while True:
        expected = held_items(await gateway_states(ns))
        listed = await inbox_open(base)
        if listed[0] == expected:
            return expected, listed
        if time.monotonic() > deadline:
            missing, extra = expected - listed[0], listed[0] - expected
            raise AssertionError(
                f"the inbox differs from the gateway's state: held, not listed "
                f"{sorted(missing, key=str)}; listed, not held {sorted(extra, key=str)}"
            )
        await asyncio.sleep(0.3)


async def holding(gateway: GatewayProcess, pairs: set[str], timeout: float = 60) -> None:
    """Until `gateway` is ready holding exactly `pairs`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        status, body = await asyncio.to_thread(gateway.http, "/readyz")
        last = (status, body[:300])
        if status == 200 and set(orjson.loads(body)["assigned"]) == pairs:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{gateway.log_path.stem} never held {sorted(pairs)}: {last}")


# --- the test ---------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
async def test_the_inbox_lists_what_the_gateway_holds_across_kill_9_and_restarts(
    ns: Namespace, kafka_admin, tmp_path, seed: int
) -> None:
    await create_group(ns, partitions=PARTITIONS)
    common = {"groups": GROUPS, **RETENTION}
    a = GatewayProcess(ns, tmp_path, "a", **common)
    b = GatewayProcess(ns, tmp_path, "b", **common)
    a_again = GatewayProcess(ns, tmp_path, "a-again", **common)
    b_again = GatewayProcess(ns, tmp_path, "b-again", **common)
    inbox = InboxProcess(ns, tmp_path)
    run = Run(seed)
    try:
        await asyncio.gather(a.start(), b.start(), inbox.start())
        await settled(a, b, pairs=PARTITIONS)
        base = f"http://127.0.0.1:{inbox.port}"
        async with Broker(ns, kafka_admin) as broker:
            for n in range(ROUNDS):
                await broker.send_events(run.events())
                if n == 2:  # kill -9 mid-round: its pairs move to b at the session timeout
                    lost = held(a)
                    assert lost and held(b) == PAIRS - lost
                    assert await a.stop(signal.SIGKILL) == -signal.SIGKILL
                    await broker.send_requests(run.requests())
                    await holding(b, PAIRS)  # the rebalance: b's assignment grew to all
                    await broker.decided()
                    await agree(ns, base)
                    continue
                if n == 3:  # a comes back: another rebalance shares them again
                    await a_again.start()
                    await settled(a_again, b, pairs=PARTITIONS)
                if n == 4:  # b restarts gracefully: a takes all, then they share again
                    assert await b.stop(signal.SIGTERM) == 0, b.log_tail()
                    await holding(a_again, PAIRS)
                    await b_again.start()
                    await settled(a_again, b_again, pairs=PARTITIONS)
                await broker.decided()
                await broker.send_requests(run.requests())
                await broker.decided()
                await agree(ns, base)  # after each round too, not only at the end

            # retention forgets the threads whose interrupts all expired; then nothing
            # the gateway holds will change by itself
            deadline = time.monotonic() + 30
            while waiting := forgettable(await gateway_states(ns)):
                assert time.monotonic() < deadline, f"retention never forgot {waiting}"
                await asyncio.sleep(0.5)
            await broker.decided()
            expected, listed = await agree(ns, base)
            listed_open, pages = listed
            assert pages > 1, "the listing should take several pages"
            for th in run.threads:
                mine = {i for i in expected if i[:2] == (th.agent, th.name)}
                assert await inbox_thread(base, th.agent, th.name) == mine, (th.agent, th.name)

            # not vacuous: interrupts open, closes of every kind, the verdicts of each sort
            assert len(listed_open) >= 5, listed_open
            everything = await broker.everything(ns.interrupts)
            written = [r for r in everything if records.parse_key(r.key)[2] is not None]
            ran = [r for r in everything if records.parse_key(r.key)[2] is None]
            statuses = Counter(records.RunClosed.from_json(r.value).status for r in ran if r.value)
            assert {"interrupted", "succeeded", "failed"} <= set(statuses), statuses
            # how each thread's latest run closed, as the gateway holds it, in the inbox
            states = await gateway_states(ns)
            for (agent, thread), state in states.items():
                if state.run_id is None or not state.is_closed:
                    continue
                runs = await inbox_runs(base, agent, thread)
                assert runs.get(state.run_id) == str(state.status), (agent, thread, runs)
            closes = Counter(header(r, records.HEADER_CLOSED) for r in written if r.value is None)
            assert set(closes) == set(records.CLOSE_STATUSES), closes
            assert sum(1 for r in written if r.value is not None) == sum(closes.values()) + len(
                listed_open
            ), "every interrupt opened once is open or closed once"
            rejections = [orjson.loads(r.value) for r in await broker.everything(ns.rejections)]
            codes = Counter(reason["code"] for r in rejections for reason in r["reasons"])
            assert codes["uncovered_interrupt"] and codes["expired_interrupt"], codes
            warnings = [orjson.loads(r.value) for r in await broker.everything(ns.warnings)]
            assert any(w["code"] == "interrupt_expired" for w in warnings)
            forwards = await broker.everything(ns.run_requests(GROUP))
            decided = Counter(header(r, "agui-correlation-id") for r in forwards)
            decided.update(r["correlationId"] for r in rejections)
            assert decided == Counter(run.sent), "each request decided exactly once"
    finally:
        for process in (a, b, a_again, b_again):
            await process.stop()
        await inbox.stop()
