"""The faster murmur2 and partitioner put every keyed record where aiokafka's default
partitioner (Kafka's Java client) puts it."""

from __future__ import annotations

import random

from aiokafka.partitioner import DefaultPartitioner
from aiokafka.partitioner import murmur2 as reference

from gateway.kafka.wire.partitioning import Partitioner, murmur2


def test_murmur2_is_the_clients_hash_for_keys_of_every_length_and_byte() -> None:
    rng = random.Random(25)
    keys = [bytes(rng.randrange(256) for _ in range(n)) for n in range(300) for _ in range(8)]
    keys += [b"", b"\xff" * 37, b"\x00" * 5, "thread-é-🙂".encode()]
    for key in keys:
        assert murmur2(key) == reference(key), key


def test_partitioner_chooses_the_default_partitioners_partition() -> None:
    rng = random.Random(26)
    default = DefaultPartitioner()
    ours = Partitioner()
    for n in (1, 2, 3, 4, 7, 50):
        every = list(range(n))
        for _ in range(200):
            key = rng.randbytes(rng.randrange(1, 60))
            assert ours(key, every, every) == default(key, every, every)
            assert ours(key, every, every) == default(key, every, every)  # remembered


def test_a_record_without_a_key_goes_to_an_available_partition() -> None:
    ours = Partitioner()
    assert {ours(None, [0, 1, 2], [1]) for _ in range(20)} == {1}
    assert {ours(None, [0, 1, 2], []) for _ in range(50)} <= {0, 1, 2}
