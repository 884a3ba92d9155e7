"""The live summary: the gateway's own metrics next to the simulators' counters.

Drawn with rich as a table of sections, each a list of labelled figures. On a
terminal it is a live table redrawn every second; otherwise one table every few
seconds, so a log or a pipe stays readable. Text wraps only between words (a
figure such as `uncovered_interrupt=20` is one word); a word wider than its
column is cut with an ellipsis, never split across lines.

To show more, add a section source: a function returning a `Section`, passed
to `Console(sources=...)` after the built-in ones.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TextIO

from prometheus_client import CollectorRegistry
from rich.console import Console as RichConsole
from rich.console import ConsoleOptions, Group, RenderableType, RenderResult
from rich.live import Live
from rich.padding import Padding
from rich.table import Column, Table
from rich.text import Text

from gateway.demo.stats import DemoStats, percentile
from gateway.observe.metrics import PREFIX

TTY_EVERY_S = 1.0
PIPE_EVERY_S = 5.0
FINAL_MARKER = "=== final summary ==="
# How a run can close, in the gateway's runs_closed_total and in the simulators' plans.
RUN_OUTCOMES = ("success", "interrupt", "cancelled", "failed")


@dataclass(frozen=True, slots=True)
class Header:
    agent: str  # the agent, or the group, whose topics the demo's traffic is on
    partitions: int
    rate: float
    duration: float | None
    metrics_url: str
    log_path: str
    members: tuple[str, ...] = ()  # the group's agents, when `agent` is a group
    inbox: str = ""  # where the inbox page is, and how to sign in

    @property
    def names(self) -> frozenset[str]:
        """Every name the gateway's metrics may label the traffic with."""
        return frozenset({self.agent, *self.members})


@dataclass(frozen=True, slots=True)
class Row:
    """One labelled figure; `meaning` says what it measures (shown dim after the value)."""

    label: str
    value: str
    meaning: str = ""


@dataclass(frozen=True, slots=True)
class Section:
    title: str
    rows: tuple[Row, ...]


SectionSource = Callable[[], Section]


def by_label(
    registry: CollectorRegistry, sample: str, agent: str | frozenset[str], label: str
) -> dict[str, float]:
    """{label value: sample value} of one labelled metric for `agent` (summed over a set
    of names: a group and its agents)."""
    names = frozenset({agent}) if isinstance(agent, str) else agent
    out: dict[str, float] = {}
    for family in registry.collect():
        for s in family.samples:
            if s.name == sample and s.labels.get("agent") in names and label in s.labels:
                out[s.labels[label]] = out.get(s.labels[label], 0.0) + s.value
    return out


def _open(registry: CollectorRegistry, agent: str | frozenset[str]) -> float:
    names = frozenset({agent}) if isinstance(agent, str) else agent
    return sum(
        registry.get_sample_value(PREFIX + "interrupts_open", {"agent": name}) or 0.0
        for name in sorted(names)
    )


def pairs(counts: Mapping[str, float], always: Iterable[str] = ()) -> str:
    """`name=count` words, sorted; the names in `always` even at zero, others only when seen."""
    names = set(always) | {k for k, v in counts.items() if v}
    shown = [f"{k}={int(counts.get(k, 0))}" for k in sorted(names)]
    return " ".join(shown) if shown else "none"


def _seconds(value: float | None, unit_ms: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f} ms" if unit_ms else f"{value:.2f} s"


def demo_section(header: Header, elapsed: float) -> Section:
    until = f" of {header.duration:.0f} s" if header.duration else " (Ctrl-C stops)"
    title = f"agui-gateway demo, agent {header.agent!r}"
    group: tuple[Row, ...] = ()
    if header.members:
        title = f"agui-gateway demo, group {header.agent!r} ({len(header.members)} agents)"
        group = (
            Row(
                "agents on the group's topics",
                " ".join(header.members),
                "each record names its agent in agui-agent",
            ),
        )
    return Section(
        title,
        (
            *group,
            Row("elapsed", f"{elapsed:.1f} s{until}"),
            Row("partitions", str(header.partitions)),
            Row("new conversations / s", f"{header.rate:g}"),
            Row("metrics", header.metrics_url),
            *(
                (Row("inbox", header.inbox, "open interrupts, live; answer them"),)
                if header.inbox
                else ()
            ),
            Row("gateway log", header.log_path),
        ),
    )


def gateway_section(agent: str | frozenset[str], registry: CollectorRegistry) -> Section:
    verdicts = by_label(registry, PREFIX + "requests_total", agent, "verdict")
    answered = sum(
        by_label(registry, PREFIX + "interrupt_response_seconds_count", agent, "reason").values()
    )
    answered_sum = sum(
        by_label(registry, PREFIX + "interrupt_response_seconds_sum", agent, "reason").values()
    )

    def labelled(sample: str, label: str, always: Iterable[str] = ()) -> str:
        return pairs(by_label(registry, PREFIX + sample, agent, label), always)

    mean = answered_sum / answered if answered else None
    return Section(
        "gateway (its Prometheus metrics)",
        (
            Row("requests forwarded", str(int(verdicts.get("forward", 0)))),
            Row("requests rejected", str(int(verdicts.get("reject", 0)))),
            Row("duplicate requests", str(int(verdicts.get("duplicate", 0)))),
            Row(
                "rejection reasons",
                labelled("rejections_total", "reason"),
                "one per reason: a request with two uncovered interrupts counts two",
            ),
            Row("warnings by code", labelled("warnings_total", "code")),
            Row(
                "open interrupts",
                str(int(_open(registry, agent))),
            ),
            Row("interrupts raised by reason", labelled("interrupts_raised_total", "reason")),
            Row("runs closed by outcome", labelled("runs_closed_total", "outcome", RUN_OUTCOMES)),
            Row(
                "interrupt response, mean",
                f"{_seconds(mean)} over {int(answered)} answers",
                "interrupting RUN_FINISHED to the forwarded request answering it",
            ),
        ),
    )


