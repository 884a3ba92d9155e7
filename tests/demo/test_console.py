"""The demo console: labelled figures in a table that never splits a word or a number."""

from __future__ import annotations

import io
import re

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gateway.demo.bridged import BridgedStats, bridged_section
from gateway.demo.console import (
    FINAL_MARKER,
    Console,
    Header,
    Row,
    Section,
    demo_section,
    gateway_section,
    simulator_section,
)
from gateway.demo.real_agent import AgentCounters
from gateway.demo.stats import DemoStats

AGENT = "demo"
HEADER = Header(
    AGENT, 4, 10, 20, "http://127.0.0.1:9464/metrics", "/tmp/agui-gateway-demo-demo.log"
)
ELAPSED = 12.34


def registry(real: str | None = None) -> CollectorRegistry:
    reg = CollectorRegistry()
    requests = Counter("agui_gateway_requests", "", ["agent", "verdict"], registry=reg)
    for verdict, n in (("forward", 1234), ("reject", 567), ("duplicate", 89)):
        requests.labels(agent=AGENT, verdict=verdict).inc(n)
    rejections = Counter("agui_gateway_rejections", "", ["agent", "reason"], registry=reg)
    if real is not None:  # the gateway's figures for the demo's real agent too
        requests.labels(agent=real, verdict="forward").inc(81)
        rejections.labels(agent=real, reason="payload_schema_mismatch").inc(9)
    for reason, n in (
        ("uncovered_interrupt", 20),
        ("payload_schema_mismatch", 123456),
        ("malformed_input", 3),
        ("answer_after_expiry", 7),
        ("unknown_interrupt", 12),
    ):
        rejections.labels(agent=AGENT, reason=reason).inc(n)
    warnings = Counter("agui_gateway_warnings", "", ["agent", "code"], registry=reg)
    warnings.labels(agent=AGENT, code="unknown_event_type").inc(5)
    closed = Counter("agui_gateway_runs_closed", "", ["agent", "outcome"], registry=reg)
    closed.labels(agent=AGENT, outcome="interrupt").inc(700)
    raised = Counter("agui_gateway_interrupts_raised", "", ["agent", "reason"], registry=reg)
    raised.labels(agent=AGENT, reason="tool_call").inc(300)
    Gauge("agui_gateway_interrupts_open", "", ["agent"], registry=reg).labels(agent=AGENT).set(42)
    response = Histogram(
        "agui_gateway_interrupt_response_seconds", "", ["agent", "reason"], registry=reg
    )
    response.labels(agent=AGENT, reason="tool_call").observe(1.5)
    return reg


def stats() -> DemoStats:
    s = DemoStats(conversations=321, sent=900, awaiting=2, run_requests=610, late_errors=4)
    s.runs.update({"success": 100, "interrupt": 700, "cancelled": 30, "failed": 9})
    s.scenarios.update({"good": 400, "late": 30, "duplicate": 40, "bad_payload": 80})
    s.verdicts.update({"forward": 600, "reject": 250, "duplicate": 40})
    s.violations.update({"unknown_event_type": 5, "event_after_close": 2})
    s.answer_s.extend([0.5, 0.9, 2.0])
    s.verdict_s.extend([0.012, 0.020, 0.150])
    return s


def final_output(monkeypatch: pytest.MonkeyPatch, width: int, **kw: object) -> str:
    monkeypatch.setenv("COLUMNS", str(width))
    out = io.StringIO()
    console = Console(HEADER, registry(), stats(), out, 0.0, **kw)  # type: ignore[arg-type]
    console.final(ELAPSED)
    return out.getvalue()


def source_words(reg: CollectorRegistry, st: DemoStats) -> set[str]:
    sections = [demo_section(HEADER, ELAPSED), gateway_section(AGENT, reg), simulator_section(st)]
    words = {FINAL_MARKER}
    words |= set(FINAL_MARKER.split())
    for section in sections:
        words |= set(section.title.split())
        for row in section.rows:
            words |= set(f"{row.label} {row.value} ({row.meaning})".split())
    return words


