"""A standby replica's lag in seconds: how long it has been behind its changelog's end (no broker)."""

from __future__ import annotations

from aiokafka import TopicPartition

from gateway.kafka.assign.replica import Replica
from gateway.kafka.assign.standby import StandbyReport, Standbys, behind_seconds
from gateway.observe.gauges import GaugeCollector, GaugeSnapshot
from gateway.settings import Settings


def test_a_replica_at_its_end_is_not_behind() -> None:
    assert behind_seconds(0, caught_up_at=90.0, placed_at=10.0, now=100.0) == 0.0


def test_a_replica_behind_counts_from_when_it_last_was_at_the_end() -> None:
    assert behind_seconds(3, caught_up_at=97.5, placed_at=10.0, now=100.0) == 2.5


def test_a_replica_never_at_the_end_counts_from_when_it_was_placed() -> None:
    assert behind_seconds(None, caught_up_at=None, placed_at=40.0, now=100.0) == 60.0
    assert behind_seconds(500, caught_up_at=None, placed_at=40.0, now=100.0) == 60.0


def test_the_report_gives_the_worst_replicas_seconds_behind() -> None:
    reports: list[StandbyReport] = []
    standbys = Standbys(
        Settings(bootstrap_servers="127.0.0.1:1"), lambda o: (f"{o}-log", str), reports.append
    )
    current, behind, fresh = (TopicPartition("log", p) for p in range(3))
    standbys.replicas = {current: Replica(), behind: Replica(), fresh: Replica()}
    standbys.replicas[current].reached(10, 10, now=99.0)  # at its end at the latest check
    standbys.replicas[behind].reached(4, 4, now=95.0)  # at its end 5 s ago ...
    standbys.replicas[behind].reached(6, 9, now=99.0)  # ... and 3 records behind since
    standbys.lag = {current: 0, behind: 3}  # `fresh`: not checked yet
    standbys.placed_at = {current: 0.0, behind: 0.0, fresh: 98.0}
    standbys._report(force=True, now=100.0)
    assert reports[-1] == StandbyReport(held=3, lag=3, lag_max=3, threads=0, lag_seconds_max=5.0)
    standbys.lag[behind] = 0  # caught up again: only the fresh one is still behind
    standbys._report(force=True, now=100.5)
    assert reports[-1].lag_seconds_max == 2.5


def test_the_gauge_shows_the_seconds() -> None:
    collector = GaugeCollector()
    collector.publish(GaugeSnapshot(standby_lag_seconds=4.25))
    (family,) = [m for m in collector.collect() if m.name == "agui_gateway_standby_lag_seconds"]
    assert [s.value for s in family.samples] == [4.25]


def test_while_the_reader_fails_a_replica_counts_as_behind_since_it_was_last_at_its_end() -> None:
    reports: list[StandbyReport] = []
    standbys = Standbys(
        Settings(bootstrap_servers="127.0.0.1:1"), lambda o: (f"{o}-log", str), reports.append
    )
    tp = TopicPartition("log", 0)
    standbys.replicas = {tp: Replica()}
    standbys.replicas[tp].reached(7, 7, now=95.0)
    standbys.lag, standbys.placed_at = {tp: 0}, {tp: 0.0}
    standbys.failing = True  # its latest check found it at the end, 5 s ago
    standbys._report(force=True, now=100.0)
    assert reports[-1].lag_seconds_max == 5.0 and reports[-1].lag == 0
    standbys.failing = False
    standbys._report(force=True, now=100.0)
    assert reports[-1].lag_seconds_max == 0.0
