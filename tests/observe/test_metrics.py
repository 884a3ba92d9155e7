"""The metrics' series and buckets, on a fresh registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from gateway.core import lifecycle
from gateway.core.classify import KNOWN_TYPES
from gateway.core.codes import Rule
from gateway.observe.metrics import (
    KNOWN_REASONS,
    OTHER,
    RESPONSE_BUCKETS,
    RUN_OUTCOMES,
    Metrics,
    outcome_label,
)


def series(registry: CollectorRegistry, name: str, label: str) -> set[str]:
    return {
        s.labels[label]
        for metric in registry.collect()
        for s in metric.samples
        if s.name == name and s.labels.get("agent") == "bot"
    }


def test_an_agents_bounded_series_exist_from_zero_once_it_is_served():
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    assert series(registry, "agui_gateway_events_total", "type") == set()
    metrics.prime_agent("bot")
    raised = series(registry, "agui_gateway_interrupts_raised_total", "reason")
    assert raised == {*KNOWN_REASONS, OTHER}
    assert series(registry, "agui_gateway_runs_closed_total", "outcome") == set(RUN_OUTCOMES)
    assert "failed" in RUN_OUTCOMES
    assert series(registry, "agui_gateway_events_total", "type") == {*KNOWN_TYPES, "unknown"}
    rules = series(registry, "agui_gateway_protocol_violations_total", "rule")
    assert rules == {str(r) for r in Rule}
    for name in (
        "agui_gateway_interrupts_raised_total",
        "agui_gateway_runs_closed_total",
        "agui_gateway_events_total",
        "agui_gateway_protocol_violations_total",
    ):
        values = [
            s.value
            for m in registry.collect()
            for s in m.samples
            if s.name == name and s.labels.get("agent") == "bot"
        ]
        assert values and set(values) == {0.0}


def test_run_outcomes_are_the_lifecycles_closing_outcomes_and_failed():
    assert set(RUN_OUTCOMES) == set(lifecycle._KNOWN_OUTCOMES) | {"failed"}
    assert outcome_label(None) == "success"
    assert outcome_label("something new") == OTHER


def test_interrupt_response_buckets_resolve_machine_and_human_answers():
    assert RESPONSE_BUCKETS[0] == 0.05 and RESPONSE_BUCKETS[-1] == 7 * 24 * 3600
    assert list(RESPONSE_BUCKETS) == sorted(set(RESPONSE_BUCKETS))
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    hist = metrics.interrupt_response.labels("bot", "tool_call", "resolved")
    for seconds in (0.03, 0.2, 0.4, 2.0):
        hist.observe(seconds)
    labels = {"agent": "bot", "reason": "tool_call", "status": "resolved"}
    below = {
        le: registry.get_sample_value(
            "agui_gateway_interrupt_response_seconds_bucket", {**labels, "le": le}
        )
        for le in ("0.05", "0.25", "0.5", "1.0", "2.5")
    }
    assert below == {"0.05": 1.0, "0.25": 2.0, "0.5": 3.0, "1.0": 3.0, "2.5": 4.0}
