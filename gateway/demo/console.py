"""The live summary: the gateway's own metrics next to the simulators' counters.

Redrawn in place every second when stdout is a terminal; otherwise one
block every few seconds, so a log or a pipe stays readable.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TextIO

from prometheus_client import CollectorRegistry

from gateway.demo.stats import DemoStats, percentile
from gateway.observe.metrics import PREFIX

CLEAR = "\x1b[H\x1b[2J"
TTY_EVERY_S = 1.0
PIPE_EVERY_S = 5.0
FINAL_MARKER = "=== final summary ==="


@dataclass(frozen=True, slots=True)
class Header:
    agent: str
    partitions: int
    rate: float
    duration: float | None
    metrics_url: str
    log_path: str


def by_label(registry: CollectorRegistry, sample: str, agent: str, label: str) -> dict[str, float]:
    """{label value: sample value} of one labelled metric for `agent`."""
    out: dict[str, float] = {}
    for family in registry.collect():
        for s in family.samples:
            if s.name == sample and s.labels.get("agent") == agent and label in s.labels:
                out[s.labels[label]] = out.get(s.labels[label], 0.0) + s.value
    return out


def _value(registry: CollectorRegistry, sample: str, labels: dict[str, str]) -> float:
    return registry.get_sample_value(sample, labels) or 0.0


def _pairs(counts: Mapping[str, float]) -> str:
    shown = [f"{k}={int(v)}" for k, v in sorted(counts.items()) if v]
    return " ".join(shown) if shown else "-"


def _seconds(value: float | None, unit_ms: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f} ms" if unit_ms else f"{value:.2f} s"


def render(header: Header, registry: CollectorRegistry, stats: DemoStats, elapsed: float) -> str:
    a = header.agent
    verdicts = by_label(registry, PREFIX + "requests_total", a, "verdict")
    rejections = by_label(registry, PREFIX + "rejections_total", a, "reason")
    warnings = by_label(registry, PREFIX + "warnings_total", a, "code")
    closed = by_label(registry, PREFIX + "runs_closed_total", a, "outcome")
    raised = by_label(registry, PREFIX + "interrupts_raised_total", a, "reason")
    answered = sum(
        by_label(registry, PREFIX + "interrupt_response_seconds_count", a, "reason").values()
    )
    answered_sum = sum(
        by_label(registry, PREFIX + "interrupt_response_seconds_sum", a, "reason").values()
    )
    open_now = _value(registry, PREFIX + "interrupts_open", {"agent": a})
    until = f" of {header.duration:.0f} s" if header.duration else " (Ctrl-C stops)"
    answer = list(stats.answer_s)
    verdict = list(stats.verdict_s)
    lines = [
        f"agui-gateway demo: agent {a!r}, {header.partitions} partitions, "
        f"{header.rate:g} conversations/s, {elapsed:.1f} s{until}",
        f"  metrics {header.metrics_url}   gateway log {header.log_path}",
        "gateway (its Prometheus metrics)",
        f"  forwarded              {int(verdicts.get('forward', 0))}",
        f"  rejected               {int(verdicts.get('reject', 0))}",
        f"  duplicates             {int(verdicts.get('duplicate', 0))}",
        f"  rejected by reason     {_pairs(rejections)}",
        f"  warnings by code       {_pairs(warnings)}",
        f"  open interrupts        {int(open_now)}",
        f"  interrupts raised      {_pairs(raised)}",
        f"  runs closed            {_pairs(closed)}",
        f"  interrupt response     mean "
        f"{_seconds(answered_sum / answered if answered else None)} over {int(answered)} "
        "answers (RUN_FINISHED to forward)",
        "simulated agents and clients",
        f"  conversations started  {stats.conversations}",
        f"  runs published         {_pairs(stats.runs)}   late RUN_ERROR {stats.late_errors}   "
        f"violations {_pairs(stats.violations)}",
        f"  run requests consumed  {stats.run_requests}",
        f"  answers by scenario    {_pairs(stats.scenarios)}",
        f"  requests sent          {stats.sent}   replies {_pairs(stats.verdicts)}   "
        f"awaiting {stats.awaiting}",
        f"  unexpected verdicts    {sum(stats.unexpected.values())}"
        + (f"  ({_pairs(stats.unexpected)})" if stats.unexpected else ""),
        f"  interrupt answered     p50 {_seconds(percentile(answer, 0.5))}   "
        f"p95 {_seconds(percentile(answer, 0.95))}   (seen to forward reply, incl. think time)",
        f"  verdict latency        p50 {_seconds(percentile(verdict, 0.5), True)}   "
        f"p95 {_seconds(percentile(verdict, 0.95), True)}   (request sent to reply)",
    ]
    if stats.errors:
        lines.append(f"  simulator notes        {_pairs(stats.errors)}")
    return "\n".join(lines)


class Console:
    def __init__(
        self,
        header: Header,
        registry: CollectorRegistry,
        stats: DemoStats,
        out: TextIO,
        started: float,
    ) -> None:
        self.header = header
        self.registry = registry
        self.stats = stats
        self.out = out
        self.started = started
        self.tty = out.isatty()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    async def run(self, stop: asyncio.Event) -> None:
        """Redraw until `stop`."""
        every = TTY_EVERY_S if self.tty else PIPE_EVERY_S
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=every)
            except TimeoutError:
                self.draw()

    def draw(self) -> None:
        block = render(self.header, self.registry, self.stats, self.elapsed())
        if self.tty:
            self.out.write(CLEAR + block + "\n")
        else:
            self.out.write(block + "\n\n")
        self.out.flush()

    def final(self, elapsed: float) -> None:
        block = render(self.header, self.registry, self.stats, elapsed)
        if self.tty:
            self.out.write(CLEAR)
        self.out.write(f"{FINAL_MARKER}\n{block}\n")
        self.out.flush()
