"""The wire formats of KIP-447's requests: built, encoded and refused plainly."""

from __future__ import annotations

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import IncompatibleBrokerVersion

from gateway.kafka.wire import fencewire
from gateway.kafka.wire.fencewire import GroupMetadata


def test_a_broker_without_the_kip447_versions_is_named_plainly() -> None:
    group = GroupMetadata("g", 3, "member-1")
    request = fencewire.TxnOffsetCommitRequestV3("txn", 7, 0, group, {})
    with pytest.raises(IncompatibleBrokerVersion, match=r"API 28 version 3 \(KIP-447\).*0\.\.2"):
        fencewire.prepare(request, {28: (0, 2)})
    fetch = fencewire.OffsetFetchStableRequest("g", [TopicPartition("t", 0)])
    with pytest.raises(IncompatibleBrokerVersion, match=r"API 9 version 7.*1\.\.6"):
        fencewire.prepare(fetch, {9: (1, 6)})


def test_the_v3_request_carries_the_group_fence() -> None:
    group = GroupMetadata("g", 3, "member-1", "instance-a")
    offsets = {TopicPartition("t", 1): (42, ""), TopicPartition("t", 0): (7, "m")}
    request = fencewire.TxnOffsetCommitRequestV3("txn", 9, 2, group, offsets)
    struct = fencewire.prepare(request, {28: (0, 6)})
    assert struct.API_VERSION == 3 and struct.FLEXIBLE_VERSION
    decoded = fencewire.TxnOffsetCommitRequest_v3.decode(struct.encode())
    assert decoded.to_object() == {
        "transactional_id": "txn",
        "group_id": "g",
        "producer_id": 9,
        "producer_epoch": 2,
        "generation_id": 3,
        "member_id": "member-1",
        "group_instance_id": "instance-a",
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": 7,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "m",
                        "tags": {},
                    },
                    {
                        "partition_index": 1,
                        "committed_offset": 42,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                        "tags": {},
                    },
                ],
                "tags": {},
            }
        ],
        "tags": {},
    }
