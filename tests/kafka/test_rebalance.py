"""A rebalance that hands the same pairs back: what it asks of Kafka, and what it keeps.

With the fake Kafka clients of test_runner: the committed offsets of the pairs
come from one request, read once their producers started (fencing any
zombie); commits on revoke run together; the agents' changelog checks are one
look-up; an empty changelog partition is not read.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from aiokafka import TopicPartition

import gateway.kafka.assign.prepare as prepare_module
import gateway.kafka.wire.clients as clients
from gateway.kafka.assign.prepare import Preparer
from gateway.kafka.assign.restore import Restored, Restorer
from gateway.kafka.exactly_once import groupoffsets
from gateway.kafka.wire.topics import TopicNames
from gateway.settings import Settings
from gateway.state.store import ThreadStore
from tests.kafka.test_runner import (
    assign,
    decided_round,
    forwards,
    gw,
    producer,
    tps,
    transactions,
)

__all__ = ["gw"]  # the fixture, used by name


def recording_fetches(gw: Any, monkeypatch: Any) -> list[tuple[list[TopicPartition], int]]:
    """Every committed-offsets read: its partitions, and how many producers existed then."""
    fetches: list[tuple[list[TopicPartition], int]] = []
    fake = groupoffsets.fetch_committed_offsets

    async def fetch(consumer, partitions, *, timeout_s):
        fetches.append((sorted(partitions), len(gw.producers.made)))
        return await fake(consumer, partitions, timeout_s=timeout_s)

    monkeypatch.setattr(groupoffsets, "fetch_committed_offsets", fetch)
    return fetches


async def test_the_pairs_handed_back_read_their_offsets_in_one_request_and_restore_nothing(
    gw, monkeypatch
):
    partitions = [*tps("alpha", 0), *tps("alpha", 1), *tps("beta", 0)]
    await assign(gw, *partitions)
    restored = list(gw.restored)
    made = list(gw.producers.made)
    fetches = recording_fetches(gw, monkeypatch)
    await gw.assignment.revoke(set(partitions))
    await assign(gw, *partitions)
    assert fetches == [(sorted(partitions), len(made))]  # one read, for all three
    assert gw.restored == restored  # their memory matches the commit
    assert gw.producers.made == made  # and their producers are kept
    assert all(s.ready for s in gw.assignment.slots.values())
    assert gw.consumer.paused == set()


async def test_a_pair_taken_in_with_others_is_read_in_the_batch_after_its_producer_started(
    gw, monkeypatch
):
    kept = [*tps("alpha", 0), *tps("alpha", 1)]
    new = list(tps("beta", 0))
    await assign(gw, *kept)
    fetches = recording_fetches(gw, monkeypatch)
    await gw.assignment.revoke(set(kept))
    await assign(gw, *kept, *new)
    assert [f[0] for f in fetches] == [sorted([*kept, *new])]  # one read for the three
    beta = next(p for p in gw.producers.made if p.transactional_id.endswith(".beta.0"))
    assert fetches[0][1] > gw.producers.made.index(beta)  # once beta's producer had started
    assert beta.started
    assert gw.restored[-1] == ("beta", 0)  # and only the pair taken in is restored
    assert gw.restored.count(("alpha", 0)) == 1
    assert all(s.ready for s in gw.assignment.slots.values())


async def test_the_first_assignment_reads_every_pairs_offsets_in_one_request(gw, monkeypatch):
    partitions = [*tps("alpha", 0), *tps("alpha", 1), *tps("beta", 0)]
    fetches = recording_fetches(gw, monkeypatch)
    await assign(gw, *partitions)
    assert fetches == [(sorted(partitions), 3)]  # after the three producers started
    assert all(s.ready for s in gw.assignment.slots.values())


async def test_offsets_held_by_a_pending_transaction_are_read_pair_by_pair(gw, monkeypatch):
    partitions = [*tps("alpha", 0), *tps("beta", 0)]
    await assign(gw, *partitions)
    fake = groupoffsets.fetch_committed_offsets

    async def unstable_batch(consumer, asked, *, timeout_s):
        if len(asked) > 2:
            raise groupoffsets.OffsetsUnstable("UNSTABLE_OFFSET_COMMIT")
        return await fake(consumer, asked, timeout_s=timeout_s)

    monkeypatch.setattr(groupoffsets, "fetch_committed_offsets", unstable_batch)
    fetches = recording_fetches(gw, monkeypatch)
    await gw.assignment.revoke(set(partitions))
    await assign(gw, *partitions)
    assert sorted(len(f[0]) for f in fetches) == [2, 2, 4]  # the batch, then each pair alone
    assert all(s.ready for s in gw.assignment.slots.values())


async def test_the_revoked_pairs_commit_together(gw):
    a_ev, a_rq = tps("bot", 0)
    b_ev, b_rq = tps("bot", 1)
    await assign(gw, a_ev, a_rq, b_ev, b_rq)
    a, b = gw.assignment.slots[("bot", 0)], gw.assignment.slots[("bot", 1)]
    gw.consumer.positions.update({a_ev: 2, b_ev: 2})
    for slot, (ev, rq) in ((a, (a_ev, a_rq)), (b, (b_ev, b_rq))):
        batch = decided_round(ev, rq)
        slot.pair.take("events", batch[ev])
        slot.pair.take("requests", batch[rq])
        slot.pair.set_fence(2)
        slot.pair.process(2, 0.0, 0)
    # a's commit lands only once b's has begun: one after the other, a would time out
    a_producer, b_producer = producer(gw, a.key), producer(gw, b.key)
    a_producer.commit_gate = asyncio.Event()
    begin = b_producer.begin_transaction

    async def begin_and_release_a() -> None:
        a_producer.commit_gate.set()
        await begin()

    b_producer.begin_transaction = begin_and_release_a
    await gw.assignment.revoke({a_ev, a_rq, b_ev, b_rq})
    assert set(gw.assignment.slots) == {("bot", 0), ("bot", 1)}  # neither dropped
    assert transactions(gw, "committed") == 2 and forwards(gw) == 2
    assert gw.ready()[1]["dropped"] == []


class Admin:
    """Topic look-ups, recorded: every changelog exists; `policies` gives each one's."""

    def __init__(self, policies: dict[str, str]) -> None:
        self.policies = policies
        self.described: list[list[str]] = []
        self.configs: list[list[str]] = []

    async def describe_topics(self, names):
        self.described.append(list(names))
        return [{"topic": n, "error_code": 0, "partitions": [{}] * 2} for n in names]

    async def describe_configs(self, resources):
        self.configs.append([r.name for r in resources])
        entries = [
            {
                "resource_name": r.name,
                "error_code": 0,
                "config_entries": [
                    {"config_names": "cleanup.policy", "config_value": self.policies[r.name]}
                ],
            }
            for r in resources
        ]
        return [SimpleNamespace(to_object=lambda: {"resources": entries})]


