"""A replica's reading of changelog records: the hints read in place agree with a decode.

`Replica.apply` reads the two hint headers the gateway writes in place and anything
else through `changelog.read_hints` or a decode of the value; whichever way a record
comes, the replica keeps the same threads, active runs and open interrupts.
"""

from __future__ import annotations

from aiokafka.structs import ConsumerRecord

from gateway.codec import changelog
from gateway.core import InterruptRecord, RunStatus, ThreadState
from gateway.kafka.assign.replica import Replica


def state(thread: str, status: RunStatus, interrupts: int = 0) -> ThreadState:
    return ThreadState(
        thread,
        status,
        run_id=f"r-{thread}",
        interrupts=tuple(InterruptRecord(f"i{n}", f"r-{thread}") for n in range(interrupts)),
        updated_ms=1,
    )


def record(offset: int, key: str, value: ThreadState | None, headers: list) -> ConsumerRecord:
    encoded = None if value is None else changelog.encode(value)
    return ConsumerRecord("c", 0, offset, 0, 0, key.encode(), encoded, None, 0, 0, headers)


STATES = [
    state("a", RunStatus.ACTIVE),
    state("b", RunStatus.INTERRUPTED, 3),
    state("c", RunStatus.SUCCEEDED),
    state("d", RunStatus.INTERRUPTED, 12),
    state("e", RunStatus.ACTIVE, 1),
]


def held(replica: Replica) -> tuple[dict, set[str], dict[str, int], int | None, int]:
    store = replica.store
    return (
        {t: store.get(t) for t in store.ids()},
        replica.active,
        replica.open,
        replica.position,
        replica.records,
    )


def test_hints_in_any_form_give_what_a_decode_gives() -> None:
    written = [record(n, s.thread_id, s, changelog.hints(s)) for n, s in enumerate(STATES)]
    reordered = [
        record(n, s.thread_id, s, list(reversed(changelog.hints(s)))) for n, s in enumerate(STATES)
    ]
    bare = [record(n, s.thread_id, s, []) for n, s in enumerate(STATES)]
    junk = [
        record(n, s.thread_id, s, [("agui-status", b"active"), ("agui-open", count)])
        for n, s in enumerate(STATES)
        for count in (b"-1x", None, b"")  # a header may have no value at all
    ]
    seen = []
    for records in (written, reordered, bare):
        replica = Replica()
        replica.apply(records)
        seen.append(held(replica))
    assert seen[0] == seen[1] == seen[2]
    assert seen[0][1] == {"a", "e"} and seen[0][2] == {"b": 3, "d": 12, "e": 1}
    unreadable = Replica()
    unreadable.apply(junk)  # hints not believed: the values decide
    assert held(unreadable)[:3] == seen[0][:3]
    no_headers = Replica()
    no_headers.apply([record(n, s.thread_id, s, None) for n, s in enumerate(STATES)])
    assert held(no_headers) == seen[0]


def test_tombstones_keyless_records_and_a_seek_back_are_applied_once() -> None:
    replica = Replica()
    first = [record(n, s.thread_id, s, changelog.hints(s)) for n, s in enumerate(STATES)]
    replica.apply(iter(first))  # any iterable
    later = [
        record(5, "b", None, []),
        ConsumerRecord("c", 0, 6, 0, 0, None, b"x", None, 0, 0, []),
        record(
            7,
            "a",
            state("a", RunStatus.SUCCEEDED),
            changelog.hints(state("a", RunStatus.SUCCEEDED)),
        ),
    ]
    replica.apply(first[3:] + later)  # a read from before the replica's position
    assert replica.records == 8 and replica.position == 8
    assert sorted(replica.store.ids()) == ["a", "c", "d", "e"]
    assert replica.active == {"e"} and replica.open == {"d": 12, "e": 1}
    replica.apply([])
    assert replica.position == 8
