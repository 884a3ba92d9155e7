"""Upgrading with the interrupts topic on (the default) but not created: the real gateway
refuses the agent with what to do, rather than failing every round that opens or closes
an interrupt."""

from __future__ import annotations

import asyncio

import orjson
from aiokafka.admin import AIOKafkaAdminClient

from tests.integration.support import GatewayProcess, Namespace

AGENT = "ops"


async def test_an_agent_is_refused_while_the_interrupts_topic_is_missing(
    kafka_bootstrap: str, kafka_admin: AIOKafkaAdminClient, tmp_path
) -> None:
    ns = Namespace(kafka_bootstrap)
    await ns.create_agent(AGENT, partitions=1)  # as an older version's `topics create` did:
    await kafka_admin.delete_topics([ns.interrupts])  # everything but the interrupts topic
    for _ in range(100):
        if ns.interrupts not in await kafka_admin.list_topics():
            break
        await asyncio.sleep(0.1)
    gw = await GatewayProcess(ns, tmp_path).start()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        refused: dict[str, str] = {}
        while loop.time() < deadline and not refused:
            refused = orjson.loads(gw.http("/readyz")[1]).get("refused", {})
            await asyncio.sleep(0.3)
        assert AGENT in refused, refused
        why = refused[AGENT]
        assert why.startswith(f"interrupts topic {ns.interrupts} does not exist"), why
        assert "agui-gateway topics create" in why and 'interrupts_topic=""' in why
        assert f"interrupts topic {ns.interrupts} does not exist" in gw.log_tail(200)
        metrics = await asyncio.to_thread(gw.metrics)
        assert f'agui_gateway_agent_refused{{agent="{AGENT}"}} 1.0' in metrics
    finally:
        await gw.stop()