async def test_the_agents_of_an_assignment_share_one_changelog_look_up() -> None:
    agents = ["alpha", "beta", "gamma"]
    policies = {f"agui.{a}.gateway-changelog": "compact" for a in agents}
    policies["agui.beta.gateway-changelog"] = "delete"
    admin = Admin(policies)
    topics = {f"agui.{a}.{side}" for a in agents for side in ("events", "requests")}
    topics |= {"agui.audit", "agui.interrupts"}
    cluster = SimpleNamespace(partitions_for_topic=lambda t: {0, 1} if t in topics else None)
    consumer: Any = SimpleNamespace(_client=SimpleNamespace(cluster=cluster))
    preparer = Preparer(TopicNames(Settings()), None, consumer, admin, None, None)  # type: ignore[arg-type]
    found = await asyncio.gather(*(preparer.check_agent(a) for a in agents))
    assert admin.described == [sorted(policies)] or admin.described == [list(policies)]
    assert len(admin.configs) == 1 and sorted(admin.configs[0]) == sorted(policies)
    assert found[0] is None and found[2] is None
    assert found[1] == (
        "changelog topic agui.beta.gateway-changelog: cleanup.policy is delete, expected "
        "compact. Agent refused"
    )
    await preparer.check_agent("alpha")  # a later check is a look-up of its own
    assert admin.described[-1] == ["agui.alpha.gateway-changelog"]


