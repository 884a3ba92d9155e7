"""Every Kafka client the gateway builds comes from gateway.kafka.wire.clients, with security."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)

from gateway.kafka.wire import clients
from gateway.settings import Settings

GATEWAY = Path(clients.__file__).resolve().parents[1]


def secure() -> Settings:
    return Settings(
        bootstrap_servers="broker:9094",
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="agui-gateway",
        sasl_plain_password="s3cret",
    )


def test_no_module_builds_a_kafka_client_but_the_clients_module() -> None:
    constructor = re.compile(r"\bAIOKafka(Consumer|Producer|AdminClient)\(")
    offenders = [
        str(path.relative_to(GATEWAY))
        for path in GATEWAY.rglob("*.py")
        if path.name != "clients.py" and constructor.search(path.read_text())
    ]
    assert offenders == []


async def test_each_client_takes_the_security_settings() -> None:
    settings = secure()
    consumer = clients.consumer(settings, "t", group_id="g")
    producer = clients.producer(settings)
    admin = clients.admin(settings)
    try:
        for client in (consumer._client, producer.client, admin._client):
            assert client._bootstrap_servers == "broker:9094"
            assert client._security_protocol == "SASL_SSL"
            assert client._sasl_mechanism == "SCRAM-SHA-512"
            assert client._sasl_plain_username == "agui-gateway"
            assert client._sasl_plain_password == "s3cret"
            assert client._ssl_context is not None
    finally:
        await consumer.stop()
        await producer.stop()
        await admin.close()


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            TopicAuthorizationFailedError("agui.a.run-requests"),
            ("Write", "topic agui.a.run-requests"),
        ),
        (TopicAuthorizationFailedError({"b", "a"}), ("Write", "topic a,b")),
        (TransactionalIdAuthorizationFailed("gw.a.0"), ("Write", "transactional-id gw.a.0")),
        (GroupAuthorizationFailedError("gw"), ("Read", "group gw")),
        (ClusterAuthorizationFailedError(), ("IdempotentWrite", "cluster")),
        (KafkaConnectionError("down"), None),
    ],
)
def test_a_refusal_names_the_missing_operation_and_resource(error, expected) -> None:
    assert clients.describe_denial(error) == expected


def test_a_consumer_refusal_names_read() -> None:
    found = clients.describe_denial(TopicAuthorizationFailedError("x"), "Read")
    assert found == ("Read", "topic x")


async def test_preflight_does_nothing_on_plaintext() -> None:
    await clients.preflight(Settings(bootstrap_servers="127.0.0.1:1"))


async def test_the_broker_probe_without_a_client_or_a_known_broker_fails_clearly() -> None:
    # its answer from a real broker: tests/integration/test_broker_gone.py
    with pytest.raises(KafkaConnectionError, match="no client started yet"):
        await clients.probe(None)
    consumer = clients.consumer(Settings(bootstrap_servers="127.0.0.1:1"))  # never started
    with pytest.raises(KafkaConnectionError, match="no broker known"):
        await clients.probe(consumer)


class _StopsLikeAConsumerWithoutItsBroker:
    """stop() cancels a task of its own, then awaits it (aiokafka's fetcher.close)."""

    def __init__(self, hang: bool = False) -> None:
        self.hang = hang

    async def stop(self) -> None:
        if self.hang:  # e.g. leaving the group
            await asyncio.sleep(3600)
        fetch = asyncio.create_task(asyncio.sleep(3600))
        await asyncio.sleep(0)
        fetch.cancel()
        await fetch


async def test_a_stop_that_reraises_its_own_fetchs_cancellation_returns() -> None:
    await clients.stop(_StopsLikeAConsumerWithoutItsBroker())  # type: ignore[arg-type]


async def test_a_stop_whose_caller_is_cancelled_is_cancelled() -> None:
    task = asyncio.create_task(clients.stop(_StopsLikeAConsumerWithoutItsBroker(hang=True)))  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_transactional_producer_asks_again_soon_after_concurrent_transactions(
    monkeypatch,
) -> None:
    """aiokafka waits a fixed 20 ms before asking again for a transaction's first
    write refused while the last one's markers are written; every transactional
    producer the gateway builds makes that 2 ms (txnretry)."""
    from aiokafka.producer import sender

    from gateway.kafka.wire import txnretry

    monkeypatch.setattr(sender, "BACKOFF_OVERRIDE", 0.02)  # aiokafka's own, restored after
    clients.producer(Settings())  # not transactional: left as it is
    assert sender.BACKOFF_OVERRIDE == 0.02
    clients.producer(Settings(), transactional_id="t", enable_idempotence=True)
    assert sender.BACKOFF_OVERRIDE == txnretry.RETRY_S == 0.002
