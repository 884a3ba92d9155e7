"""Every Kafka client the gateway builds, in one place, with the settings' security.

Consumers, producers and admin clients of the service, `topics create` and the
demo are made here, so each one connects with `settings.kafka_security()` and
the bootstrap servers, and none can be built without them.

`preflight` connects once to the bootstrap servers with those settings and
turns what aiokafka would otherwise retry quietly (a refused password, an
untrusted certificate, a certificate for another host) into one clear line.
The line names the cause and never carries a secret.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import AIOKafkaClient
from aiokafka.conn import create_conn
from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    KafkaError,
    SaslAuthenticationFailed,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
    UnsupportedSaslMechanismError,
)
from aiokafka.protocol.metadata import MetadataRequest

from gateway.kafka.wire import asread, closing, txnretry
from gateway.settings import Settings

PREFLIGHT_TIMEOUT_S = 15.0

# What a missing ACL looks like to a client: Kafka answers the request, refused.
AUTHORIZATION_ERRORS = (
    TopicAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
    ClusterAuthorizationFailedError,
)


class SecurityFailure(Exception):
    """Kafka refused the connection's security: one line for the user, no secret in it."""


def common(settings: Settings) -> dict[str, Any]:
    """The keyword arguments every client shares: where Kafka is, and how to connect."""
    return {"bootstrap_servers": settings.bootstrap_servers, **settings.kafka_security()}


def consumer(settings: Settings, *topics: str, **kwargs: Any) -> AIOKafkaConsumer:
    if kwargs.get("key_deserializer") is asread.as_read:
        asread.install()  # its records as the fetch read them: see asread
    made = AIOKafkaConsumer(*topics, **kwargs, **common(settings))
    closing.bound(getattr(made, "_client", None))  # its close never waits out TLS's
    return made


def changelog_reader(settings: Settings, client_id: str) -> AIOKafkaConsumer:
    """A reader of changelog partitions into replicas (restores, standbys): committed
    records only, from the beginning, in large batches, as the fetch read them."""
    return consumer(
        settings,
        client_id=client_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",  # a "latest" reset racing the seek would skip all
        isolation_level="read_committed",
        max_poll_records=10000,
        key_deserializer=asread.as_read,
    )


def producer(settings: Settings, **kwargs: Any) -> AIOKafkaProducer:
    if kwargs.get("transactional_id"):
        txnretry.install()  # transactions one after another: see txnretry
    made = AIOKafkaProducer(**kwargs, **common(settings))
    closing.bound(getattr(made, "client", None))
    return made


def admin(settings: Settings, **kwargs: Any) -> AIOKafkaAdminClient:
    made = AIOKafkaAdminClient(**kwargs, **common(settings))
    closing.bound(getattr(made, "_client", None))
    return made


def network_client(
    client: AIOKafkaConsumer | AIOKafkaProducer | AIOKafkaAdminClient,
) -> AIOKafkaClient:
    """The connections and cluster metadata underneath a consumer, producer or admin client."""
    if isinstance(client, AIOKafkaProducer):
        return client.client
    return client._client


async def probe(client: AIOKafkaConsumer | AIOKafkaProducer | AIOKafkaAdminClient | None) -> None:
    """One cheap round trip to a broker the client knows: metadata naming no topic.

    The answer lists the brokers only, whatever the number of topics. Raises
    (a `KafkaError`) when no broker answers or the client is not there yet; the
    caller bounds the wait.
    """
    if client is None:
        raise KafkaConnectionError("no client started yet")
    network = network_client(client)
    node = network.get_random_node()
    if node is None:
        raise KafkaConnectionError("no broker known")
    await network.send(node, MetadataRequest([]))


async def stop(client: AIOKafkaConsumer | AIOKafkaProducer) -> None:
    """Stop a client; a stop that only re-raises aiokafka's own cancellation returns.

    With its broker gone, a consumer's stop cancels its pending fetch and then
    awaits it: the fetch's CancelledError comes out of `stop()` though nobody
    cancelled the caller. It is swallowed here; a cancellation of the caller
    itself still propagates. (The stop's last step, closing the connections, is
    bounded for every client built here: see `closing`.)
    """
    try:
        await client.stop()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise


def describe_denial(exc: BaseException, topic_operation: str = "Write") -> tuple[str, str] | None:
    """(missing operation, resource) of a request Kafka refused for want of an ACL, else None.

    A refused topic is named by the error; `topic_operation` says what the caller
    did with it (producers write, consumers read), unless the error carries its own
    `operation`.
    """
    if isinstance(exc, TopicAuthorizationFailedError):
        topics = exc.args[0] if exc.args else "?"
        if isinstance(topics, (set, frozenset, list, tuple)):
            topics = ",".join(sorted(str(t) for t in topics))
        return getattr(exc, "operation", topic_operation), f"topic {topics}"
    if isinstance(exc, TransactionalIdAuthorizationFailed):
        return "Write", f"transactional-id {exc.args[0] if exc.args else '?'}"
    if isinstance(exc, GroupAuthorizationFailedError):
        return "Read", f"group {exc.args[0] if exc.args else '?'}"
    if isinstance(exc, ClusterAuthorizationFailedError):
        return "IdempotentWrite", "cluster"
    return None