class Bounds:
    """A consumer's partition bounds, with the look-ups recorded."""

    def __init__(self, starts: dict[TopicPartition, int], ends: dict[TopicPartition, int]):
        self.starts, self.ends = starts, ends
        self.asked: list[list[TopicPartition]] = []
        self._client = SimpleNamespace(
            _topics=set(),
            add_topic=self._add_topic,
            cluster=SimpleNamespace(partitions_for_topic=self._partitions),
        )

    def _partitions(self, topic: str) -> set[int] | None:
        """What the metadata shows once a topic is tracked (its update is done)."""
        found = {tp.partition for tp in self.ends if tp.topic == topic}
        return found if topic in self._client._topics and found else None

    def _add_topic(self, topic: str) -> asyncio.Future[bool]:
        self._client._topics.add(topic)
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        done.set_result(True)
        return done

    async def beginning_offsets(self, tps):
        self.asked.append(sorted(tps))
        return {tp: self.starts[tp] for tp in tps}

    async def end_offsets(self, tps):
        return {tp: self.ends[tp] for tp in tps}


async def test_restores_asked_together_read_only_the_changelogs_with_records(monkeypatch):
    empty, compacted, full = (TopicPartition("agui.bot.gateway-changelog", p) for p in (0, 1, 2))
    bounds = Bounds({empty: 0, compacted: 7, full: 0}, {empty: 0, compacted: 7, full: 3})
    restorer = Restorer(Settings(), consumer=bounds)  # type: ignore[arg-type]
    read: list[TopicPartition] = []

    async def reader(tp, thread_of=None, head=None):
        read.append(tp)
        return Restored(ThreadStore(), {"t1"}, 1)

    monkeypatch.setattr(restorer, "_read", reader)
    got = await asyncio.gather(
        *(restorer.restore(tp.topic, tp.partition) for tp in (empty, compacted, full))
    )
    assert bounds.asked == [sorted([empty, compacted, full])]  # one look-up for the three
    assert bounds._client._topics == {"agui.bot.gateway-changelog"}  # tracked before it
    assert read == [full]
    assert [len(r.active) for r in got] == [0, 0, 1]


async def test_a_producer_start_that_hangs_holds_up_no_other_pair(gw, monkeypatch):
    monkeypatch.setattr(prepare_module, "OPEN_WAIT_S", 0.05)
    stuck = asyncio.Event()  # never set: alpha's producers never finish starting
    made = gw.producers

    def factory(**kwargs):
        producer = made(**kwargs)
        if ".alpha." in kwargs["transactional_id"]:

            async def start() -> None:
                await stuck.wait()

            producer.start = start
        return producer

    monkeypatch.setattr(clients, "AIOKafkaProducer", factory)
    gw.consumer.assigned = {*tps("alpha", 0), *tps("beta", 0)}
    await gw.assignment.assign({*tps("alpha", 0), *tps("beta", 0)})
    beta = gw.assignment.slots[("beta", 0)]
    for _ in range(200):
        if beta.ready:
            break
        await asyncio.sleep(0.01)
    assert beta.ready and not gw.assignment.slots[("alpha", 0)].ready
    cancelled = [p for p in made.made if ".alpha." in p.transactional_id]
    assert cancelled and cancelled[0].stopped  # the start given up was stopped
    gw.assignment.cancel_prepares()
    await gw.assignment.settled()


