"""A real Prometheus scrapes a real gateway: the dashboard's queries and the alerts work.

Prometheus is Debian's `prometheus` package (`deploy/prometheus.sh ensure`), run by
this test on a free loopback port with a generated config: scrape the gateway's
/metrics every second, load deploy/prometheus/alerts.yml, evaluate every second.
The dashboard's own expressions are sent to /api/v1/query with its variables
filled in: all must be accepted, the key ones must return data.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.support import GatewayProcess, Namespace, free_port, produce
from tests.observe import promql

pytestmark = pytest.mark.integration

AGENT = "scraped"
JOB = "agui-gateway"  # the job name alerts.yml expects


def prometheus_binary() -> str:
    found = shutil.which("prometheus") or (
        "/usr/bin/prometheus" if Path("/usr/bin/prometheus").is_file() else None
    )
    if found is None:
        pytest.fail(
            "prometheus not found: run `deploy/prometheus.sh ensure` (installs Debian's "
            "`prometheus` package)",
            pytrace=False,
        )
    return found


class PrometheusServer:
    def __init__(self, workdir: Path, target: str) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.log_path = workdir / "prometheus.log"
        config = {
            "global": {
                "scrape_interval": "1s",
                "scrape_timeout": "1s",
                "evaluation_interval": "1s",
            },
            "rule_files": [str(promql.ALERTS)],
            "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": [target]}]}],
        }
        self.config_path = workdir / "prometheus.yml"
        self.config_path.write_text(json.dumps(config, indent=2))  # JSON is YAML
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30) -> None:
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    prometheus_binary(),
                    f"--config.file={self.config_path}",
                    f"--storage.tsdb.path={self.workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"prometheus exited {self.proc.returncode}:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(self.url("/-/ready"), timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"prometheus not ready in {timeout}s:\n{self.log_tail()}")

    def stop(self, timeout: float = 15) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=timeout)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(self.url(path) + query, timeout=5) as r:
                body = json.load(r)
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{path} {params}: HTTP {exc.code} {exc.read()!r}") from None
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("/api/v1/query", query=expr)
        assert data["resultType"] == "vector", data
        return data["result"]

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@pytest.fixture
def prometheus_factory(tmp_path: Path) -> Iterator[Callable[[str], PrometheusServer]]:
    servers: list[PrometheusServer] = []

    def start(target: str) -> PrometheusServer:
        server = PrometheusServer(tmp_path, target)
        servers.append(server)
        server.start()
        return server

    yield start
    for server in servers:
        server.stop()


def fill_variables(expr: str, agent: str) -> str:
    """The dashboard's Grafana variables as Grafana would fill them for one agent."""
    values = {"__rate_interval": "1m", "window": "1h", "agent": agent, "job": JOB}
    return re.sub(r"\$\{?(\w+)\}?", lambda m: values[m.group(1)], expr)


def dashboard_targets(title: str) -> list[str]:
    for panel in promql.dashboard_panels(promql.load_dashboard()):
        if panel["title"] == title:
            return [t["expr"] for t in panel["targets"]]
    raise AssertionError(f"no panel {title!r} on the dashboard")


def finite(result: list[dict[str, Any]]) -> list[float]:
    return [float(r["value"][1]) for r in result if math.isfinite(float(r["value"][1]))]


