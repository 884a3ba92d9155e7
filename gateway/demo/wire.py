"""The simulators' Kafka clients: producers, and group consumers that start at the end."""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from gateway.kafka.wire import clients
from gateway.settings import Settings

ASSIGN_TIMEOUT_S = 30.0


class DemoSetupError(RuntimeError):
    """The demo cannot start: one line for the user."""


async def producer(settings: Settings, client_id: str) -> AIOKafkaProducer:
    made = clients.producer(
        settings,
        client_id=client_id,
        acks="all",
        enable_idempotence=True,
        linger_ms=5,
        request_timeout_ms=15000,
    )
    await asyncio.wait_for(made.start(), timeout=ASSIGN_TIMEOUT_S)
    return made


async def consumer_at_end(
    settings: Settings, topic: str, group_id: str, client_id: str
) -> AIOKafkaConsumer:
    """A read_committed group consumer of `topic`, positioned at the end of every partition.

    Returns once the group assigned every partition and each position is
    resolved, so nothing published afterwards is missed.
    """
    made = clients.consumer(
        settings,
        topic,
        client_id=client_id,
        group_id=group_id,
        enable_auto_commit=False,
        auto_offset_reset="latest",
        isolation_level="read_committed",
        session_timeout_ms=10000,
        heartbeat_interval_ms=1000,
    )
    await asyncio.wait_for(made.start(), timeout=ASSIGN_TIMEOUT_S)
    try:
        deadline = time.monotonic() + ASSIGN_TIMEOUT_S
        wanted = made.partitions_for_topic(topic) or set()
        while not wanted or len(made.assignment()) < len(wanted):
            if time.monotonic() > deadline:
                raise DemoSetupError(f"consumer group {group_id} got no assignment of {topic}")
            await asyncio.sleep(0.05)
            wanted = made.partitions_for_topic(topic) or set()
        for tp in made.assignment():
            await asyncio.wait_for(made.position(tp), timeout=ASSIGN_TIMEOUT_S)
    except BaseException:
        await made.stop()
        raise
    return made


async def stop_quietly(*clients: AIOKafkaProducer | AIOKafkaConsumer | None) -> None:
    """Stop each client, bounded; a client that will not stop is abandoned."""
    for client in clients:
        if client is None:
            continue
        try:
            await asyncio.wait_for(client.stop(), timeout=10)
        except Exception:  # shutting down: nothing left to do about it
            pass
