"""Rounds judged while the previous round commits, on the real broker.

A commit that fails, or is fenced, while a second round is already judged over
it must lose and duplicate nothing: both layers are forgotten, the pair is read
again from the last commit, and each request is decided exactly once.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.errors import KafkaError

from gateway.kafka.runner import Gateway
from gateway.kafka.wire import clients
from tests.integration.inprocess import (
    eventually,
    forwarded_once,
    interrupted,
    running,
    send_answer,
    settings_for,
)
from tests.integration.support import Namespace, collect, produce

AGENT = "pipe"
KEY = (AGENT, 0)


def slot_of(gateway: Gateway) -> Any:
    assert gateway.assignment is not None
    return gateway.assignment.slots.get(KEY)


@pytest.mark.parametrize("failure", ["aborted", "fenced"])
async def test_a_failed_commit_under_a_second_pending_round_loses_and_duplicates_nothing(
    kafka_bootstrap: str, failure: str
) -> None:
    ns = Namespace(kafka_bootstrap)
    await ns.create_agent(AGENT, partitions=1)
    settings = settings_for(ns)
    threads = [f"t{i}" for i in range(6)]
    await produce(ns.bootstrap, ns.events(AGENT), [e for t in threads for e in interrupted(t)])
    async with running(settings) as gateway:
        await eventually(lambda: gateway.ready()[0], "the gateway ready")
        await eventually(
            lambda: slot_of(gateway).committed.get(slot_of(gateway).events_tp) == 12,
            "the events committed",
        )
        assert gateway.assignment is not None
        producer = gateway.assignment.checkpoint.producer(KEY)
        assert producer is not None
        real_commit = producer.commit_transaction
        entered, release = asyncio.Event(), asyncio.Event()

        async def held_commit() -> None:
            entered.set()
            await release.wait()
            if failure == "aborted":
                raise KafkaError("injected: the commit failed")
            # another instance takes the transactional id over: this producer is fenced
            usurper = clients.producer(settings, transactional_id=f"{settings.group_id}.{AGENT}.0")
            await usurper.start()
            await usurper.stop()
            await real_commit()

        producer.commit_transaction = held_commit  # type: ignore[method-assign]
        await send_answer(ns, AGENT, "t0")  # round N: decided, its commit held
        await asyncio.wait_for(entered.wait(), timeout=60)
        for thread in threads[1:4]:  # round N+1: judged over round N, not committed
            await send_answer(ns, AGENT, thread)
        await eventually(
            lambda: slot_of(gateway).pair.round.decided_any, "a second round judged", 60
        )
        assert await collect(ns.bootstrap, ns.run_requests(AGENT), timeout=1) == []
        release.set()
        if failure == "fenced":
            # the pair is given up here; a second instance joins and takes it over
            async with running(settings) as other:
                for thread in threads[4:]:
                    await send_answer(ns, AGENT, thread)
                await check_exactly_once(ns, threads)
                assert other.ready()[1]["assigned"] or gateway.ready()[1]["assigned"]
        else:
            for thread in threads[4:]:
                await send_answer(ns, AGENT, thread)
            await check_exactly_once(ns, threads)
            assert gateway.metrics.registry.get_sample_value(
                "agui_gateway_transactions_total", {"result": "aborted"}
            )


async def check_exactly_once(ns: Namespace, threads: list[str]) -> None:
    await forwarded_once(ns, AGENT, threads)
    rejected = await collect(ns.bootstrap, ns.rejections, timeout=1)
    assert rejected == []
