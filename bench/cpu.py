"""CPU time spent by this process and by the broker over a span (issue 25).

On the shared machine the throughput ratios swing with the other load (one run
showed ingest 0.37 and 0.79 in its two repeats); CPU time per record is what that
load changes least. `CpuMeter` reads this process's CPU time (the in-process
gateway, or a raw peer) and the broker's (`deploy/kafka.sh`'s process on the
run's port, from /proc; NaN when the broker is not one it runs).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

from bench.broker import REPO_ROOT


def broker_pid(bootstrap: str) -> int | None:
    """The pid of the broker deploy/kafka.sh runs on that port, if it is one."""
    port = bootstrap.rsplit(":", 1)[-1]
    state = Path(os.environ.get("KAFKA_STATE_DIR") or REPO_ROOT / ".kafka" / port)
    try:
        return int((state / "kafka.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of a process so far, from /proc (NaN: gone)."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return math.nan


@dataclass(frozen=True)
class CpuSpent:
    own_s: float  # this process
    broker_s: float  # the broker (NaN: not known)


class CpuMeter:
    def __init__(self, bootstrap: str) -> None:
        self._broker = broker_pid(bootstrap)

    def now(self) -> CpuSpent:
        broker = cpu_seconds(self._broker) if self._broker else math.nan
        return CpuSpent(time.process_time(), broker)

    def since(self, start: CpuSpent, less_own_s: float = 0.0) -> CpuSpent:
        """CPU spent since `start` (this process's less `less_own_s`, spent on something
        else meanwhile, e.g. producing the input)."""
        end = self.now()
        return CpuSpent(end.own_s - start.own_s - less_own_s, end.broker_s - start.broker_s)


def per_record_us(seconds: float, records: int) -> float:
    return round(1e6 * seconds / records, 2) if records else math.nan
