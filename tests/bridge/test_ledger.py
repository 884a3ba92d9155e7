"""Per-partition bookkeeping: thread order, the committable offset, the marker."""

from __future__ import annotations

import pytest

from gateway.bridge.ledger import (
    MarkerState,
    PartitionLedger,
    RunRequest,
    StartedRun,
    decode_marker,
    encode_marker,
)


def req(
    offset: int, thread: bytes = b"t1", cid: str | None = None, agent: str | None = None
) -> RunRequest:
    return RunRequest(offset, thread, b"{}", cid, agent)


def test_threads_queue_in_offset_order() -> None:
    ledger = PartitionLedger(MarkerState(0))
    a, b, c = req(0, b"t1"), req(1, b"t2"), req(2, b"t1")
    assert all(ledger.accept(r) for r in (a, b, c))
    assert ledger.next_of((None, b"t1")) is a
    ledger.end(0)
    assert ledger.next_of((None, b"t1")) is c
    assert ledger.next_of((None, b"t2")) is b


def test_two_agents_of_a_group_on_one_thread_id_have_threads_of_their_own() -> None:
    ledger = PartitionLedger(MarkerState(0))
    a1, b1, a2 = (
        req(0, b"t", agent="alpha"),
        req(1, b"t", agent="beta"),
        req(2, b"t", agent="alpha"),
    )
    assert all(ledger.accept(r) for r in (a1, b1, a2))
    assert ledger.next_of(("alpha", b"t")) is a1
    assert ledger.next_of(("beta", b"t")) is b1  # does not wait for alpha's run
    ledger.end(1)
    assert ledger.next_of(("beta", b"t")) is None
    assert ledger.next_of(("alpha", b"t")) is a1
    ledger.end(0)
    assert ledger.next_of(("alpha", b"t")) is a2


def test_a_started_run_keeps_its_agent_through_the_marker() -> None:
    ledger = PartitionLedger(MarkerState(0))
    ledger.accept(req(0, b"t", "c-1", "alpha"))
    ledger.start(req(0, b"t", "c-1", "alpha"))
    restored = decode_marker(encode_marker(3, ledger.marker()))
    assert restored.started[0].agent == "alpha"
    # a marker written before groups (no agent member) reads as the topic's own agent's
    old = b'{"v":1,"partition":0,"next":0,"started":[{"offset":0,"thread":"t","threadHex":"74","correlationId":null}],"ended":[]}'
    assert decode_marker(old).started[0].agent is None


def test_committable_is_the_first_request_not_ended() -> None:
    ledger = PartitionLedger(MarkerState(5))
    for r in (req(5, b"a"), req(6, b"b"), req(7, b"c")):
        ledger.accept(r)
    ledger.end(6)
    ledger.end(7)
    assert ledger.committable() == 5  # offset 5's run has not ended
    marker = ledger.marker()
    assert marker.next == 5 and marker.ended == {6, 7}
    ledger.end(5)
    marker = ledger.marker()
    assert marker.next == 8 and marker.ended == set()


def test_restored_ended_requests_are_skipped_and_started_ones_stay_until_closed() -> None:
    restored = MarkerState(10, {10: StartedRun(10, b"t", "c-1")}, {11})
    ledger = PartitionLedger(restored)
    assert ledger.committable() == 10
    ledger.end(10)  # closed as bridge_restarted
    assert not ledger.accept(req(10))  # re-consumed: already ended
    assert not ledger.accept(req(11))
    assert ledger.accept(req(12))
    assert ledger.committable() == 12


def test_a_request_consumed_twice_is_accepted_once() -> None:
    ledger = PartitionLedger(MarkerState(0))
    assert ledger.accept(req(0))
    assert not ledger.accept(req(0))


def test_marker_round_trip_keeps_binary_thread_keys() -> None:
    state = MarkerState(3, {4: StartedRun(4, b"\xff\x00t", "corr")}, {5, 6})
    back = decode_marker(encode_marker(2, state))
    assert back.next == 3
    assert back.started[4].key == b"\xff\x00t"
    assert back.started[4].correlation_id == "corr"
    assert back.ended == {5, 6}


@pytest.mark.parametrize("value", [b"", b"[]", b'{"v": 99}', b'{"v": 1, "next": 0}'])
def test_unreadable_marker_is_refused(value: bytes) -> None:
    with pytest.raises(ValueError):
        decode_marker(value)
