"""`python -m bench --size tiny` runs end to end against the test broker.

No timing thresholds: the figures only have to exist and be positive, finite
numbers, with both result files written.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]

EXPECTED = {
    "ingest.ratio",
    "ingest.gateway_events_per_s",
    "ingest.baseline_events_per_s",
    "ingest.gateway_vs_quix",
    "ingest.quix_events_per_s",
    "decisions.ratio",
    "decisions.gateway_per_s",
    "decisions.baseline_per_s",
    "latency.p50_ms",
    "latency.p99_ms",
    "pause.recovery_seconds",
    "pause.p99_after_ms",
    "hog.p99_ms",
    "hog.p50_ms",
    "memory.idle_bytes_per_thread",
    "memory.interrupted_bytes_per_thread",
    "memory.soak_ratio",
    "memory.soak_bytes_per_thread",
    "restore.ratio",
    "core.judge_per_s",
    "core.apply_event_per_s",
    # the fleet at tiny: 2 agents
    "fleet.2.ready_seconds",
    "fleet.2.rss_mib",
    "fleet.2.connections",
    "fleet.2.metrics_kb",
    "fleet.2.cpu_percent_idle",
    "fleet.2.p99_ms_200rps",
    # the same fleet in one group (issue 26)
    "fleet.group.2.ready_seconds",
    "fleet.group.2.rss_mib",
    "fleet.group.2.connections",
    "fleet.group.2.metrics_kb",
    "fleet.group.2.cpu_percent_idle",
    "fleet.group.2.p99_ms_50rps",
    "fleet.group.2.p99_ms_200rps",
    "fleet.group.2.rss_peak_mib",
    "fleet.group.2.held_back",
    "fleet.2.rss_peak_mib",
    # the whole loop (issue 25): edge, gateway, bridge and an agent stub, per approving resume
    # the inbox's view (issue 28): memory per open interrupt, the API's percentiles
    "inbox.bytes_per_interrupt",
    "inbox.api_p99_ms",
    "inbox.api_p50_ms",
    "loop.own_p50_ms",
    "loop.own_p95_ms",
    "loop.resume_p50_ms",
    "loop.resume_p95_ms",
    "loop.verdict_p50_ms",
    "loop.verdict_p95_ms",
    "loop.to_agent_p50_ms",
    "loop.to_agent_p95_ms",
    "loop.to_client_p50_ms",
    "loop.to_client_p95_ms",
}
# figures that may truly be zero (p99 already back in the first window after the pause;
# an idle gateway that used no CPU tick in the idle span; a backlog far under
# pending_max_bytes, never held back)
MAY_BE_ZERO = {
    "pause.recovery_seconds",
    "fleet.2.cpu_percent_idle",
    "fleet.group.2.cpu_percent_idle",
    "fleet.group.2.held_back",
}


def test_tiny_benchmark_writes_every_figure(kafka_bootstrap: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench", "--size", "tiny"]
        + ["--bootstrap", kafka_bootstrap, "--out", str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr[-4000:] + result.stdout[-2000:]
    data = json.loads((tmp_path / "latest.json").read_text())
    assert (tmp_path / "latest.md").read_text().startswith("# agui-gateway benchmark (tiny)")
    figures = {f["key"]: f for f in data["figures"]}
    assert EXPECTED <= set(figures), sorted(EXPECTED - set(figures))
    for key, f in figures.items():
        value = f["value"]
        assert isinstance(value, int | float) and math.isfinite(value), (key, value)
        assert value > 0 or (key in MAY_BE_ZERO and value == 0), (key, value)
    headline = [f for f in figures.values() if f["headline"]]
    assert headline and all(f["target"] and isinstance(f["met"], bool) for f in headline)
    # the report's own tables and the scenarios' facts that are not figures
    markdown = (tmp_path / "latest.md").read_text()
    assert "## Fleet" in markdown
    assert "| own topics (4 partitions each) | 2 (8) |" in markdown
    assert "| group (8 partitions) | 2 (8) |" in markdown
    # adding an agent either was measured, or the gateway's exit is recorded as the finding
    by_layout = {r["layout"]: r for r in data["details"]["fleet"]["results"]}
    assert sorted(by_layout) == ["agent", "group"]
    fleet, group = by_layout["agent"], by_layout["group"]
    assert "fleet.2.add_agent_worst_ms" in figures or fleet["add_agent_error"], fleet
    # every forward was matched to its request by agent and correlation id
    assert fleet["forwards_unmatched"] == 0 and group["forwards_unmatched"] == 0
    # an agent added to the group: no topic, served by its first records, no rebalance
    assert group["add_agent_first_forward_seconds"] > 0, group
    assert (group["add_agent_revoked"], group["add_agent_prepared"]) == (0, 0), group
    assert group["add_agent_reassigned"] is False, group
    assert "fleet.group.2.add_agent_p99_ratio" in figures
    assert data["details"]["ingest"]["quix_peer"].startswith("bench/quixpeer.py")
    pause = data["details"]["pause"]["runs"][0]
    assert pause["disturbance"]["resumed_at_s"] - pause["disturbance"]["stopped_at_s"] >= 2
    assert data["details"]["hog"]["runs"][0]["hog_cpu_percent"] > 0
    # every conversation of the loop ran both its runs through the stub, and was measured
    loop = data["details"]["loop"]
    assert loop["agent_requests"] == 2 * loop["conversations"], loop
    assert loop["measured"] == loop["conversations"] - loop["warmup"] > 0, loop
    machine = data["machine"]
    assert machine["nproc"] >= 1 and machine["memory_bytes"] > 0 and machine["python"]