def _cause(settings: Settings, exc: BaseException) -> str | None:
    """One line naming why the connection's security failed, or None if it did not."""
    where = settings.bootstrap_servers
    if isinstance(exc, ssl.SSLCertVerificationError):
        reason = exc.verify_message or str(exc)
        if "mismatch" in reason.lower():
            return (
                f"TLS: the broker's certificate at {where} does not match the host name "
                f"({reason}); connect by a name the certificate lists"
            )
        return (
            f"TLS: the broker's certificate at {where} is not trusted ({reason}); "
            "set ssl_cafile to the CA that signed it"
        )
    if isinstance(exc, ssl.SSLError):
        return f"TLS handshake with {where} failed ({exc.reason or type(exc).__name__})"
    if isinstance(exc, SaslAuthenticationFailed):
        return (
            f"SASL: {where} refused user {settings.sasl_plain_username!r} with "
            f"{settings.sasl_mechanism} (wrong user name or password)"
        )
    if isinstance(exc, UnsupportedSaslMechanismError):
        return f"SASL: {where} does not offer mechanism {settings.sasl_mechanism}"
    return None


async def preflight(settings: Settings) -> None:
    """Connect once with the configured security; raise `SecurityFailure` naming the cause.

    Unreachable servers are not judged here: the clients report them as before.
    """
    if settings.security_protocol == "PLAINTEXT":
        return
    security = settings.kafka_security()
    for server in settings.bootstrap_servers.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            conn = await asyncio.wait_for(
                create_conn(
                    host.strip("[]"),
                    int(port),
                    client_id=f"{settings.client_id}-preflight",
                    request_timeout_ms=int(PREFLIGHT_TIMEOUT_S * 1000),
                    **security,
                ),
                timeout=PREFLIGHT_TIMEOUT_S,
            )
        except (KafkaError, OSError, TimeoutError, ValueError) as exc:
            cause = _cause(settings, exc) or _cause(settings, exc.__cause__ or exc)
            if cause is not None:
                raise SecurityFailure(cause) from None
            continue  # unreachable or odd: the next server, then the clients, say so
        conn.close()
        return


# --- what the gateway reads of a client's metadata (aiokafka keeps no public accessor) ---


def partitions_for(consumer: AIOKafkaConsumer, topic: str) -> set[int] | None:
    """The partitions the consumer's metadata knows for `topic` (None: unknown topic)."""
    found = consumer._client.cluster.partitions_for_topic(topic)
    return set(found) if found is not None else None


def topic_exists(consumer: AIOKafkaConsumer, topic: str) -> bool:
    """Whether the consumer's metadata shows `topic` as a topic of the cluster's users."""
    cluster = consumer._client.cluster
    # Asked for every request with a reply topic: a look-up, where topics() would
    # first copy the name of every topic the cluster has.
    return topic not in cluster.internal_topics and cluster.partitions_for_topic(topic) is not None


async def refresh_metadata(consumer: AIOKafkaConsumer) -> None:
    await consumer._client.force_metadata_update()


async def know_topics(client: AIOKafkaConsumer, topics: Iterable[str]) -> None:
    """Have the client's metadata track every one of `topics`, with one metadata update
    for all it did not track yet (nothing when it tracks them all).

    Left to itself, an offsets look-up adds the first partition's topic it does not
    know, fails, and tries again 100 ms later: a look-up over a fleet's topics new to
    the client took one attempt per topic (seconds). Once a client tracks topics it
    asks only for those, so every topic it looks up must be tracked. Never for a
    subscribed consumer: tracking a topic there would narrow the metadata its pattern
    subscription reads."""
    net = client._client
    topics = set(topics)
    waits = [net.add_topic(topic) for topic in topics if topic not in net._topics]
    if not waits:
        return
    await asyncio.gather(*waits)
    if any(net.cluster.partitions_for_topic(topic) is None for topic in topics):
        # an update already under way when the topics were added did not ask for them
        await net.force_metadata_update()


def fetched_end(
    consumer: AIOKafkaConsumer, tp: TopicPartition, beside: TopicPartition
) -> tuple[int, int] | None:
    """(last stable offset, wall ms its fetch response was processed) of `tp`, as the
    consumer's own fetches keep it; None when unknown or when `tp` and `beside` have
    different leaders (their fetch responses then come on different connections)."""
    cluster = consumer._client.cluster
    leader = cluster.leader_for_partition(tp)
    if leader is None or leader != cluster.leader_for_partition(beside):
        return None
    try:
        lso = consumer.last_stable_offset(tp)
        at = consumer.last_poll_timestamp(tp)
    except Exception:  # not assigned (any more)
        return None
    if lso is None or at is None:
        return None
    return int(lso), int(at)


def fetched_at(consumer: AIOKafkaConsumer, tp: TopicPartition) -> int | None:
    """Wall ms the last fetch response for `tp` was processed (None: never)."""
    try:
        at = consumer.last_poll_timestamp(tp)
    except Exception:
        return None
    return int(at) if at is not None else None
