"""How far the consumer is behind: per agent and topic role, and each one's worst partition.

Read every `LAG_INTERVAL_S` by a task of its own (a position still being reset is
awaited, up to a second, and must not hold up a round).
"""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer

from gateway.kafka.wire.topics import TopicNames

LagKey = tuple[str, str]  # (agent, role): "events" or "requests", not the topic's name


async def read_lag(
    consumer: AIOKafkaConsumer, names: TopicNames
) -> tuple[dict[LagKey, int], dict[LagKey, int]]:
    """Lag per agent and role (summed over partitions), and each one's worst partition."""
    lag: dict[LagKey, int] = {}
    worst: dict[LagKey, int] = {}
    for tp in consumer.assignment():
        found = names.classify(tp.topic)
        if found is None:
            continue
        try:
            # A growing pattern subscription lets the partitions go while a position
            # is awaited (before the rebalance revokes them): aiokafka then asserts
            # in `highwater`. Such a partition has no figure this time.
            high = consumer.highwater(tp)
            if high is None:
                continue
            async with asyncio.timeout(1):  # no task per partition, unlike wait_for
                position = await consumer.position(tp)
        except Exception:
            continue
        key = found
        behind = max(0, high - position)
        lag[key] = lag.get(key, 0) + behind
        worst[key] = max(worst.get(key, 0), behind)
    return lag, worst
