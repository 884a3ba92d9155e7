"""BrokerWatch: readiness from a probe's answers (a stand-in probe and clock: the real
broker's side is in tests/integration/test_broker_gone.py)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiokafka.errors import KafkaConnectionError

from gateway.kafka.wire.brokerwatch import BrokerWatch


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Probe:
    """Answers, fails or hangs, as the test says."""

    def __init__(self) -> None:
        self.mode = "answer"
        self.calls = 0

    async def __call__(self) -> None:
        self.calls += 1
        if self.mode == "fail":
            raise KafkaConnectionError("Unable to connect to 127.0.0.1:1")
        if self.mode == "hang":
            await asyncio.sleep(3600)


def watch(probe: Probe, clock: Clock, after: float = 10.0) -> BrokerWatch:
    return BrokerWatch(probe, after, clock=clock, wall_clock=lambda: 1_800_000_000.0)


async def test_a_broker_that_answers_is_reachable() -> None:
    clock, probe = Clock(), Probe()
    w = watch(probe, clock)
    assert await w.check()
    clock.now += 60
    assert await w.check()
    assert w.state() == (True, "reachable")


async def test_failures_shorter_than_the_limit_keep_it_reachable() -> None:
    clock, probe = Clock(), Probe()
    w = watch(probe, clock)
    probe.mode = "fail"
    clock.now += 9.9
    assert not await w.check()
    assert w.state() == (True, "reachable")


async def test_no_answer_for_the_limit_turns_it_unreachable_with_since_and_why(caplog) -> None:
    clock, probe = Clock(), Probe()
    w = watch(probe, clock)
    probe.mode = "fail"
    caplog.set_level(logging.INFO, logger="gateway.kafka.broker")
    for _ in range(5):
        clock.now += 4
        await w.check()
    ok, line = w.state()
    assert not ok
    assert line.startswith("unreachable: no answer since 2027-01-15T08:00:00.000+00:00 (20 s)")
    assert "KafkaConnectionError: Unable to connect to 127.0.0.1:1" in line
    lost = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(lost) == 1, "the loss is logged once, not per probe"
    assert "kafka broker unreachable" in lost[0].getMessage()
    probe.mode = "answer"
    clock.now += 1
    assert await w.check()
    assert w.state() == (True, "reachable")
    back = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert back == ["kafka broker reachable again after 21 s"]


async def test_a_probe_that_hangs_is_cut_and_counts_as_no_answer() -> None:
    clock, probe = Clock(), Probe()
    w = watch(probe, clock, after=0.2)
    probe.mode = "hang"
    clock.now += 1
    assert not await asyncio.wait_for(w.check(), timeout=30)
    ok, line = w.state()
    assert not ok
    assert "no answer within 0.1 s" in line


async def test_the_background_loop_probes_until_stopped() -> None:
    probe = Probe()
    w = BrokerWatch(probe, 0.5)  # probes every 0.1 s
    w.start()
    while probe.calls < 3:
        await asyncio.sleep(0.05)
    await w.stop()
    calls = probe.calls
    await asyncio.sleep(0.3)
    assert probe.calls == calls
    assert w.state() == (True, "reachable")


@pytest.mark.parametrize(("after", "interval"), [(10.0, 2.0), (1.0, 0.2), (100.0, 2.0)])
def test_the_probe_interval_leaves_room_under_the_limit(after, interval) -> None:
    w = BrokerWatch(Probe(), after)
    assert w.interval_s == interval
    assert w.timeout_s <= after


# --- `back`: the first answer after the broker was lost --------------------------------------


def watch_back(probe: Probe, clock: Clock, after: float = 10.0) -> tuple[BrokerWatch, list[int]]:
    calls: list[int] = []
    w = BrokerWatch(probe, after, clock=clock, wall_clock=lambda: 0.0, back=lambda: calls.append(1))
    return w, calls


async def test_an_answer_after_a_refused_probe_calls_back_once() -> None:
    clock, probe = Clock(), Probe()
    w, calls = watch_back(probe, clock)
    assert await w.check() and calls == []  # answering all along: nothing to heal
    probe.mode = "fail"  # refused: a broker that died, even for less than the limit
    assert not await w.check() and not await w.check()
    assert calls == []
    probe.mode = "answer"
    assert await w.check() and await w.check()
    assert calls == [1]


async def test_a_slow_answer_alone_calls_nothing_back_but_a_silence_past_the_limit_does() -> None:
    clock, probe = Clock(), Probe()
    w, calls = watch_back(probe, clock, after=0.2)
    probe.mode = "hang"
    assert not await asyncio.wait_for(w.check(), timeout=30)  # within the limit
    probe.mode = "answer"
    assert await w.check() and calls == []
    probe.mode = "hang"
    clock.now += 1  # silent past the limit: lost, however it failed
    assert not await asyncio.wait_for(w.check(), timeout=30)
    probe.mode = "answer"
    assert await w.check() and calls == [1]


async def test_a_back_that_raises_is_logged_and_the_watch_goes_on(caplog) -> None:
    clock, probe = Clock(), Probe()

    def broken() -> None:
        raise RuntimeError("no")

    w = BrokerWatch(probe, 10.0, clock=clock, back=broken)
    probe.mode = "fail"
    await w.check()
    probe.mode = "answer"
    with caplog.at_level(logging.ERROR, logger="gateway.kafka.broker"):
        assert await w.check()
    assert "reacting to the broker's return failed" in caplog.text
    assert w.state() == (True, "reachable")
