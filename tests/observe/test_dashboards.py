"""The dashboard and the alert rules speak only of metrics the gateway exports.

Exported names come from a real `Metrics(CollectorRegistry())` with every labelled
metric touched once, so the `_total`, `_bucket`, `_count`, `_sum` and `_info`
samples exist exactly as the gateway's /metrics shows them. promtool (Debian's
`prometheus` package, installed by `deploy/prometheus.sh ensure`) checks the
rules' syntax and runs their unit tests in deploy/prometheus/alerts_test.yml.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.metrics import MetricWrapperBase

from gateway.observe.gauges import GaugeSnapshot
from gateway.observe.metrics import AgentDetail, AgentFamily, Metrics
from gateway.settings import Settings
from tests.observe import promql
from tests.observe.promql import Selector, metric_names, selectors

# Scrape-time series Prometheus adds itself.
PROMETHEUS_SERIES = {"up"}

# What the dashboard must show (the issue's list), by sample name.
REQUIRED_ON_DASHBOARD = {
    "agui_gateway_interrupt_response_seconds_bucket",
    "agui_gateway_interrupts_open",
    "agui_gateway_requests_total",
    "agui_gateway_rejections_total",
    "agui_gateway_unrecognised_entries_total",
    "agui_gateway_uncovered_interrupts_total",
    "agui_gateway_interrupts_expired_total",
    "agui_gateway_expired_answers_total",
    "agui_gateway_decision_seconds_bucket",
    "agui_gateway_consumer_lag",
    "agui_gateway_consumer_lag_partition_max",
    "agui_gateway_events_total",
    "agui_gateway_protocol_violations_total",
    "agui_gateway_warnings_total",
    "agui_gateway_transactions_total",
    "agui_gateway_threads",
}
REQUIRED_ALERTS = {
    "AguiGatewayDown",
    "AguiGatewayUncoveredOrMalformedSpike",
    "AguiGatewayConsumerLagGrowing",
    "AguiGatewayInterruptsExpiringUnanswered",
    "AguiGatewayTransactionsFailing",
    "AguiGatewayAgentSilent",
}
COMPOSE = promql.REPO_ROOT / "docker-compose.yml"


def _touched_registry(detail: AgentDetail) -> CollectorRegistry:
    """Every metric touched once, through the calls the shell makes, under `detail`."""
    registry = CollectorRegistry()
    metrics = Metrics(registry, detail)
    # the gauges read at scrape time: one sample of each
    metrics.gauges.publish(
        GaugeSnapshot(
            threads={"x": 1},
            open_interrupts={"x": 1},
            restoring=1,
            refused=("x",),
            denied=(("x", "x", "x"),),
            lag={("x", "events"): 1},
            lag_max={("x", "events"): 1},
        )
    )
    for metric in vars(metrics).values():
        if isinstance(metric, AgentFamily):
            child = metric.labels(*["x"] * len(metric.labelnames))
        elif isinstance(metric, MetricWrapperBase):
            labelnames = metric._labelnames  # the client keeps no public accessor
            child = metric.labels(*["x"] * len(labelnames)) if labelnames else metric
        else:
            continue
        if isinstance(child, Counter):
            child.inc()
        elif isinstance(child, Gauge):
            child.set(1)
        elif isinstance(child, Histogram):
            child.observe(1)
        elif isinstance(child, Info):
            pass  # set by Metrics itself
        else:  # a new kind of metric: teach this test about it
            raise AssertionError(f"unexpected metric {metric!r}")
    return registry


def _sample_names(registry: CollectorRegistry, agent: bool | None = None) -> set[str]:
    return {
        s.name
        for family in registry.collect()
        for s in family.samples
        if agent is None or ("agent" in s.labels) == agent
    }


@pytest.fixture(scope="module")
def registry() -> CollectorRegistry:
    """Under the default policy (`dashboard`)."""
    return _touched_registry(AgentDetail(Settings.model_fields["metrics_agent_detail"].default))


@pytest.fixture(scope="module")
def exported(registry: CollectorRegistry) -> set[str]:
    """Sample names exported under both policies (the families keep their names)."""
    full = _sample_names(_touched_registry(AgentDetail.FULL))
    assert full == _sample_names(registry)
    return full | PROMETHEUS_SERIES


@pytest.fixture(scope="module")
def agent_labelled(registry: CollectorRegistry) -> set[str]:
    """Sample names that carry an `agent` label under the default policy."""
    return _sample_names(registry, agent=True)


@pytest.fixture(scope="module")
def over_all_agents(registry: CollectorRegistry) -> set[str]:
    """Sample names without `agent` under the default policy: detail over all agents."""
    return _sample_names(registry, agent=False)


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return promql.load_dashboard()


def unknown_names(expressions: list[tuple[str, str]], exported: set[str]) -> list[str]:
    """One line per expression naming no metric at all or a metric not exported."""
    problems = []
    for where, expr in expressions:
        names = metric_names(expr)
        if not names:
            problems.append(f"{where}: no metric name found in {expr!r}")
        for name in sorted(names - exported):
            problems.append(f"{where}: {name!r} is not exported by the gateway")
    return problems


def promtool() -> str:
    found = shutil.which("promtool") or (
        "/usr/bin/promtool" if Path("/usr/bin/promtool").is_file() else None
    )
    if found is None:
        pytest.fail(
            "promtool not found: run `deploy/prometheus.sh ensure` (installs Debian's "
            "`prometheus` package, which ships promtool)",
            pytrace=False,
        )
    return found


def run_promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
    )


# --- the exported vocabulary ---------------------------------------------------------------


def test_touched_registry_exports_every_sample_kind(exported: set[str]) -> None:
    for name in (
        "agui_gateway_requests_total",
        "agui_gateway_interrupts_open",
        "agui_gateway_interrupt_response_seconds_bucket",
        "agui_gateway_interrupt_response_seconds_count",
        "agui_gateway_interrupt_response_seconds_sum",
        "agui_gateway_build_info",
        "up",
    ):
        assert name in exported
    # the family names themselves are not samples: a query on them would match nothing
    assert "agui_gateway_requests" not in exported
    assert "agui_gateway_interrupt_response_seconds" not in exported


# --- the extraction itself ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        (
            'sum by (agent) (rate(agui_gateway_requests_total{verdict="forward"}[5m]))',
            {"agui_gateway_requests_total"},
        ),
        # label names in matchers and in by/without/on/group_left lists are not metrics
        ('sum by (agui_gateway_threads) (x{agui_gateway_events_total="1"})', {"x"}),
        ("sum without (instance) (a) / on (agent) group_left (reason) b", {"a", "b"}),
        ("a and on () b unless ignoring (job) c or d", {"a", "b", "c", "d"}),
        # durations, offsets, subqueries, numbers and keywords
        ("histogram_quantile(0.9, sum by (le) (rate(h_bucket[$__rate_interval])))", {"h_bucket"}),
        ("a offset 1h30m > bool 1e3", {"a"}),
        ("max_over_time(rate(c_total[5m])[1h:30s]) > Inf", {"c_total"}),
        ("topk(3, sum by (type) (e_total)) @ end()", {"e_total"}),
        ('count_values("v", g) + quantile(0.5, q)', {"g", "q"}),
        # strings with PromQL-looking content; a bare {__name__=...} selector
        ('a{l="rate(b[5m])", m=~"c|d"} + {__name__="z"}', {"a"}),
        ('absent(up{job="agui-gateway"})', {"up"}),
        # Grafana variables
        ('sum(rate(r_total{agent=~"$agent", job=~"${job:regex}"}[$window]))', {"r_total"}),
        # a recording-rule style name with colons
        ("job:agui_requests:rate5m", {"job:agui_requests:rate5m"}),
    ],
)
def test_metric_names_extraction(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_selectors_keep_their_matchers_and_variables() -> None:
    expr = (
        'sum by (agent) (rate(r_total{job=~"$job", agent=~"$agent"}[$__rate_interval]))'
        " / on (agent) group_left sum by (agent) (g)"
    )
    assert selectors(expr) == [
        Selector("r_total", 'job=~"$job",agent=~"$agent"'),
        Selector("g", ""),
    ]


def test_a_bogus_name_is_flagged(exported: set[str]) -> None:
    bogus = [
        ("typo", 'sum by (verdict) (rate(agui_gateway_request_total{agent=~"$agent"}[5m]))'),
        ("family name", "histogram_quantile(0.5, rate(agui_gateway_decision_seconds[5m]))"),
        ("no metric", "vector(1)"),
    ]
    problems = unknown_names(bogus, exported)
    assert any("'agui_gateway_request_total' is not exported" in p for p in problems)
    assert any("'agui_gateway_decision_seconds' is not exported" in p for p in problems)
    assert any(p.startswith("no metric:") for p in problems)
    assert len(problems) == 3, problems


def test_variable_queries_are_read() -> None:
    assert promql.variable_expression('label_values(m{job=~"$job"}, agent)') == 'm{job=~"$job"}'
    assert promql.variable_expression("label_values(agent)") is None
    assert promql.variable_expression("query_result(sum(x))") == "sum(x)"


def test_rules_reader_reads_inline_and_block_expressions() -> None:
    text = """groups:
  - name: g
    rules:
      - alert: Inline
        expr: up == 0
      - record: job:x:rate5m
        expr: |
          sum by (job) (
            rate(x_total[5m])
          )
      - alert: Quoted
        expr: 'a{l=''v''} > 1'
