"""What the gauges show, kept as totals and published as one immutable snapshot.

Per-agent thread and interrupt totals move by each committed round's deltas
(cost: the pairs that committed); anything that changes which pairs are held
recomputes them from every pair, once per change batch. Lag is sampled by the
runner. Each change publishes a fresh `GaugeSnapshot` for the collector.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gateway.kafka.assign.standby import StandbyReport
from gateway.kafka.pairs.round import Round
from gateway.kafka.pairs.slot import PairKey, PairSlot
from gateway.observe.gauges import GaugeCollector, GaugeSnapshot, frozen


class Status:
    def __init__(self, collector: GaugeCollector) -> None:
        self.collector = collector
        self._threads: dict[str, int] = {}
        self._open: dict[str, int] = {}
        self._restoring = 0
        self._held = 0
        self._assigned_at = 0.0
        self._refused: tuple[str, ...] = ()
        self._denied: tuple[tuple[str, str, str], ...] = ()
        self._lag: Mapping[tuple[str, str], int] = frozen({})
        self._lag_max: Mapping[tuple[str, str], int] = frozen({})
        self._standby = StandbyReport(0, 0, 0, 0)

    def recount(
        self,
        slots: Iterable[PairSlot],
        refused: Mapping[str, str],
        denied: Mapping[PairKey, tuple[str, str]],
    ) -> None:
        """Everything from the pairs held now (an agent held no more shows zero)."""
        threads = dict.fromkeys(self._threads, 0)
        open_ = dict.fromkeys(self._open, 0)
        restoring = held = 0
        for slot in slots:
            held += 1
            agent = slot.pair.agent
            threads[agent] = threads.get(agent, 0) + slot.pair.thread_count
            open_[agent] = open_.get(agent, 0) + slot.pair.open_interrupts
            restoring += not slot.ready and agent not in refused
        self._threads, self._open, self._restoring = threads, open_, restoring
        self._held = held
        self._refused = tuple(sorted(refused))
        self._denied = tuple(sorted({(a, op, res) for (a, _), (op, res) in denied.items()}))
        self.publish()

    def committed(self, rounds: Iterable[Round]) -> None:
        """Committed rounds moved their agents' totals."""
        changed = False
        for done in rounds:
            if done.thread_delta or done.open_delta:
                agent = done.agent
                self._threads[agent] = self._threads.get(agent, 0) + done.thread_delta
                self._open[agent] = self._open.get(agent, 0) + done.open_delta
                changed = True
        if changed:
            self.publish()

    def assigned(self, at: float) -> None:
        """An assignment was taken at `at` (Unix time)."""
        self._assigned_at = at
        self.publish()

    def lag(self, lag: Mapping[tuple[str, str], int], worst: Mapping[tuple[str, str], int]) -> None:
        self._lag, self._lag_max = frozen(lag), frozen(worst)
        self.publish()

    def standby(self, report: StandbyReport) -> None:
        """The warm standbys' replicas, lag and threads."""
        if report != self._standby:
            self._standby = report
            self.publish()

    def publish(self) -> None:
        self.collector.publish(
            GaugeSnapshot(
                threads=frozen(self._threads),
                open_interrupts=frozen(self._open),
                restoring=self._restoring,
                held=self._held,
                assigned_at=self._assigned_at,
                refused=self._refused,
                denied=self._denied,
                lag=self._lag,
                lag_max=self._lag_max,
                standby_held=self._standby.held,
                standby_lag=self._standby.lag,
                standby_lag_max=self._standby.lag_max,
                standby_lag_seconds=self._standby.lag_seconds_max,
                standby_threads=self._standby.threads,
            )
        )
