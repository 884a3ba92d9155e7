"""What a transactional id's coordinator holds of its last transaction, and adding a
group to a transaction without offsets: two requests aiokafka 0.14 does not send.

`last_states` asks, before a producer is initialised, how the transactional id's
last transaction ended (`DescribeTransactions`, KIP-664, Kafka 3.0 and later): the
answer a pair's sweep needs to complete a transaction the broker left hanging the
way its coordinator decided it (see `gateway.kafka.exactly_once.hanging`).
Initialising the producer forgets it (the state becomes `Empty`), so it is asked
first. The coordinators of many transactional ids are found with one batched
`FindCoordinator` (v4, KIP-699), then each coordinator is asked once for all of
its ids: an assignment's pairs cost two requests, not two each.

`add_group` adds a group's offsets partition to a producer's open transaction
(`AddOffsetsToTxn`) without committing any offset: its marker then completes
whatever the same producer id left pending there, and nothing it left is
overwritten by a value sent again.

Both requests need only what a gateway's principal has: Describe on its
transactional ids (implied by Write) and Read on its group.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Iterable
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.errors import (
    ConcurrentTransactions,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    NotCoordinatorError,
    for_code,
)
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.transaction import AddOffsetsToTxnRequest
from aiokafka.protocol.types import (
    CompactArray,
    CompactString,
    Int8,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)

NO_ERROR = 0
# The states a coordinator names (TransactionState in Kafka), those that say what the
# last transaction became. `Empty` (no transaction since the producer was initialised)
# and `Dead` say nothing of it.
COMMITTED = frozenset({"PrepareCommit", "CompleteCommit"})
ABORTED = frozenset({"Ongoing", "PrepareAbort", "CompleteAbort", "PrepareEpochFence"})
# `AddOffsetsToTxn` answered with an error worth asking again: a transaction of the
# same producer still completing, a coordinator moving or loading.
RETRIABLE = (
    ConcurrentTransactions,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    NotCoordinatorError,
)
RETRY_S = 0.1
RETRIABLE_CODES = frozenset(error.errno for error in RETRIABLE)


# --- protocol: FindCoordinator v4, DescribeTransactions v0 (flexible versions) -------


class FindCoordinatorResponse_v4(Response):
    API_KEY = 10
    API_VERSION = 4
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "coordinators",
            CompactArray(
                ("key", CompactString("utf-8")),
                ("node_id", Int32),
                ("host", CompactString("utf-8")),
                ("port", Int32),
                ("error_code", Int16),
                ("error_message", CompactString("utf-8")),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class FindCoordinatorRequest_v4(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = 10
    API_VERSION = 4
    RESPONSE_TYPE = FindCoordinatorResponse_v4
    SCHEMA = Schema(
        ("key_type", Int8),
        ("coordinator_keys", CompactArray(CompactString("utf-8"))),
        ("tags", TaggedFields),
    )


class FindCoordinatorsRequest(Request[FindCoordinatorRequest_v4]):
    """The coordinators of many keys of one type at once."""

    API_KEY = 10

    def __init__(self, key_type: int, keys: Iterable[str]) -> None:
        self._key_type = key_type
        self._keys = sorted(set(keys))

    def build(self, request_struct_class: type[FindCoordinatorRequest_v4]) -> Any:
        return request_struct_class(self._key_type, self._keys, {})


class DescribeTransactionsResponse_v0(Response):
    API_KEY = 65
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "transaction_states",
            CompactArray(
                ("error_code", Int16),
                ("transactional_id", CompactString("utf-8")),
                ("transaction_state", CompactString("utf-8")),
                ("transaction_timeout_ms", Int32),
                ("transaction_start_time_ms", Int64),
                ("producer_id", Int64),
                ("producer_epoch", Int16),
                (
                    "topics",
                    CompactArray(
                        ("topic", CompactString("utf-8")),
                        ("partitions", CompactArray(Int32)),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class DescribeTransactionsRequest_v0(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = 65
    API_VERSION = 0
    RESPONSE_TYPE = DescribeTransactionsResponse_v0
    SCHEMA = Schema(
        ("transactional_ids", CompactArray(CompactString("utf-8"))),
        ("tags", TaggedFields),
    )


class DescribeTransactionsRequest(Request[DescribeTransactionsRequest_v0]):
    API_KEY = 65

    def __init__(self, transactional_ids: Iterable[str]) -> None:
        self._ids = sorted(set(transactional_ids))

    def build(self, request_struct_class: type[DescribeTransactionsRequest_v0]) -> Any:
        return request_struct_class(self._ids, {})


# --- asking -----------------------------------------------------------------------------


async def last_states(
    client: AIOKafkaClient, transactional_ids: Iterable[str], timeout_s: float
) -> dict[str, str]:
    """The state each transactional id's coordinator holds (`CompleteCommit`, `Ongoing`,
    ...); an id the coordinator does not know, or could not answer for within
    `timeout_s`, is left out.

    A coordinator still loading its transactions (after a broker restart, just when
    the answer matters), moving or not yet available is asked again, 100 ms later,
    until `timeout_s`: what was answered by then is returned. Raises when the broker
    lacks either request (aiokafka's `NotImplementedError` or
    `IncompatibleBrokerVersion`) and aiokafka's errors when a request fails.
    """
    pending = set(transactional_ids)
    found: dict[str, str] = {}
    deadline = asyncio.get_running_loop().time() + timeout_s
    while pending:
        retry = await _ask_once(client, sorted(pending), found)
        pending &= retry
        if not pending or asyncio.get_running_loop().time() + RETRY_S > deadline:
            break
        await asyncio.sleep(RETRY_S)
    return found


async def _ask_once(client: AIOKafkaClient, ids: list[str], found: dict[str, str]) -> set[str]:
    """One round of questions: the answers into `found`; the ids to ask again."""
    retry: set[str] = set()
    node = client.get_random_node()
    answer = await client.send(node, FindCoordinatorsRequest(CoordinationType.TRANSACTION, ids))
    by_node: dict[int, list[str]] = collections.defaultdict(list)
    for key, node_id, _host, _port, error_code, _message, _tags in answer.coordinators:
        if error_code == NO_ERROR:
            by_node[node_id].append(key)
        elif error_code in RETRIABLE_CODES:
            retry.add(key)
    answers = await asyncio.gather(
        *(
            client.send(node_id, DescribeTransactionsRequest(keys))
            for node_id, keys in by_node.items()
        )
    )
    for described in answers:
        for error_code, transactional_id, state, *_ in described.transaction_states:
            if error_code == NO_ERROR:
                found[transactional_id] = state
            elif error_code in RETRIABLE_CODES:
                retry.add(transactional_id)
    return retry


def outcome(state: str | None) -> bool | None:
    """What a last transaction in `state` became: True committed, False aborted (or to
    be aborted: a transaction still open is aborted when its producer is initialised
    again), None unknown."""
    if state in COMMITTED:
        return True
    if state in ABORTED:
        return False
    return None


async def add_group(producer: AIOKafkaProducer, group_id: str, timeout_s: float) -> None:
    """Add `group_id`'s offsets partition to the producer's open transaction, committing
    no offset (aiokafka adds a group only with offsets to commit)."""
    txn = producer._txn_manager  # reach: the producer's id, epoch and transaction
    assert txn is not None and txn.is_in_transaction()
    request = AddOffsetsToTxnRequest(
        txn.transactional_id, txn.producer_id, txn.producer_epoch, group_id
    )
    async with asyncio.timeout(timeout_s):
        while True:
            node = await producer.client.coordinator_lookup(
                CoordinationType.TRANSACTION, txn.transactional_id
            )
            answer = await producer.client.send(node, request)
            error = for_code(answer.error_code)
            if answer.error_code == NO_ERROR:
                txn.consumer_group_added(group_id)  # the commit then ends a non-empty one
                return
            if not issubclass(error, RETRIABLE):
                raise error()
            await asyncio.sleep(RETRY_S)
