"""Several `agui-gateway run` instances as one gateway, on the real broker.

Two instances of one consumer group share a group's four pairs, two each. One is
stopped and started again within the session timeout as the same static member
(`static_membership`, `instance_name`): it gets its own pairs back and the other
instance is not rebalanced at all (no revoke, no preparation, in its log). Requests
sent across the restart are each forwarded exactly once.
"""

from __future__ import annotations

import asyncio
import signal

import orjson
import pytest

from tests.integration.support import GatewayProcess, Namespace, collect, header
from tests.integration.test_gateway_durability import wait_metric
from tests.integration.test_groups_e2e import (
    GROUP,
    GROUPS,
    create_group,
    events,
    interrupted,
    rebalances,
    request,
    resume,
    started,
)

THREADS = [f"t{i}" for i in range(12)]


@pytest.fixture
async def ns(kafka_bootstrap: str) -> Namespace:
    return Namespace(kafka_bootstrap)


def held(gateway: GatewayProcess) -> set[str]:
    status, body = gateway.http("/readyz")
    assert status == 200, body
    return set(orjson.loads(body)["assigned"])


async def settled(a: GatewayProcess, b: GatewayProcess, pairs: int, timeout: float = 60) -> None:
    """Until both are ready and hold every pair apart, evenly."""
    deadline = asyncio.get_running_loop().time() + timeout
    last = None
    while asyncio.get_running_loop().time() < deadline:
        answers = [await asyncio.to_thread(g.http, "/readyz") for g in (a, b)]
        if all(status == 200 for status, _ in answers):
            mine, theirs = (set(orjson.loads(body)["assigned"]) for _, body in answers)
            last = (sorted(mine), sorted(theirs))
            if (
                not mine & theirs
                and len(mine | theirs) == pairs
                and abs(len(mine) - len(theirs)) <= 1
            ):
                return
        await asyncio.sleep(0.2)
    raise AssertionError(
        f"the instances did not settle: {last}\n{a.log_tail(20)}\n{b.log_tail(20)}"
    )


async def test_a_static_instance_restarted_in_time_takes_its_pairs_back_and_moves_nothing(
    ns: Namespace, tmp_path
) -> None:
    await create_group(ns, partitions=4)
    common = {"groups": GROUPS, "static_membership": "true", "session_timeout_ms": "10000"}
    a = GatewayProcess(ns, tmp_path, "a", instance_name="gw-a", **common)
    b = GatewayProcess(ns, tmp_path, "b", instance_name="gw-b", **common)
    restarted = GatewayProcess(ns, tmp_path, "a-again", instance_name="gw-a", **common)
    try:
        await a.start()
        await b.start()
        await settled(a, b, pairs=4)
        for thread in THREADS:
            await events(ns, "alpha", started(thread, "r1"), interrupted(thread, "r1", "x"))
        await wait_metric(a, 'agui_gateway_runs_closed_total{outcome="interrupt"}', 1)
        await asyncio.sleep(2)  # the joins' rebalances are over
        pairs_of_a, b_before = held(a), rebalances(b)

        assert await a.stop(signal.SIGTERM) == 0, a.log_tail()
        # answers sent while the instance is away wait for it; none is lost
        sender = asyncio.gather(
            *(request(ns, "alpha", resume(t, "r2", "x"), f"c-{t}") for t in THREADS)
        )
        await restarted.start()
        await sender
        await settled(restarted, b, pairs=4)
        assert held(restarted) == pairs_of_a  # its own pairs back
        forwards = await collect(
            ns.bootstrap, ns.run_requests(GROUP), count=len(THREADS), settle=2.0
        )
        assert sorted(header(r, "agui-correlation-id") for r in forwards) == sorted(
            f"c-{t}" for t in THREADS
        )  # each once
        # the other instance was never rebalanced: no revoke, no preparation
        assert rebalances(b) == b_before
    finally:
        for gateway in (a, b, restarted):
            await gateway.stop()
