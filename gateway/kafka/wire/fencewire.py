"""The wire formats of KIP-447's two requests, which aiokafka 0.14 does not send.

`TxnOffsetCommit` v3 carries the group's generation, member id and group
instance id; `OffsetFetch` v7 carries `require_stable`. Both are flexible
versions, built from aiokafka's own types (`CompactString`, `CompactArray`,
`TaggedFields`, `RequestStruct.FLEXIBLE_VERSION`). `prepare` picks the one
version spoken, or says plainly that the broker lacks it. Why they are needed
is `groupfence`'s docstring.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import IncompatibleBrokerVersion
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)

NO_LEADER_EPOCH = -1


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    """What a member's offsets are committed under (Kafka's ConsumerGroupMetadata)."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


# --- protocol: TxnOffsetCommit v3, OffsetFetch v7 (flexible versions) ---------------


class TxnOffsetCommitResponse_v3(Response):
    API_KEY = 28
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                (
                    "partitions",
                    CompactArray(
                        ("partition_index", Int32),
                        ("error_code", Int16),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class TxnOffsetCommitRequest_v3(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = 28
    API_VERSION = 3
    RESPONSE_TYPE = TxnOffsetCommitResponse_v3
    SCHEMA = Schema(
        ("transactional_id", CompactString("utf-8")),
        ("group_id", CompactString("utf-8")),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("generation_id", Int32),
        ("member_id", CompactString("utf-8")),
        ("group_instance_id", CompactString("utf-8")),
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                (
                    "partitions",
                    CompactArray(
                        ("partition_index", Int32),
                        ("committed_offset", Int64),
                        ("committed_leader_epoch", Int32),
                        ("committed_metadata", CompactString("utf-8")),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class TxnOffsetCommitRequestV3(Request[TxnOffsetCommitRequest_v3]):
    """TxnOffsetCommit carrying the group's generation, member id and instance id."""

    API_KEY = 28

    def __init__(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group: GroupMetadata,
        offsets: Mapping[TopicPartition, tuple[int, str]],
    ) -> None:
        self._fields = (transactional_id, producer_id, producer_epoch, group, offsets)

    def build(self, request_struct_class: type[TxnOffsetCommitRequest_v3]) -> Any:
        transactional_id, producer_id, producer_epoch, group, offsets = self._fields
        by_topic: dict[str, list[tuple[int, int, int, str, dict[int, bytes]]]]
        by_topic = collections.defaultdict(list)
        for tp, (offset, metadata) in sorted(offsets.items()):
            by_topic[tp.topic].append((tp.partition, offset, NO_LEADER_EPOCH, metadata, {}))
        return request_struct_class(
            transactional_id,
            group.group_id,
            producer_id,
            producer_epoch,
            group.generation_id,
            group.member_id,
            group.group_instance_id,
            [(topic, parts, {}) for topic, parts in by_topic.items()],
            {},
        )


class OffsetFetchResponse_v7(Response):
    API_KEY = 9
    API_VERSION = 7
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                (
                    "partitions",
                    CompactArray(
                        ("partition_index", Int32),
                        ("committed_offset", Int64),
                        ("committed_leader_epoch", Int32),
                        ("metadata", CompactString("utf-8")),
                        ("error_code", Int16),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("error_code", Int16),
        ("tags", TaggedFields),
    )


class OffsetFetchRequest_v7(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = 9
    API_VERSION = 7
    RESPONSE_TYPE = OffsetFetchResponse_v7
    SCHEMA = Schema(
        ("group_id", CompactString("utf-8")),
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                ("partition_indexes", CompactArray(Int32)),
                ("tags", TaggedFields),
            ),
        ),
        ("require_stable", Boolean),
        ("tags", TaggedFields),
    )


class OffsetFetchStableRequest(Request[OffsetFetchRequest_v7]):
    """OffsetFetch with `require_stable`: pending transactional offsets are an error."""

    API_KEY = 9

    def __init__(self, group_id: str, partitions: Iterable[TopicPartition]) -> None:
        self._group_id = group_id
        self._partitions = sorted(set(partitions))

    def build(self, request_struct_class: type[OffsetFetchRequest_v7]) -> Any:
        by_topic: dict[str, list[int]] = collections.defaultdict(list)
        for tp in self._partitions:
            by_topic[tp.topic].append(tp.partition)
        topics: list[tuple[str, list[int], dict[int, bytes]]] = [
            (topic, parts, {}) for topic, parts in by_topic.items()
        ]
        return request_struct_class(self._group_id, topics, True, {})


def prepare(request: Request[Any], versions: dict[int, tuple[int, int]]) -> Any:
    """Pick the one version we speak, or say plainly that the broker lacks it."""
    try:
        return request.prepare(versions)
    except NotImplementedError:
        low, high = versions.get(request.API_KEY, (None, None))
        wanted = request._CLASSES[0].API_VERSION
        raise IncompatibleBrokerVersion(
            f"{type(request).__name__} needs API {request.API_KEY} version {wanted} "
            f"(KIP-447); the broker offers {low}..{high}"
        ) from None
