"""Pacing a pair's commits under load: fewer, larger transactions, a lone request at once.

Commits are pipelined: when a pair's transaction ends with decided requests
waiting, the next one would start at once. Under load that makes many small
transactions, and each costs the same begin, offsets and commit round trips
(in the gateway and in the broker) whatever its size. With a floor
(`commit_min_interval_ms`), a pair's next commit starts only once its last one
began that long ago, or once its open round holds `commit_min_records`
records; until then the round keeps filling. A request arriving after a quiet
spell finds the last commit long past and commits at once.

Pure: no clock (time is an argument), no Kafka.
"""

from __future__ import annotations

from collections.abc import Hashable


class CommitPacing:
    def __init__(self, min_interval_s: float = 0.0, min_records: int = 0) -> None:
        self.min_interval_s = min_interval_s
        self.min_records = min_records
        self._began: dict[Hashable, float] = {}  # when each pair's last commit began

    def wait(self, key: Hashable, pending_records: int, now: float) -> float:
        """Seconds until the pair's open round may start its commit (0: now)."""
        if self.min_interval_s <= 0:
            return 0.0
        if self.min_records > 0 and pending_records >= self.min_records:
            return 0.0
        began = self._began.get(key)
        if began is None:
            return 0.0
        return max(0.0, began + self.min_interval_s - now)

    def began(self, key: Hashable, now: float) -> None:
        """A commit of the pair began at `now`."""
        if self.min_interval_s > 0:
            self._began[key] = now

    def forget(self, key: Hashable) -> None:
        self._began.pop(key, None)