"""
    assert promql.rule_expressions(text) == [
        ("alert Inline", "up == 0"),
        ("record job:x:rate5m", "sum by (job) (\nrate(x_total[5m])\n)"),
        ("alert Quoted", "a{l='v'} > 1"),
    ]


# --- the dashboard ---------------------------------------------------------------------------


def test_dashboard_names_only_exported_metrics(dashboard: dict, exported: set[str]) -> None:
    expressions = promql.dashboard_expressions(dashboard)
    assert len(expressions) >= 20
    assert unknown_names(expressions, exported) == []


def test_dashboard_covers_the_issue_list(dashboard: dict) -> None:
    shown = set().union(*(metric_names(e) for _, e in promql.dashboard_expressions(dashboard)))
    assert REQUIRED_ON_DASHBOARD - shown == set()


def test_every_selector_honours_the_agent_and_job_variables(
    dashboard: dict, agent_labelled: set[str], over_all_agents: set[str]
) -> None:
    problems = []
    for where, expr in promql.dashboard_expressions(dashboard):
        if where.startswith("variable 'job'"):
            continue  # the job variable's own query lists every job
        for sel in selectors(expr):
            if 'job=~"$job"' not in sel.matchers:
                problems.append(f"{where}: {sel.name} not filtered by $job")
            if (
                sel.name in agent_labelled
                and not where.startswith("variable 'agent'")
                and 'agent=~"$agent"' not in sel.matchers
            ):
                problems.append(f"{where}: {sel.name} not filtered by $agent")
            # counted over all agents by default: an agent matcher would hide it
            if sel.name in over_all_agents and "agent" in sel.matchers:
                problems.append(f"{where}: {sel.name} has no agent label by default")
    assert problems == []


def test_dashboard_panels_are_complete_and_laid_out(dashboard: dict) -> None:
    panels = list(promql.dashboard_panels(dashboard))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    cells: dict[tuple[int, int], str] = {}
    for panel in panels:
        pos = panel["gridPos"]
        assert 0 <= pos["x"] and pos["x"] + pos["w"] <= 24, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = panel["title"]
        if panel["type"] == "row":
            continue
        # each panel says which question it answers
        assert "?" in panel.get("description", ""), panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip() and target["refId"], panel["title"]


def test_dashboard_variables(dashboard: dict) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    agent = variables["agent"]
    assert agent["type"] == "query" and agent["multi"] and agent["includeAll"]
    assert agent["allValue"] == ".*"
    assert "agent)" in agent["definition"]
    assert dashboard["uid"] == "agui-gateway"


def test_interrupt_latency_panel_is_p50_p90_p99_by_reason(dashboard: dict) -> None:
    panel = next(
        p
        for p in promql.dashboard_panels(dashboard)
        if p["title"] == "Interrupt response latency by reason"
    )
    exprs = [t["expr"] for t in panel["targets"]]
    for q in ("0.5", "0.9", "0.99"):
        assert any(
            e.startswith(f"histogram_quantile({q}, sum by (le, reason)")
            and "agui_gateway_interrupt_response_seconds_bucket" in e
            for e in exprs
        ), q


# --- the rules ---------------------------------------------------------------------------------


def test_rules_name_only_exported_metrics(exported: set[str]) -> None:
    expressions = promql.rule_expressions()
    assert {where.split(" ", 1)[1] for where, _ in expressions} >= REQUIRED_ALERTS
    assert unknown_names(expressions, exported) == []


def test_promtool_check_rules() -> None:
    result = run_promtool("check", "rules", str(promql.ALERTS))
    assert result.returncode == 0, result.stdout + result.stderr
    found = re.search(r"SUCCESS: (\d+) rules found", result.stdout + result.stderr)
    assert found, result.stdout + result.stderr
    # the reader used above saw every rule promtool saw
    assert int(found.group(1)) == len(promql.rule_expressions())


def test_promtool_check_config() -> None:
    result = run_promtool("check", "config", str(promql.PROMETHEUS_YML))
    assert result.returncode == 0, result.stdout + result.stderr


def test_alert_unit_tests_pass() -> None:
    result = run_promtool("test", "rules", str(promql.ALERTS_TEST))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_alert_unit_tests_catch_a_wrong_threshold(tmp_path: Path) -> None:
    text = promql.ALERTS.read_text()
    assert text.count(") > 0.05") == 1
    (tmp_path / "alerts.yml").write_text(text.replace(") > 0.05", ") > 0.5"))
    shutil.copy(promql.ALERTS_TEST, tmp_path / "alerts_test.yml")
    result = run_promtool("test", "rules", "alerts_test.yml", cwd=tmp_path)
    assert result.returncode != 0
    assert "AguiGatewayUncoveredOrMalformedSpike" in result.stdout + result.stderr


def test_promtool_rejects_a_broken_rule(tmp_path: Path) -> None:
    broken = tmp_path / "alerts.yml"
    broken.write_text(
        "groups:\n  - name: g\n    rules:\n      - alert: Broken\n"
        "        expr: sum(rate(agui_gateway_events_total[5m])\n"
    )
    result = run_promtool("check", "rules", str(broken))
    assert result.returncode != 0


# --- docker-compose wiring -------------------------------------------------------------------


def test_compose_mounts_exist_and_gateway_uses_the_internal_listener() -> None:
    text = COMPOSE.read_text()
    mounts = re.findall(r"^\s*-\s*\"?(\./[^:\"]+):", text, flags=re.M)
    assert any("deploy/prometheus" in m for m in mounts)
    assert any("deploy/grafana/provisioning" in m for m in mounts)
    assert any("deploy/grafana/dashboards" in m for m in mounts)
    for mount in mounts:
        assert (promql.REPO_ROOT / mount).exists(), mount
    assert "PLAINTEXT://kafka:19092" in text
    assert re.search(r"AGUI_GATEWAY_BOOTSTRAP_SERVERS:\s*\"?kafka:19092", text)
    assert re.search(r"AGUI_GATEWAY_HTTP_HOST:\s*\"?0\.0\.0\.0", text)
    # Prometheus scrapes the gateway service by its compose name and default port
    assert '"gateway:9464"' in promql.PROMETHEUS_YML.read_text()
