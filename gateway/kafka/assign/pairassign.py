"""Which instance holds which pairs: co-partitioned, balanced and sticky.

Kafka's group protocol lets the group's leader decide the assignment. The unit it
hands out here is a pair: partition p of every topic of one owner (an agent's own
topics, or a group's), so events p and requests p always go together. Units are
spread so that the instances' counts differ by at most one, whatever the number of
owners (Kafka's range assignor gives partition p of every topic to one member, so a
fleet of one-partition agents lands on one instance). And they are sticky: each
instance says in its join which units it holds now, and keeps up to its share of
them; only what it must moves when an instance joins or leaves, and a pair that
stays needs no restore (`Assignment.revoke` keeps its state until the next
assignment).

Warm standbys: the leader also places `standby_replicas` standbys of each unit
(`standbys`: on the other members, never the unit's own; sticky, each member
keeping the replicas it has within an even share; the rest of each member's units
spread in turn over the members after it in sorted order, so that a member's death
leaves its units' replicas spread over the survivors) and sends each member its
standby units in the assignment's user data. A member reads their changelogs
(standby.py) and says in its join which units it keeps warm; a unit whose owner
left goes first to a member that keeps it warm, within the same balance.

`balance` is the decision, pure; `pair_assignor` is aiokafka's adapter (one class
per consumer: aiokafka calls an assignor's class methods, so the units an instance
holds live on its own class).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

import orjson
from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

log = logging.getLogger("gateway.assign")

NAME = "agui-pairs"
Unit = tuple[str, int]  # (owner, partition); a topic no owner claims: (topic, partition)
MAX_USER_DATA = 4 << 20  # a member's claims larger than this are not read (none kept)


def balance(
    units: Iterable[Unit],
    members: Iterable[str],
    claimed: Mapping[str, Iterable[Unit]],
    eligible: Callable[[str, Unit], bool] = lambda member, unit: True,
    warm: Mapping[str, Iterable[Unit]] | None = None,
) -> dict[str, list[Unit]]:
    """Every unit to one eligible member: counts within one of each other (when every
    member is eligible for every unit), each member keeping what it claims up to its
    share, then a unit no one kept to a member that keeps it `warm` (a standby) while
    its share allows, the rest to whoever holds fewest (ties: member order)."""
    order = sorted(members)
    pool = sorted(set(units))
    out: dict[str, list[Unit]] = {member: [] for member in order}
    if not order:
        return out
    base, extra = divmod(len(pool), len(order))
    exists, taken = set(pool), set()
    leftover: dict[str, list[Unit]] = {}
    for member in order:
        wanted = [
            u for u in dict.fromkeys(claimed.get(member, ())) if u in exists and eligible(member, u)
        ]
        mine = [u for u in wanted if u not in taken]
        out[member] = mine[:base]
        taken.update(out[member])
        leftover[member] = mine[base:]
    # the extra units of an uneven split go first to those that already hold one
    for member in sorted(order, key=lambda m: -len(leftover[m])):
        if extra == 0:
            break
        spare = [u for u in leftover[member] if u not in taken]
        if spare:
            out[member].append(spare[0])
            taken.add(spare[0])
            extra -= 1
    # a unit left without its owner: to a member keeping it warm, within its share
    warm_of: dict[Unit, list[str]] = {}
    for member in order:
        for unit in dict.fromkeys((warm or {}).get(member, ())):
            if unit in exists and unit not in taken and eligible(member, unit):
                warm_of.setdefault(unit, []).append(member)
    for unit in pool:
        for member in warm_of.get(unit, ()):
            if unit in taken:
                break
            held = len(out[member])
            if held < base or (held == base and extra > 0):
                if held == base:
                    extra -= 1
                out[member].append(unit)
                taken.add(unit)
    for unit in pool:
        if unit in taken:
            continue
        candidates = [m for m in order if eligible(m, unit)]
        if not candidates:
            log.warning("no member subscribes to every topic of %s partition %d", *unit)
            continue
        fewest = min(candidates, key=lambda m: len(out[m]))
        out[fewest].append(unit)
        taken.add(unit)
    return out


def standbys(
    chosen: Mapping[str, Iterable[Unit]],
    replicas: int,
    eligible: Callable[[str, Unit], bool] = lambda member, unit: True,
    warm: Mapping[str, Iterable[Unit]] | None = None,
) -> dict[str, list[Unit]]:
    """Each unit's standbys: up to `replicas` other members (never its owner, at most
    one fewer than the members), the members' counts within one of each other where
    the owners allow it.

    Sticky: a member that keeps a unit warm now (`warm`, from its join) keeps it, so an
    instance that joins or leaves moves only the standbys it must, and a replica kept
    is not read again from its changelog's beginning. The standbys still wanted are
    placed by rule: the r-th unit of the member at index i in sorted order goes to the
    members after i, starting r places on (wrapping), those below an even share first.
    With no warm units that spreads a member's units evenly over the others, so that
    each survivor of its death keeps a share of them warm. Last, while one member holds
    two more than another, one it placed last moves to the other."""
    order = sorted(chosen)
    out: dict[str, list[Unit]] = {member: [] for member in order}
    count = min(replicas, len(order) - 1)
    if count <= 0:
        return out
    owner = {unit: member for member in order for unit in chosen[member]}
    share = -(-len(owner) * count // len(order))  # each member's even share (ceil)
    holders: dict[Unit, list[str]] = {unit: [] for unit in owner}

    def can_hold(member: str, unit: Unit) -> bool:
        return owner[unit] != member and member not in holders[unit] and eligible(member, unit)

    def place(member: str, unit: Unit) -> None:
        out[member].append(unit)
        holders[unit].append(member)

    for member in order:
        for unit in sorted(set((warm or {}).get(member, ()))):
            if unit in owner and len(holders[unit]) < count and can_hold(member, unit):
                place(member, unit)
    for i, member in enumerate(order):
        others = order[i + 1 :] + order[:i]
        for rank, unit in enumerate(sorted(chosen[member])):
            for anyone in (False, True):  # those below their share first
                for step in range(len(others)):
                    if len(holders[unit]) >= count:  # kept where it was, or placed
                        break
                    candidate = others[(rank + step) % len(others)]
                    if (anyone or len(out[candidate]) < share) and can_hold(candidate, unit):
                        place(candidate, unit)
    _even_out(order, out, holders, can_hold)
    return {member: sorted(held) for member, held in out.items()}


def _even_out(
    order: list[str],
    out: dict[str, list[Unit]],
    holders: dict[Unit, list[str]],
    can_hold: Callable[[str, Unit], bool],
) -> None:
    """Move standbys from the member holding most to those holding fewest, the last
    placed first, while they differ by two or more and one can move (each move lowers
    the sum of the counts' squares: it ends)."""
    while True:
        most = max(order, key=lambda m: len(out[m]))
        for least in sorted(order, key=lambda m: len(out[m])):
            if len(out[most]) - len(out[least]) <= 1:
                return
            held = out[most]
            at = next((i for i in range(len(held) - 1, -1, -1) if can_hold(least, held[i])), None)
            if at is not None:
                unit = held.pop(at)
                holders[unit].remove(most)
                out[least].append(unit)
                holders[unit].append(least)
                break
        else:
            return


def encode_claims(units: Iterable[Unit], warm: Iterable[Unit] = ()) -> bytes:
    """A member's join: the units it holds, and those it keeps warm."""
    return orjson.dumps(
        {
            "held": sorted({(owner, partition) for owner, partition in units}),
            "warm": sorted({(owner, partition) for owner, partition in warm}),
        }
    )


def decode_claims(data: bytes | None) -> list[Unit]:
    """The units a member says it holds; anything unreadable claims nothing."""
    return _units(_read(data), "held")


def decode_warm(data: bytes | None) -> list[Unit]:
    """The units a member says it keeps warm (none from a member before standbys)."""
    return _units(_read(data), "warm")


def encode_standbys(units: Iterable[Unit]) -> bytes:
    """An assignment's user data: the member's standby units."""
    return orjson.dumps({"standby": sorted({(owner, partition) for owner, partition in units})})


def decode_standbys(data: bytes | None) -> list[Unit]:
    """The standby units an assignment names (none from a leader before standbys)."""
    return _units(_read(data), "standby")


def _read(data: bytes | None) -> object:
    if not data or len(data) > MAX_USER_DATA:
        return None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def _units(value: object, field: str) -> list[Unit]:
    """A list of units under `field` of a JSON object (a bare list: a member before
    standbys, which sent only what it holds)."""
    if isinstance(value, list):
        value = {"held": value}
    if not isinstance(value, dict):
        return []
    value = value.get(field)
    if not isinstance(value, list):
        return []
    return [
        (item[0], item[1])
        for item in value
        if isinstance(item, list)
        and len(item) == 2
        and isinstance(item[0], str)
        and type(item[1]) is int
    ]


def pair_assignor(
    owner_of: Callable[[str], str | None], standby_replicas: int = 0
) -> type[AbstractPartitionAssignor]:
    """An assignor class for one consumer; `owner_of(topic)` names the topic's owner
    (agent or group), None for a topic of no owner. As the group's leader it places
    `standby_replicas` standbys of each unit (its own setting counts)."""

    def unit_of(topic: str, partition: int) -> Unit:
        owner = owner_of(topic)
        return (owner if owner is not None else f"topic:{topic}", partition)

    class PairAssignor(AbstractPartitionAssignor):
        name = NAME
        version = 0
        held: list[Unit] = []  # this instance's units as of its latest assignment
        standby: list[Unit] = []  # the units it keeps warm, as of its latest assignment

        @classmethod
        def assign(
            cls,
            cluster: ClusterMetadata,
            members: Mapping[str, ConsumerProtocolMemberMetadata],
        ) -> dict[str, ConsumerProtocolMemberAssignment]:
            topics_of: dict[Unit, set[str]] = {}
            for topic in sorted({t for m in members.values() for t in m.subscription}):
                partitions = cluster.partitions_for_topic(topic)
                if partitions is None:
                    log.warning("no partition metadata for topic %s", topic)
                    continue
                for partition in partitions:
                    topics_of.setdefault(unit_of(topic, partition), set()).add(topic)
            subscribed = {member: set(m.subscription) for member, m in members.items()}

            def eligible(member: str, unit: Unit) -> bool:
                return topics_of[unit] <= subscribed[member]

            kept_warm = {member: decode_warm(m.user_data) for member, m in members.items()}
            chosen = balance(
                topics_of,
                members,
                {member: decode_claims(m.user_data) for member, m in members.items()},
                eligible,
                kept_warm,
            )
            warm = standbys(chosen, standby_replicas, eligible, kept_warm)
            result = {}
            for member, units in chosen.items():
                by_topic: dict[str, list[int]] = {}
                for unit in units:
                    for topic in topics_of[unit]:
                        by_topic.setdefault(topic, []).append(unit[1])
                result[member] = ConsumerProtocolMemberAssignment(
                    cls.version,
                    sorted((t, sorted(p)) for t, p in by_topic.items()),
                    encode_standbys(warm[member]),
                )
            return result

        @classmethod
        def metadata(cls, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
            return ConsumerProtocolMemberMetadata(
                cls.version, list(topics), encode_claims(cls.held, cls.standby)
            )

        @classmethod
        def on_assignment(cls, assignment: ConsumerProtocolMemberAssignment) -> None:
            cls.held = sorted(
                {unit_of(topic, p) for topic, parts in assignment.assignment for p in parts}
            )
            cls.standby = decode_standbys(assignment.user_data)

    return PairAssignor