async def test_every_partition_read_in_the_batch_is_placed_at_once(gw, monkeypatch):
    """aiokafka, left to place a partition itself, reads its committed offset alone, one
    partition after another: the batch's read places them all, the partitions never
    committed at their beginning in one reset."""
    partitions = [*tps("alpha", 0), *tps("alpha", 1), *tps("beta", 0)]
    await assign(gw, *partitions)
    await gw.assignment.revoke(set(partitions))
    committed = dict.fromkeys(tps("alpha", 0), 7)
    gw.consumer.committed_offsets.update(committed)
    sought: list[tuple[TopicPartition, int]] = []
    beginnings: list[tuple[TopicPartition, ...]] = []
    seek, seek_to_beginning = gw.consumer.seek, gw.consumer.seek_to_beginning

    def recorded_seek(tp, offset):
        sought.append((tp, offset))
        seek(tp, offset)

    async def recorded_beginning(*partitions):
        beginnings.append(partitions)
        await seek_to_beginning(*partitions)

    monkeypatch.setattr(gw.consumer, "seek", recorded_seek)
    monkeypatch.setattr(gw.consumer, "seek_to_beginning", recorded_beginning)
    await assign(gw, *partitions)
    never = {tp for tp in partitions if tp not in committed}
    assert [set(b) for b in beginnings] == [never]  # one reset for all of them
    # the committed ones placed by the batch (each pair seeks its own again when prepared)
    assert set(sought[: len(committed)]) == set(committed.items())
    assert all(gw.consumer.positions[tp] == 7 for tp in committed)
    assert all(s.ready for s in gw.assignment.slots.values())


async def test_an_agent_is_refused_while_its_audit_topic_is_missing_with_the_trail_on() -> None:
    """Its decisions could not be written: refused with what to do, before its changelog
    is even looked up; with the trail off the same agent is served."""
    admin = Admin({"agui.alpha.gateway-changelog": "compact"})
    topics = {"agui.alpha.events", "agui.alpha.requests", "agui.interrupts"}
    cluster = SimpleNamespace(partitions_for_topic=lambda t: {0, 1} if t in topics else None)
    consumer: Any = SimpleNamespace(_client=SimpleNamespace(cluster=cluster))
    on = Preparer(TopicNames(Settings()), None, consumer, admin, None, None)  # type: ignore[arg-type]
    why = await on.check_agent("alpha")
    assert why is not None and why.startswith("audit topic agui.audit does not exist")
    assert "agui-gateway topics create" in why and "audit_enabled=false" in why
    assert admin.described == []
    off = Preparer(TopicNames(Settings(audit_enabled=False)), None, consumer, admin, None, None)  # type: ignore[arg-type]
    assert await off.check_agent("alpha") is None
    topics.add("agui.audit")
    assert await on.check_agent("alpha") is None


async def test_an_agent_is_refused_while_the_interrupts_topic_is_missing_unless_it_is_off() -> None:
    """An upgrade that keeps interrupts_topic (the default) but never ran `topics create`:
    every round that opens or closes an interrupt would fail to commit. Refused with what
    to do, as for the audit topic; with interrupts_topic="" the agent is served."""
    admin = Admin({"agui.alpha.gateway-changelog": "compact"})
    topics = {"agui.alpha.events", "agui.alpha.requests", "agui.audit"}
    cluster = SimpleNamespace(partitions_for_topic=lambda t: {0, 1} if t in topics else None)
    consumer: Any = SimpleNamespace(_client=SimpleNamespace(cluster=cluster))
    on = Preparer(TopicNames(Settings()), None, consumer, admin, None, None)  # type: ignore[arg-type]
    why = await on.check_agent("alpha")
    assert why is not None and why.startswith("interrupts topic agui.interrupts does not exist")
    assert "agui-gateway topics create" in why and 'interrupts_topic=""' in why
    assert why.endswith("Agent refused") and admin.described == []
    off = Preparer(TopicNames(Settings(interrupts_topic="")), None, consumer, admin, None, None)  # type: ignore[arg-type]
    assert await off.check_agent("alpha") is None
    topics.add("agui.interrupts")
    assert await on.check_agent("alpha") is None
