"""The pair assignor: co-partitioned, balanced, sticky (pure, then as aiokafka runs it)."""

from __future__ import annotations

import pytest
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.kafka.assign.pairassign import balance, decode_claims, encode_claims, pair_assignor
from gateway.kafka.wire.topics import TopicNames
from gateway.settings import Settings


def units(owners: int, partitions: int = 1) -> list[tuple[str, int]]:
    return [(f"agent-{o}", p) for o in range(owners) for p in range(partitions)]


def spread(out: dict[str, list]) -> int:
    counts = [len(v) for v in out.values()]
    return max(counts) - min(counts)


def test_one_partition_agents_spread_over_every_instance():
    out = balance(units(200), ["a", "b", "c"], {})
    assert sorted(len(v) for v in out.values()) == [66, 67, 67]
    assert sorted(u for v in out.values() for u in v) == sorted(units(200))


@given(
    st.integers(0, 60),
    st.integers(1, 4),
    st.integers(1, 7),
    st.integers(0, 6),
    st.randoms(use_true_random=False),
)
@settings(max_examples=200, deadline=None)
def test_balanced_complete_and_sticky(owners, partitions, before, after, rnd):
    pool = units(owners, partitions)
    old_members = [f"m{i}" for i in range(before)]
    first = balance(pool, old_members, {})
    assert spread(first) <= 1
    # some leave, some join: each survivor claims what it held
    survivors = [m for m in old_members if rnd.random() < 0.7]
    members = survivors + [f"n{i}" for i in range(after)]
    if not members:
        return
    second = balance(pool, members, {m: first[m] for m in survivors})
    assigned = [u for v in second.values() for u in v]
    assert sorted(assigned) == sorted(pool)  # every unit once
    assert spread(second) <= 1
    # sticky: a survivor loses only what its new share cannot hold
    share = -(-len(pool) // len(members))  # ceil
    for m in survivors:
        kept = set(first[m]) & set(second[m])
        assert len(kept) >= min(len(first[m]), len(pool) // len(members)), (m, kept)
        assert len(second[m]) <= share


def test_claims_of_others_and_of_gone_units_are_ignored():
    pool = units(4)
    out = balance(
        pool,
        ["a", "b"],
        {"a": [("agent-0", 0), ("agent-1", 0), ("gone", 0)], "b": [("agent-0", 0)]},
    )
    assert out["a"] == [("agent-0", 0), ("agent-1", 0)]
    assert sorted(out["b"]) == [("agent-2", 0), ("agent-3", 0)]


def test_an_ineligible_member_gets_nothing_it_does_not_subscribe_to():
    out = balance(units(6), ["a", "b"], {}, lambda m, u: m == "a" or u[0] != "agent-0")
    assert ("agent-0", 0) in out["a"]


@pytest.mark.parametrize("data", [None, b"", b"{", b"[1, 2]", b'[["a", "1"]]', b'"x"'])
def test_unreadable_claims_claim_nothing(data):
    assert decode_claims(data) == []


def test_claims_round_trip():
    assert decode_claims(encode_claims([("b", 2), ("a", 1), ("a", 1)])) == [("a", 1), ("b", 2)]


class _Cluster:
    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = topics

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        n = self.topics.get(topic)
        return None if n is None else set(range(n))


def test_the_aiokafka_assignor_keeps_events_and_requests_of_a_partition_together():
    names = TopicNames(Settings())
    assignor = pair_assignor(names.owner_of_topic)
    topics = {f"agui.a{i}.{side}": 1 for i in range(5) for side in ("events", "requests")}
    topics |= {f"agui.team.{side}": 4 for side in ("events", "requests")}
    members = {m: ConsumerProtocolMemberMetadata(0, sorted(topics), b"") for m in ("x", "y", "z")}
    result = assignor.assign(_Cluster(topics), members)
    held: dict[str, set[tuple[str, int]]] = {}
    for member, assignment in result.items():
        for topic, partitions in assignment.assignment:
            held.setdefault(member, set()).update((topic, p) for p in partitions)
    for member, tps in held.items():  # co-partitioned: both sides of each pair together
        for topic, p in tps:
            if topic.endswith(".events"):
                twin = topic.replace(".events", ".requests")
            else:
                twin = topic.replace(".requests", ".events")
            assert (twin, p) in tps, (member, topic, p)
    assert sorted(len(t) // 2 for t in held.values()) == [3, 3, 3]  # 9 pairs, 3 each
    # sticky through the metadata a member sends with its next join
    assignor.on_assignment(result["x"])
    claims = decode_claims(assignor.metadata(sorted(topics)).user_data)
    assert claims == sorted({(names.owner_of_topic(t), p) for t, p in held["x"]})
    assert isinstance(result["x"], ConsumerProtocolMemberAssignment)


def test_a_static_member_rebalanced_over_and_over_says_its_name_may_be_shared(caplog):
    from gateway.kafka.runner import FLAPPING_ASSIGNMENTS, _Listener

    static = _Listener(None, None, "gw-1")  # type: ignore[arg-type]
    dynamic = _Listener(None, None, None)  # type: ignore[arg-type]
    with caplog.at_level("ERROR", logger="gateway.runner"):
        for n in range(3 * FLAPPING_ASSIGNMENTS):
            static._flapping(float(n))
            dynamic._flapping(float(n))
    clashes = [r for r in caplog.records if "same instance_name" in r.getMessage()]
    assert len(clashes) == 1 and "'gw-1'" in clashes[0].getMessage()  # once per window
    caplog.clear()
    slow = _Listener(None, None, "gw-1")  # type: ignore[arg-type]
    with caplog.at_level("ERROR", logger="gateway.runner"):
        for n in range(3 * FLAPPING_ASSIGNMENTS):
            slow._flapping(n * 10.0)  # one a 10 s: an ordinary fleet's rebalances
    assert not caplog.records