def simulator_section(stats: DemoStats) -> Section:
    answer = list(stats.answer_s)
    verdict = list(stats.verdict_s)
    unexpected = sum(stats.unexpected.values())
    rows = [
        Row("conversations started", str(stats.conversations)),
        *(
            [Row("conversations by agent", pairs(stats.conversations_by_agent))]
            if stats.conversations_by_agent
            else []
        ),
        Row("runs published by outcome", pairs(stats.runs, RUN_OUTCOMES)),
        Row("late RUN_ERROR events", str(stats.late_errors)),
        Row("protocol violations sent", pairs(stats.violations)),
        Row("run requests consumed", str(stats.run_requests), "by the simulated agents"),
        Row("answers by scenario", pairs(stats.scenarios)),
        Row("requests sent", str(stats.sent)),
        Row("replies by verdict", pairs(stats.verdicts)),
        Row("awaiting a reply", str(stats.awaiting)),
        Row(
            "unexpected verdicts",
            str(unexpected) + (f" ({pairs(stats.unexpected)})" if unexpected else ""),
        ),
        Row(
            "interrupt answered, p50 / p95",
            f"{_seconds(percentile(answer, 0.5))} / {_seconds(percentile(answer, 0.95))}",
            "a client saw the interrupt to its forward reply, think time included",
        ),
        Row(
            "verdict latency, p50 / p95",
            f"{_seconds(percentile(verdict, 0.5), True)} / "
            f"{_seconds(percentile(verdict, 0.95), True)}",
            "a request sent to its reply",
        ),
    ]
    if stats.errors:
        rows.append(Row("simulator notes", pairs(stats.errors)))
    return Section("simulated agents and clients", tuple(rows))


LABEL_INDENT = "  "
LABEL_MAX = 32  # the label column's width when there is room


def _longest_word(texts: Iterable[str]) -> int:
    return max((len(word) for text in texts for word in text.split()), default=1)


@dataclass(frozen=True, slots=True)
class Summary:
    """The sections as aligned two-column tables, laid out for the console's width.

    Text wraps only between words. The value column is kept at least as wide as
    its longest word (a figure like `payload_schema_mismatch=1234`) and the
    label column as wide as its longest word; only when the console is
    narrower than both is a word cut, with '…', never split across lines.
    """

    sections: tuple[Section, ...]

    def widths(self, width: int) -> tuple[int, int]:
        rows = [row for section in self.sections for row in section.rows]
        label_need = len(LABEL_INDENT) + _longest_word(row.label for row in rows)
        value_need = _longest_word(row.value for row in rows)
        label = min(LABEL_MAX, max(label_need, width - 1 - value_need))
        label = max(1, min(label, width - 2))
        return label, max(1, width - 1 - label)

    def __rich_console__(self, console: RichConsole, options: ConsoleOptions) -> RenderResult:
        label_width, value_width = self.widths(options.max_width)
        for index, section in enumerate(self.sections):
            if index:
                yield Text("")
            yield Text(section.title, style="bold", overflow="ellipsis")
            grid = Table(
                Column(width=label_width, overflow="ellipsis"),
                Column(width=value_width, overflow="ellipsis"),
                box=None,
                show_header=False,
                pad_edge=False,
                padding=(0, 1, 0, 0),
                collapse_padding=True,
            )
            for row in section.rows:
                value = Text(row.value)
                if row.meaning:
                    value.append(f" ({row.meaning})", style="dim")
                grid.add_row(Padding(Text(row.label), (0, 0, 0, len(LABEL_INDENT))), value)
            yield grid


def render(
    header: Header,
    registry: CollectorRegistry,
    stats: DemoStats,
    elapsed: float,
    extra: Sequence[SectionSource] = (),
) -> RenderableType:
    sections = [
        demo_section(header, elapsed),
        gateway_section(header.names, registry),
        simulator_section(stats),
    ]
    sections += [source() for source in extra]
    return Summary(tuple(sections))


class Console:
    def __init__(
        self,
        header: Header,
        registry: CollectorRegistry,
        stats: DemoStats,
        out: TextIO,
        started: float,
        sources: Sequence[SectionSource] = (),
    ) -> None:
        self.header = header
        self.registry = registry
        self.stats = stats
        self.sources = list(sources)
        self.started = started
        self.console = RichConsole(file=out, highlight=False, soft_wrap=False)
        self.tty = self.console.is_terminal

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def renderable(self, elapsed: float | None = None) -> RenderableType:
        when = self.elapsed() if elapsed is None else elapsed
        return render(self.header, self.registry, self.stats, when, self.sources)

    async def run(self, stop: asyncio.Event) -> None:
        """Redraw until `stop`: a live table on a terminal, a table every few seconds otherwise."""
        if not self.tty:
            while not await _stopped(stop, PIPE_EVERY_S):
                self.console.print(Group(self.renderable(), Text("")))
            return
        with Live(
            self.renderable(), console=self.console, auto_refresh=False, transient=True
        ) as live:
            while not await _stopped(stop, TTY_EVERY_S):
                live.update(self.renderable(), refresh=True)

    def draw(self) -> None:
        self.console.print(self.renderable())

    def final(self, elapsed: float) -> None:
        self.console.print(FINAL_MARKER)
        self.console.print(self.renderable(elapsed))


async def _stopped(stop: asyncio.Event, wait_s: float) -> bool:
    try:
        await asyncio.wait_for(stop.wait(), timeout=wait_s)
    except TimeoutError:
        return False
    return True
