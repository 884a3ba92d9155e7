"""One transactional producer per instance (producer_scope = "instance"), on the real broker.

The zombie: an instance whose transaction is held while a rebalance moves on
(a new generation) commits nothing afterwards: the group refuses its offsets
(KIP-447), it aborts, and every request is decided exactly once by the owner.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.kafka.exactly_once import groupfence
from gateway.kafka.exactly_once.instancecheckpoint import InstanceCheckpoint
from gateway.kafka.runner import Gateway
from gateway.settings import Settings
from tests.integration import inprocess
from tests.integration.inprocess import (
    eventually,
    forwarded_once,
    interrupted,
    running,
    send_answer,
)
from tests.integration.support import Namespace, produce

AGENT = "solo"
KEY = (AGENT, 0)


def settings_for(ns: Namespace, name: str) -> Settings:
    return inprocess.settings_for(
        ns, revoke_timeout_s=2, producer_scope="instance", instance_name=name
    )


def sample(gateway: Gateway, name: str, **labels: str) -> float:
    return gateway.metrics.registry.get_sample_value(name, labels) or 0.0


async def test_one_producer_per_instance_decides_each_request_once(kafka_bootstrap: str) -> None:
    ns = Namespace(kafka_bootstrap)
    await ns.create_agent(AGENT, partitions=2)
    threads = [f"t{i}" for i in range(8)]
    await produce(ns.bootstrap, ns.events(AGENT), [e for t in threads for e in interrupted(t)])
    async with running(settings_for(ns, "one")) as gateway:
        await eventually(lambda: gateway.ready()[0], "the gateway ready")
        assert isinstance(gateway.assignment.checkpoint, InstanceCheckpoint)  # type: ignore[union-attr]
        for thread in threads:
            await send_answer(ns, AGENT, thread)
        await forwarded_once(ns, AGENT, threads)
        assert sample(gateway, "agui_gateway_transactions_total", result="committed") >= 1


async def test_a_zombie_held_across_a_rebalance_is_fenced_by_the_group(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = Namespace(kafka_bootstrap)
    await ns.create_agent(AGENT, partitions=1)
    threads = [f"t{i}" for i in range(4)]
    await produce(ns.bootstrap, ns.events(AGENT), [e for t in threads for e in interrupted(t)])
    real_send_offsets = groupfence.send_offsets_to_transaction
    held: dict[str, Any] = {"producer": None}
    entered, release = asyncio.Event(), asyncio.Event()

    async def send_offsets(producer: Any, offsets: Any, group: Any) -> None:
        if producer is held["producer"]:  # the zombie: its offsets wait for the rebalance
            entered.set()
            await release.wait()
        await real_send_offsets(producer, offsets, group)

    monkeypatch.setattr(groupfence, "send_offsets_to_transaction", send_offsets)
    async with running(settings_for(ns, "zombie")) as zombie:
        await eventually(lambda: zombie.ready()[0], "the first instance ready")
        slot = zombie.assignment.slots[KEY]  # type: ignore[union-attr]
        await eventually(lambda: slot.committed.get(slot.events_tp) == 8, "events committed")
        held["producer"] = zombie.assignment.checkpoint.producer(KEY)  # type: ignore[union-attr]
        await send_answer(ns, AGENT, "t0")  # decided; its transaction waits before its offsets
        await asyncio.wait_for(entered.wait(), timeout=60)
        # a second instance joins: a new generation; the held work belongs to the old one
        async with running(settings_for(ns, "owner")) as owner:
            await eventually(
                lambda: owner.ready()[1]["assigned"] or zombie.ready()[1]["assigned"] != [],
                "the rebalance",
            )
            await eventually(
                lambda: (
                    zombie.assignment.committer.in_flight(slot) is False  # type: ignore[union-attr]
                    or owner.ready()[0]
                ),
                "the partition reassigned",
            )
            release.set()  # the zombie's offsets now carry a generation that is over
            await eventually(
                lambda: sample(zombie, "agui_gateway_transactions_total", result="fenced") >= 1,
                "the zombie fenced",
            )
            for thread in threads[1:]:
                await send_answer(ns, AGENT, thread)
            await forwarded_once(ns, AGENT, threads)


async def test_with_two_producers_a_round_waits_for_no_other_transaction(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One producer per instance commits one transaction at a time: rounds asked for
    meanwhile wait for it to end, then for their own. With `instance_producers = 2` a
    round asked for while one transaction is open goes into the other producer's."""
    ns = Namespace(kafka_bootstrap)
    other = "duo"
    for agent in (AGENT, other):
        await ns.create_agent(agent, partitions=1)
        await produce(ns.bootstrap, ns.events(agent), interrupted("t0"))
    real_send_offsets = groupfence.send_offsets_to_transaction
    held: dict[str, Any] = {"producer": None}
    entered, release = asyncio.Event(), asyncio.Event()

    async def send_offsets(producer: Any, offsets: Any, group: Any) -> None:
        if producer is held["producer"]:
            entered.set()
            await release.wait()
        await real_send_offsets(producer, offsets, group)

    monkeypatch.setattr(groupfence, "send_offsets_to_transaction", send_offsets)
    settings = inprocess.settings_for(
        ns, producer_scope="instance", instance_name="pool", instance_producers=2
    )
    async with running(settings) as gateway:
        await eventually(lambda: gateway.ready()[0], "the gateway ready")
        checkpoint = gateway.assignment.checkpoint  # type: ignore[union-attr]
        assert isinstance(checkpoint, InstanceCheckpoint)
        for key in (KEY, (other, 0)):
            slot = gateway.assignment.slots[key]  # type: ignore[union-attr]
            await eventually(lambda s=slot: s.committed.get(s.events_tp) == 2, "events committed")
        held["producer"] = checkpoint._producers[0]
        try:
            await send_answer(ns, AGENT, "t0")  # its transaction waits before its offsets
            await asyncio.wait_for(entered.wait(), timeout=60)
            await send_answer(ns, other, "t0")  # goes into the second producer's transaction
            await forwarded_once(ns, other, ["t0"])
        finally:
            release.set()
        await forwarded_once(ns, AGENT, ["t0"])
    assert checkpoint.transactional_id_of(1) == f"{ns.group}.instance.pool.1"
