"""CPU time spent by this process and by the broker over a span (issue 25).

On the shared machine the throughput ratios swing with the other load (one run
showed ingest 0.37 and 0.79 in its two repeats); CPU time per record is what that
load changes least. `CpuMeter` reads this process's CPU time (the in-process
gateway, or a raw peer) and the broker's (`deploy/kafka.sh`'s process on the
run's port, from /proc; NaN when the broker is not one it runs).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from bench.scenarios.latency import _broker_pid, _cpu_seconds


@dataclass(frozen=True)
class CpuSpent:
    own_s: float  # this process
    broker_s: float  # the broker (NaN: not known)


class CpuMeter:
    def __init__(self, bootstrap: str) -> None:
        self._broker = _broker_pid(bootstrap)

    def now(self) -> CpuSpent:
        broker = _cpu_seconds(self._broker) if self._broker else math.nan
        return CpuSpent(time.process_time(), broker)

    def since(self, start: CpuSpent, less_own_s: float = 0.0) -> CpuSpent:
        """CPU spent since `start` (this process's less `less_own_s`, spent on something
        else meanwhile, e.g. producing the input)."""
        end = self.now()
        return CpuSpent(end.own_s - start.own_s - less_own_s, end.broker_s - start.broker_s)


def per_record_us(seconds: float, records: int) -> float:
    return round(1e6 * seconds / records, 2) if records else math.nan
