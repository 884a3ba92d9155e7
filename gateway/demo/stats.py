"""The simulated agents' and clients' own counters, read by the console."""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

SAMPLES_KEPT = 2000  # latency samples kept for percentiles (the most recent)


def percentile(samples: list[float] | deque[float], q: float) -> float | None:
    """The q-quantile (0..1) of `samples` by nearest rank, or None when empty."""
    if not samples:
        return None
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


@dataclass
class DemoStats:
    # agents
    conversations: int = 0
    conversations_by_agent: Counter[str] = field(default_factory=Counter)  # a group's agents
    runs: Counter[str] = field(default_factory=Counter)  # outcome -> runs published
    interrupts: Counter[str] = field(default_factory=Counter)  # reason -> interrupts raised
    events: int = 0
    late_errors: int = 0
    violations: Counter[str] = field(default_factory=Counter)
    run_requests: int = 0  # forwarded run requests the agents consumed
    # clients
    scenarios: Counter[str] = field(default_factory=Counter)
    sent: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)  # forward | reject | duplicate
    reasons: Counter[str] = field(default_factory=Counter)  # rejection reasons replied
    unexpected: Counter[str] = field(default_factory=Counter)  # "expected -> got"
    awaiting: int = 0  # sent, no reply yet
    answer_s: deque[float] = field(default_factory=lambda: deque(maxlen=SAMPLES_KEPT))
    verdict_s: deque[float] = field(default_factory=lambda: deque(maxlen=SAMPLES_KEPT))
    errors: Counter[str] = field(default_factory=Counter)  # simulator-side failures
