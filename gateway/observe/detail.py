"""Which series carry the `agent` label: the `metrics_agent_detail` setting."""

from __future__ import annotations

from enum import StrEnum


class AgentDetail(StrEnum):
    """`dashboard` (the default, sized for fleets) or `full` (everything per agent).

    What each keeps per agent is written down where the families are: the counters in
    gateway/observe/metrics.py, the gauges of pair state in gateway/observe/gauges.py.
    """

    DASHBOARD = "dashboard"
    FULL = "full"