@pytest.mark.parametrize("width", [150, 80, 60, 50, 40, 30])
def test_no_line_is_wider_than_the_terminal_and_no_word_is_split(
    monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    text = final_output(monkeypatch, width)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width, text
    known = source_words(registry(), stats())
    for word in text.split():
        # a whole word, or one cut with an ellipsis where the column is too narrow
        assert word in known or (
            word.endswith("…") and any(k.startswith(word[:-1]) for k in known)
        ), (word, text)


@pytest.mark.parametrize("width", [150, 80, 60, 50])
def test_every_figure_is_shown_whole(monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    text = final_output(monkeypatch, width)
    assert "…" not in text, text
    for figure in (
        "payload_schema_mismatch=123456",
        "uncovered_interrupt=20",
        "1234",
        "http://127.0.0.1:9464/metrics",
        "/tmp/agui-gateway-demo-demo.log",
        "failed=9",
    ):
        assert figure in text, (figure, text)


def test_every_figure_has_a_label(monkeypatch: pytest.MonkeyPatch) -> None:
    text = final_output(monkeypatch, 200)

    def row(label: str) -> str:
        match = re.search(rf"^\s+{re.escape(label)}\s+(.*?)\s*$", text, re.MULTILINE)
        assert match, (label, text)
        return match.group(1)

    assert row("elapsed") == "12.3 s of 20 s"
    assert "one per reason" in row("rejection reasons")
    # failed runs are shown, also when none closed as failed
    assert "failed=0" in row("runs closed by outcome")
    assert "failed=9" in row("runs published by outcome")
    # one latency per line, each with its own definition
    assert row("interrupt response, mean").startswith("1.50 s over 1 answers (")
    assert row("interrupt answered, p50 / p95").startswith("0.90 s / 2.00 s (")
    assert row("verdict latency, p50 / p95").startswith("20 ms / 150 ms (")
    assert text.count(" (") >= 4
    assert text.startswith(FINAL_MARKER)


def test_more_sections_can_be_added(monkeypatch: pytest.MonkeyPatch) -> None:
    def bridge() -> Section:
        return Section("agent behind the bridge", (Row("runs finished", "17"),))

    text = final_output(monkeypatch, 80, sources=[bridge])
    assert "agent behind the bridge" in text
    assert re.search(r"^\s+runs finished\s+17\s*$", text, re.MULTILINE), text


REAL = "demo-payments"


def bridged_registry() -> CollectorRegistry:
    """The demo's registry with the bridge's metrics and the gateway's for the real agent."""
    from gateway.bridge.metrics import BridgeMetrics

    reg = registry(REAL)
    bridge = BridgeMetrics(reg)
    bridge.agent(REAL)
    bridge.runs.labels(REAL, "interrupt").inc(41)
    bridge.runs.labels(REAL, "success").inc(40)
    bridge.runs.labels(REAL, "agent_unreachable").inc(1)
    bridge.in_flight.labels(REAL).set(2)
    bridge.events.labels(REAL, "agent").inc(12345)
    bridge.events.labels(REAL, "bridge").inc(1)
    bridge.http_errors.labels(REAL, "503").inc(3)
    return reg


def bridged_stats() -> BridgedStats:
    s = BridgedStats(conversations=42, completed=40, approvals_forwarded=40)
    s.sent.update({"request": 42, "bad_resume": 9, "approval": 40, "replay": 11})
    s.verdicts.update({"forward": 82, "reject": 9, "duplicate": 11})
    s.unexpected.update({"approval: forward -> reject": 1})
    s.gave_up.update({"approved_run": 1})
    return s


def bridged_output(monkeypatch: pytest.MonkeyPatch, width: int) -> tuple[str, set[str]]:
    monkeypatch.setenv("COLUMNS", str(width))
    reg, st = bridged_registry(), bridged_stats()
    counters = AgentCounters(requests=82, tool_calls=40)
    section = bridged_section(REAL, reg, st, counters)
    out = io.StringIO()
    Console(HEADER, reg, stats(), out, 0.0, sources=[lambda: section]).final(ELAPSED)
    known = source_words(reg, stats()) | set(section.title.split())
    for row in section.rows:
        known |= set(f"{row.label} {row.value} ({row.meaning})".split())
    return out.getvalue(), known


@pytest.mark.parametrize("width", [150, 80])
def test_the_real_agent_rows_stay_readable(monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    text, known = bridged_output(monkeypatch, width)
    assert max(len(line) for line in text.splitlines()) <= width, text
    assert "…" not in text, text
    for word in text.split():
        assert word in known, (word, text)
    real = text.split(f"real agent {REAL!r}", 1)[1]

    def row(label: str) -> str:
        match = re.search(rf"^\s+{re.escape(label)}\s+(.*?)\s*$", real, re.MULTILINE)
        assert match, (label, real)
        return match.group(1)

    assert row("bridge runs by result").split() == [
        "agent_unreachable=1",
        "interrupt=41",
        "success=40",
    ]
    assert row("bridge runs in flight") == "2"
    assert row("events relayed") == "12345 from the agent, 1 by the bridge"
    assert row("agent HTTP errors") == "503=3"
    assert row("tool calls / approvals").startswith("40 / 40")
    assert row("approved runs completed") == "40"
    assert row("gateway verdicts") == "forward=81"
    assert row("rejection reasons") == "payload_schema_mismatch=9"
    assert "approval=40" in row("requests sent by kind")
    assert row("unexpected verdicts").startswith("1 (")
    assert row("conversations given up") == "approved_run=1"


def test_the_real_agent_section_shows_zeroes_before_any_run() -> None:
    from gateway.bridge.metrics import BridgeMetrics

    reg = CollectorRegistry()
    BridgeMetrics(reg).agent(REAL)
    section = bridged_section(REAL, reg, BridgedStats(), AgentCounters())
    rows = {r.label: r.value for r in section.rows}
    assert rows["bridge runs by result"] == "interrupt=0 success=0"
    assert rows["tool calls / approvals"] == "0 / 0"
    assert rows["agent HTTP errors"] == "none"
    assert "conversations given up" not in rows
