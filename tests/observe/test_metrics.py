"""The metrics' series and buckets, on a fresh registry."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector

from gateway.core.events import lifecycle
from gateway.core.events.classify import KNOWN_TYPES
from gateway.core.values.codes import Reason, Rule, Verdict, Warn
from gateway.http import exposition
from gateway.observe.gauges import ROLES, GaugeSnapshot
from gateway.observe.metrics import (
    KNOWN_REASONS,
    OTHER,
    PER_AGENT_CALLS,
    RESPONSE_BUCKETS,
    RUN_OUTCOMES,
    AgentDetail,
    Metrics,
    outcome_label,
)
from gateway.settings import Settings
from tests.observe.exposition import Samples, by, parse, select, total


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


# --- the label policy -------------------------------------------------------------------


def fleet_activity(metrics: Metrics, agents: int) -> None:
    """`agents` agents' worth of activity, through the calls the shell makes.

    Every agent is served, forwards and rejects requests, raises and answers
    interrupts and sends events; one in ten also sees a duplicate. Between them the
    agents use every value of every detail label (every event type, rejection
    reason, warning code, rule, interrupt reason and status, run outcome), the
    worst case for the series counted over all agents. The pair-state gauges
    (threads, open interrupts, lag) are left out: a scrape-time collector reports them.
    """
    metrics.prime_transactions()
    types = (*sorted(KNOWN_TYPES), "unknown")
    reasons = (*sorted(KNOWN_REASONS), OTHER)
    for i in range(agents):
        agent = f"agent-{i:04d}"
        metrics.prime_agent(agent)
        metrics.events.labels(agent, types[i % len(types)]).inc(40)
        metrics.events.labels(agent, "TEXT_MESSAGE_CONTENT").inc(400)
        metrics.requests.labels(agent, str(Verdict.FORWARD)).inc(20)
        metrics.requests.labels(agent, str(Verdict.REJECT)).inc(2)
        if i % 10 == 0:
            metrics.requests.labels(agent, str(Verdict.DUPLICATE)).inc()
        metrics.rejections.labels(agent, str(list(Reason)[i % len(Reason)])).inc(2)
        metrics.warnings.labels(agent, str(list(Warn)[i % len(Warn)])).inc()
        metrics.warnings_suppressed.labels(agent, str(list(Warn)[i % len(Warn)])).inc()
        metrics.protocol_violations.labels(agent, str(list(Rule)[i % len(Rule)])).inc()
        metrics.interrupts_raised.labels(agent, reasons[i % len(reasons)]).inc(3)
        for status in ("resolved", "cancelled"):
            hist = metrics.interrupt_response.labels(agent, reasons[i % len(reasons)], status)
            hist.observe(0.2 + i)
        metrics.runs_closed.labels(agent, RUN_OUTCOMES[i % len(RUN_OUTCOMES)]).inc(5)
        for family in (
            metrics.unrecognised_entries,
            metrics.uncovered_interrupts,
            metrics.expired_answers,
            metrics.interrupts_expired,
            metrics.merge_wait_expired,
        ):
            family.labels(agent).inc()
        metrics.decision_seconds.observe(0.004)
        metrics.transactions.labels("committed").inc()


def agent_labelled_families(registry: CollectorRegistry) -> set[str]:
    return {
        family.name
        for family in registry.collect()
        if any("agent" in sample.labels for sample in family.samples)
    }


def test_the_default_policy_counts_every_counter_over_all_agents():
    assert Settings.model_fields["metrics_agent_detail"].default == AgentDetail.DASHBOARD
    registry = CollectorRegistry()
    metrics = Metrics(registry, AgentDetail.DASHBOARD)
    fleet_activity(metrics, 3)
    assert agent_labelled_families(registry) == set()
    samples = parse(exposition(registry).decode())
    # the verdicts over all agents, summed as the shell counted them per agent
    assert by(samples, "agui_gateway_requests_total", "verdict") == {
        "forward": 60.0,
        "reject": 6.0,
        "duplicate": 1.0,
    }
    # the detail over all agents, summed as the shell counted it
    assert total(samples, "agui_gateway_events_total") == 3 * 440
    assert by(samples, "agui_gateway_events_total", "type")["TEXT_MESSAGE_CONTENT"] == 1200
    assert total(samples, "agui_gateway_interrupt_response_seconds_count") == 6
    # the response histogram by reason only: a machine's answer or a person's
    reasons = by(samples, "agui_gateway_interrupt_response_seconds_count", "reason")
    assert reasons == dict.fromkeys(sorted(KNOWN_REASONS)[:3], 2.0)
    assert all(
        set(dict(labels)) <= {"reason", "le"}
        for labels in select(samples, "agui_gateway_interrupt_response_seconds_bucket")
    )
    assert total(samples, "agui_gateway_merge_wait_expired_total") == 3
    assert select(samples, "agui_gateway_uncovered_interrupts_total") == {frozenset(): 3.0}


def test_full_detail_keeps_agent_on_every_family_the_shell_counts_per_agent():
    registry = CollectorRegistry()
    metrics = Metrics(registry, AgentDetail.FULL)
    fleet_activity(metrics, 3)
    per_agent = {
        family.metric._name for family in metrics.agent_families().values()
    }  # the client's family names
    assert agent_labelled_families(registry) >= per_agent
    assert len(per_agent) == len(PER_AGENT_CALLS)
    samples = parse(exposition(registry).decode())
    assert (
        by(samples, "agui_gateway_events_total", ("agent", "type"))[
            ("agent-0001", "TEXT_MESSAGE_CONTENT")
        ]
        == 400
    )
    reason = sorted(KNOWN_REASONS)[2]
    labels = {"agent": "agent-0002", "reason": reason, "status": "cancelled"}
    assert registry.get_sample_value("agui_gateway_interrupt_response_seconds_count", labels) == 1


def test_both_policies_export_the_same_families():
    names = []
    for detail in AgentDetail:
        registry = CollectorRegistry()
        fleet_activity(Metrics(registry, detail), 2)
        names.append({family.name for family in registry.collect()})
    assert names[0] == names[1]


def test_the_call_shape_is_checked_under_both_policies():
    for detail in AgentDetail:
        metrics = Metrics(CollectorRegistry(), detail)
        with pytest.raises(ValueError, match="verdict"):
            metrics.requests.labels("forward")  # the agent is always passed first


def test_under_the_default_the_detail_exists_from_zero_and_an_agent_adds_nothing():
    registry = CollectorRegistry()
    metrics = Metrics(registry, AgentDetail.DASHBOARD)
    before = parse(exposition(registry).decode())
    metrics.prime_agent("bot")
    assert parse(exposition(registry).decode()) == before
    for name, label, values in (
        ("agui_gateway_requests_total", "verdict", {str(v) for v in Verdict}),
        ("agui_gateway_events_total", "type", {*KNOWN_TYPES, "unknown"}),
        ("agui_gateway_rejections_total", "reason", {str(r) for r in Reason}),
        ("agui_gateway_warnings_total", "code", {str(w) for w in Warn}),
        ("agui_gateway_protocol_violations_total", "rule", {str(r) for r in Rule}),
        ("agui_gateway_interrupts_raised_total", "reason", {*KNOWN_REASONS, OTHER}),
        ("agui_gateway_runs_closed_total", "outcome", set(RUN_OUTCOMES)),
    ):
        assert by(before, name, label) == dict.fromkeys(values, 0.0), name
    for name in (
        "agui_gateway_unrecognised_entries_total",
        "agui_gateway_uncovered_interrupts_total",
        "agui_gateway_expired_answers_total",
        "agui_gateway_interrupts_expired_total",
        "agui_gateway_merge_wait_expired_total",
    ):
        assert select(before, name) == {frozenset(): 0.0}, name


# --- the gauges of pair state -------------------------------------------------------------


def busy_fleet_state(agents: int) -> GaugeSnapshot:
    """The pair state of `agents` busy agents, the worst case for the gauges' size.

    Every agent holds threads and open interrupts and lags on both topics (lag only
    while behind would otherwise leave its series out), with figures of several digits.
    """
    names = [f"agent-{i:04d}" for i in range(agents)]
    sides = [(a, role) for a in names for role in ROLES]
    return GaugeSnapshot(
        threads={a: 1000 + i for i, a in enumerate(names)},
        open_interrupts={a: 10 + i % 90 for i, a in enumerate(names)},
        lag={side: 1000 + i for i, side in enumerate(sides)},
        lag_max={side: 100 + i % 900 for i, side in enumerate(sides)},
    )


def gauges(detail: AgentDetail, snapshot: GaugeSnapshot) -> Samples:
    registry = CollectorRegistry()
    Metrics(registry, detail).gauges.publish(snapshot)
    return parse(exposition(registry).decode())


LAGGING = GaugeSnapshot(
    threads={"a": 5, "b": 7, "c": 0},
    open_interrupts={"a": 1, "b": 0, "c": 0},
    lag={("a", "events"): 30, ("a", "requests"): 4, ("b", "events"): 0, ("c", "requests"): 0},
    lag_max={("a", "events"): 20, ("a", "requests"): 4, ("b", "events"): 0},
)


def test_under_the_default_lag_is_per_agent_while_behind_and_its_worst_per_role():
    samples = gauges(AgentDetail.DASHBOARD, LAGGING)
    # summed over both roles; b and c are caught up: no series (absent is zero)
    assert select(samples, "agui_gateway_consumer_lag") == {frozenset({("agent", "a")}): 34.0}
    # the worst partition of each role over all agents, naming no agent nor partition
    assert select(samples, "agui_gateway_consumer_lag_partition_max") == {
        frozenset({("topic", "events")}): 20.0,
        frozenset({("topic", "requests")}): 4.0,
    }
    # the state of each agent held, zero included
    assert by(samples, "agui_gateway_threads", "agent") == {"a": 5, "b": 7, "c": 0}
    assert by(samples, "agui_gateway_interrupts_open", "agent") == {"a": 1, "b": 0, "c": 0}


def test_under_the_default_the_worst_partition_answers_zero_when_nothing_lags():
    caught_up = GaugeSnapshot(lag={("a", "events"): 0}, lag_max={("a", "events"): 0})
    for snapshot in (caught_up, GaugeSnapshot()):
        samples = gauges(AgentDetail.DASHBOARD, snapshot)
        assert select(samples, "agui_gateway_consumer_lag") == {}
        assert by(samples, "agui_gateway_consumer_lag_partition_max", "topic") == dict.fromkeys(
            ROLES, 0.0
        )


def test_full_detail_keeps_both_lag_gauges_per_agent_and_role():
    samples = gauges(AgentDetail.FULL, LAGGING)
    assert by(samples, "agui_gateway_consumer_lag", ("agent", "topic")) == {
        ("a", "events"): 30,
        ("a", "requests"): 4,
        ("b", "events"): 0,
        ("c", "requests"): 0,
    }
    assert by(samples, "agui_gateway_consumer_lag_partition_max", ("agent", "topic")) == {
        ("a", "events"): 20,
        ("a", "requests"): 4,
        ("b", "events"): 0,
    }


def test_the_gauges_describe_the_labels_they_collect():
    for detail in AgentDetail:
        collector = Metrics(CollectorRegistry(), detail).gauges
        collector.publish(LAGGING)
        described = {f.name: f for f in collector.describe()}
        for family in collector.collect():
            assert family.documentation == described[family.name].documentation
            for sample in family.samples:
                assert set(sample.labels) == set(described[family.name]._labelnames), family.name


def test_a_thousand_busy_agents_stay_under_200_kb_uncompressed_by_default():
    """The figure of docs/operations/metrics.md: every agent forwarding, rejecting, raising and answering
    interrupts (`fleet_activity`), holding threads and open interrupts and lagging on
    both topics (`busy_fleet_state`), process metrics included."""
    sizes: dict[int, int] = {}
    for agents in (1, 100, 1000):
        registry = CollectorRegistry()
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        metrics = Metrics(registry, AgentDetail.DASHBOARD)
        fleet_activity(metrics, agents)
        metrics.gauges.publish(busy_fleet_state(agents))
        text = exposition(registry)
        sizes[agents] = len(text)
    assert sizes[1000] < 200_000, sizes
    samples = parse(text.decode())
    for name in (
        "agui_gateway_threads",
        "agui_gateway_interrupts_open",
        "agui_gateway_consumer_lag",
    ):
        assert len(select(samples, name)) == 1000, name  # one series an agent
    assert len(select(samples, "agui_gateway_consumer_lag_partition_max")) == len(ROLES)
    # what grows with the fleet is the three gauges of each agent: about 150 bytes
    assert (sizes[1000] - sizes[100]) / 900 < 160, sizes


def test_full_detail_is_what_grows_with_every_agent():
    sizes = {}
    for detail in AgentDetail:
        registry = CollectorRegistry()
        fleet_activity(Metrics(registry, detail), 20)
        sizes[detail] = len(exposition(registry))
    assert sizes[AgentDetail.FULL] > 5 * sizes[AgentDetail.DASHBOARD], sizes