async def wait_for(
    check: Callable[[], Any], what: str, prom: PrometheusServer, timeout: float = 25
) -> Any:
    """Poll `check` (blocking, in a thread) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await asyncio.to_thread(check)
        if last:
            return last
        await asyncio.sleep(0.5)
    raise AssertionError(f"{what}: nothing after {timeout}s (last {last!r})\n{prom.log_tail()}")


def interrupted(thread: str, interrupt: dict) -> list[tuple[str, dict]]:
    return [
        (thread, {"type": "RUN_STARTED", "threadId": thread, "runId": "r1"}),
        (
            thread,
            {
                "type": "RUN_FINISHED",
                "threadId": thread,
                "runId": "r1",
                "outcome": {"type": "interrupt", "interrupts": [interrupt]},
            },
        ),
    ]


def resume(thread: str, *entries: dict) -> tuple[str, dict]:
    return thread, {"threadId": thread, "runId": "r2", "messages": [], "resume": list(entries)}


@pytest.fixture
async def ns(kafka_bootstrap: str) -> Namespace:
    return Namespace(kafka_bootstrap)


async def test_prometheus_scrapes_the_gateway_and_runs_dashboard_and_alerts(
    ns: Namespace, tmp_path: Path, prometheus_factory: Callable[[str], PrometheusServer]
) -> None:
    await ns.create_agent(AGENT, partitions=1)
    gateway = await GatewayProcess(ns, tmp_path, sweep_interval_s=0.2).start()
    try:
        prom = await asyncio.to_thread(prometheus_factory, f"127.0.0.1:{gateway.port}")

        # round 1: creates the series (a counter's first increment is invisible to rate())
        await produce(
            ns.bootstrap,
            ns.events(AGENT),
            [
                *interrupted("a", {"id": "ia", "reason": "tool_call", "toolCallId": "c"}),
                # expired on delivery: swept as expired unanswered
                *interrupted(
                    "x",
                    {"id": "ix", "reason": "input_required", "expiresAt": "2001-01-01T00:00:00Z"},
                ),
            ],
        )
        await produce(
            ns.bootstrap,
            ns.requests(AGENT),
            [resume("a"), resume("a", {"interruptId": "ia", "status": "resolved"})],
        )
        await wait_for(
            # counted over all agents under the default label policy
            lambda: prom.query("sum(agui_gateway_interrupt_response_seconds_count) == 1"),
            "round 1 scraped",
            prom,
        )

        # round 2: the same kinds again, so every rate() and histogram has an increase
        await produce(
            ns.bootstrap,
            ns.events(AGENT),
            interrupted("b", {"id": "ib", "reason": "tool_call", "toolCallId": "c"}),
        )
        await produce(
            ns.bootstrap,
            ns.requests(AGENT),
            [resume("b"), resume("b", {"interruptId": "ib", "status": "resolved"})],
        )
        await wait_for(
            lambda: prom.query(
                # the verdicts over all agents, the open interrupts per agent (the default)
                "sum(agui_gateway_requests_total) == 4 "
                f'and sum(agui_gateway_interrupts_open{{agent="{AGENT}"}}) == 3'
            ),
            "round 2 scraped",
            prom,
        )

        assert [float(r["value"][1]) for r in prom.query(f'up{{job="{JOB}"}}')] == [1.0]

        def panel(title: str, index: int = 0) -> list[dict[str, Any]]:
            return prom.query(fill_variables(dashboard_targets(title)[index], AGENT))

        # the dashboard's key queries, exactly as written there
        def verdict_rates() -> dict[str, float] | None:
            rates = {
                r["metric"]["verdict"]: float(r["value"][1]) for r in panel("Requests by verdict")
            }
            return rates if rates.get("forward", 0) > 0 and rates.get("reject", 0) > 0 else None

        rates = await wait_for(verdict_rates, "request rates by verdict", prom)
        assert {verdict for verdict, rate in rates.items() if rate > 0} == {"forward", "reject"}

        reasons = panel("Rejections by reason")
        nonzero = [r for r in reasons if float(r["value"][1]) > 0]  # series exist from zero
        assert [r["metric"]["reason"] for r in nonzero] == ["uncovered_interrupt"]
        assert finite(nonzero) and finite(nonzero)[0] > 0

        for index in range(3):  # p50, p90, p99
            quantiles = panel("Interrupt response latency by reason", index)
            assert [r["metric"] for r in quantiles] == [{"reason": "tool_call"}]
            values = finite(quantiles)
            assert values and values[0] >= 0, quantiles

        open_now = panel("Open interrupts by agent")
        assert [(r["metric"]["agent"], float(r["value"][1])) for r in open_now] == [(AGENT, 3.0)]

        throughput = panel("Event throughput")  # over all agents by default
        assert [r["metric"] for r in throughput] == [{}]
        assert finite(throughput)[0] > 0

        assert finite(panel("Decision latency"))  # p50 over all requests

        # the worst partition of each topic role answers even when nothing lags
        worst = panel("Consumer lag", 1)
        assert sorted(r["metric"]["topic"] for r in worst) == ["events", "requests"]
        assert len(finite(worst)) == 2

        # every expression of the dashboard (panels and variables) is valid PromQL
        for where, expr in promql.dashboard_expressions(promql.load_dashboard()):
            filled = fill_variables(expr, AGENT)
            try:
                prom.query(filled)
            except AssertionError as exc:
                raise AssertionError(f"{where}: Prometheus refused {filled!r}: {exc}") from None

        # the alert rules: loaded, evaluated without errors, and one fires
        groups = prom.api("/api/v1/rules")["groups"]
        loaded = {r["name"]: r for g in groups for r in g["rules"]}
        expected = {where.split(" ", 1)[1] for where, _ in promql.rule_expressions()}
        assert set(loaded) == expected

        def healthy() -> bool:
            rules = [r for g in prom.api("/api/v1/rules")["groups"] for r in g["rules"]]
            return all(r["health"] == "ok" for r in rules)

        await wait_for(healthy, "every rule evaluated with health ok", prom)

        def expiry_alert() -> list[dict[str, Any]]:
            return [
                a
                for a in prom.api("/api/v1/alerts")["alerts"]
                if a["labels"]["alertname"] == "AguiGatewayInterruptsExpiringUnanswered"
                and a["state"] == "firing"
            ]

        firing = await wait_for(expiry_alert, "the expiry alert firing", prom)
        # expiries are counted over all agents under the default label policy
        assert [a["labels"].get("agent") for a in firing] == [None]
        assert firing[0]["labels"]["severity"] == "warning"
        assert firing[0]["annotations"]["summary"] == "all agents: interrupts expired unanswered"
    finally:
        await gateway.stop()
