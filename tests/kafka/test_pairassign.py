"""The pair assignor: co-partitioned, balanced, sticky (pure, then as aiokafka runs it)."""

from __future__ import annotations

import orjson
import pytest
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.kafka.assign.pairassign import (
    balance,
    decode_claims,
    decode_standbys,
    decode_warm,
    encode_claims,
    encode_standbys,
    pair_assignor,
    standbys,
)
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


# --- warm standbys ---------------------------------------------------------------------------


def test_standbys_never_on_the_owner_and_a_members_units_spread_over_the_others():
    chosen = balance(units(30), ["a", "b", "c", "d"], {})
    warm = standbys(chosen, 1)
    for member, held in warm.items():
        assert not set(held) & set(chosen[member])  # never a standby of its own pair
    assert sorted(u for v in warm.values() for u in v) == sorted(units(30))  # one each
    for owner, owned in chosen.items():
        # the owner's units are kept warm by each of the others, evenly
        per = [len(set(owned) & set(warm[m])) for m in warm if m != owner]
        assert max(per) - min(per) <= 1, (owner, per)


def test_standbys_are_at_most_one_fewer_than_the_members():
    chosen = balance(units(6), ["a", "b"], {})
    assert sum(len(v) for v in standbys(chosen, 3).values()) == 6  # one each: b for a's
    alone = balance(units(6), ["a"], {})
    assert standbys(alone, 1) == {"a": []}
    three = balance(units(6), ["a", "b", "c"], {})
    warm = standbys(three, 2)
    for unit in units(6):
        holders = [m for m, v in warm.items() if unit in v]
        assert len(holders) == 2 and not [m for m in holders if unit in three[m]]
    assert standbys(three, 0) == {"a": [], "b": [], "c": []}


def test_a_dead_members_units_go_first_to_those_that_keep_them_warm():
    members = ["a", "b", "c"]
    first = balance(units(12), members, {})
    warm = standbys(first, 1)
    survivors = ["a", "c"]
    second = balance(units(12), survivors, first, warm=warm)
    assert spread(second) <= 1
    for member in survivors:
        assert set(first[member]) <= set(second[member])  # sticky
    # every unit of b's went to the survivor that kept it warm
    for unit in first["b"]:
        assert [m for m in survivors if unit in second[m]] == [
            m for m in survivors if unit in warm[m]
        ]


def test_an_instance_added_moves_only_the_standbys_it_must():
    members = ["a", "b", "c"]
    first = balance(units(12), members, {})
    warm = standbys(first, 1)
    second = balance(units(12), [*members, "d"], first, warm=warm)
    again = standbys(second, 1, warm=warm)
    assert sorted(len(v) for v in again.values()) == [3, 3, 3, 3]
    kept = sum(len(set(again[m]) & set(warm[m])) for m in members)
    assert kept == 9  # each of the three keeps its share; only d's three are new
    for member, held in again.items():
        assert not set(held) & set(second[member])


@given(
    st.integers(0, 40),
    st.integers(1, 6),
    st.integers(1, 3),
    st.randoms(use_true_random=False),
)
@settings(max_examples=300, deadline=None)
def test_warm_claims_keep_the_balance_and_sticky_standbys_stay_complete_and_even(
    owners, before, replicas, rnd
):
    pool = units(owners, 2)
    old_members = [f"m{i}" for i in range(before)]
    first = balance(pool, old_members, {})
    warm = standbys(first, replicas)
    # a rebalance that changes nothing moves no standby
    assert standbys(first, replicas, warm=warm) == warm
    survivors = [m for m in old_members if rnd.random() < 0.6]
    members = survivors + (["new"] if rnd.random() < 0.7 or not survivors else [])
    second = balance(pool, members, {m: first[m] for m in survivors}, warm=warm)
    assert sorted(u for v in second.values() for u in v) == sorted(pool)
    assert spread(second) <= 1
    again = standbys(second, replicas, warm={m: warm[m] for m in survivors})
    count = min(replicas, len(members) - 1)
    owner = {u: m for m, held in second.items() for u in held}
    for unit in pool:
        holders = [m for m, held in again.items() if unit in held]
        assert len(holders) == len(set(holders)) == max(count, 0)
        assert owner[unit] not in holders
    share = -(-len(pool) * max(count, 0) // len(members))
    sizes = [len(v) for v in again.values()]
    assert max(sizes) - min(sizes) <= 1, again
    for member in survivors:  # what a survivor kept warm and may still keep, it keeps
        still = [u for u in warm[member] if owner[u] != member]
        kept = set(again[member]) & set(still)
        assert len(kept) >= min(len(still), share) - count, (member, warm, again)


def test_claims_carry_warm_units_and_a_member_before_standbys_is_still_read():
    data = encode_claims([("a", 0)], [("b", 1)])
    assert decode_claims(data) == [("a", 0)] and decode_warm(data) == [("b", 1)]
    old = orjson.dumps([["a", 0]])  # a member before standbys: only what it holds
    assert decode_claims(old) == [("a", 0)] and decode_warm(old) == []
    assert decode_standbys(encode_standbys([("c", 2)])) == [("c", 2)]
    for junk in (b"", b"{", b"[1]", b'{"standby": 3}', b'{"standby": [["x", "1"]]}'):
        assert decode_standbys(junk) == [] and decode_warm(junk) == []


def test_the_leader_sends_each_member_its_standbys_in_the_assignment():
    names = TopicNames(Settings())
    assignor = pair_assignor(names.owner_of_topic, standby_replicas=1)
    topics = [t for a in ("x", "y") for t in (f"agui.{a}.events", f"agui.{a}.requests")]
    cluster = _Cluster(dict.fromkeys(topics, 2))
    members = {
        m: ConsumerProtocolMemberMetadata(0, topics, encode_claims([])) for m in ("m1", "m2")
    }
    out = assignor.assign(cluster, members)  # type: ignore[arg-type]
    held = {
        m: {(names.owner_of_topic(t), p) for t, ps in a.assignment for p in ps}
        for m, a in out.items()
    }
    warm = {m: set(decode_standbys(a.user_data)) for m, a in out.items()}
    assert warm["m1"] == held["m2"] and warm["m2"] == held["m1"] and len(held["m1"]) == 2
    assignor.on_assignment(out["m1"])
    assert set(assignor.standby) == held["m2"]
    assert decode_warm(assignor.metadata(topics).user_data) == sorted(held["m2"])
