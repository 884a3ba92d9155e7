"""The official `@ag-ui/client` (HttpAgent, pinned 1.0.0) through the edge, the real broker,
a real gateway and a simulated agent.

The client is installed with npm from `tests/edge/node/package.json` into
`.cache/node/edge-client/` (git-ignored) on first use. The agent is
`tests/client/simulated_agent.py`; anything that serves the run-requests topic
(the agent bridge with a real agent) can take its place in `serving_agent`.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.client.simulated_agent import SimulatedAgent
from tests.edge.support import EdgeProcess
from tests.integration.support import REPO_ROOT, GatewayProcess, Namespace

AGENT = "assistant"
NODE_DIR = Path(__file__).resolve().parent / "node"
CACHE = REPO_ROOT / ".cache" / "node" / "edge-client"
CLIENT_VERSION = json.loads((NODE_DIR / "package.json").read_text())["dependencies"][
    "@ag-ui/client"
]


def installed_client() -> Path:
    """node_modules with the pinned @ag-ui/client, installed once into the cache."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            pytest.fail(
                f"`{tool}` is not on PATH: the edge's client tests need Node.js 18+ and npm "
                "(e.g. `apt-get install nodejs npm`)",
                pytrace=False,
            )
    modules = CACHE / "node_modules"
    marker = modules / "@ag-ui" / "client" / "package.json"
    if marker.is_file() and json.loads(marker.read_text())["version"] == CLIENT_VERSION:
        return modules
    CACHE.mkdir(parents=True, exist_ok=True)
    shutil.copy(NODE_DIR / "package.json", CACHE / "package.json")
    result = subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--no-package-lock", "--loglevel=error"],
        cwd=CACHE,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    if result.returncode != 0 or not marker.is_file():
        pytest.fail(
            f"npm install of @ag-ui/client@{CLIENT_VERSION} into {CACHE} failed "
            f"(exit {result.returncode}):\n{result.stderr[-3000:]}",
            pytrace=False,
        )
    return modules


async def drive(modules: Path, url: str, thread_id: str) -> dict:
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(NODE_DIR / "drive_http_agent.cjs"),
        url,
        thread_id,
        env={"PATH": os.environ["PATH"], "NODE_PATH": str(modules)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=180)
    assert proc.returncode == 0, err.decode()
    return json.loads(out.decode().strip().splitlines()[-1])


@pytest.fixture
async def ns(kafka_bootstrap: str) -> Namespace:
    namespace = Namespace(kafka_bootstrap)
    await namespace.create_agent(AGENT, partitions=2)
    return namespace


def serving_agent(ns: Namespace) -> SimulatedAgent:
    return SimulatedAgent(ns.bootstrap, ns.run_requests(AGENT), ns.events(AGENT))


async def test_http_agent_interrupt_guard_rejection_and_resume(
    ns: Namespace, tmp_path: Path, create_topics
) -> None:
    modules = installed_client()
    # The edge's reply topic exists before the gateway starts (see the README's note).
    await create_topics([f"{ns.prefix}.edge-replies"])
    gateway = await GatewayProcess(ns, tmp_path).start()
    edge = await EdgeProcess(ns, tmp_path).start()
    try:
        async with serving_agent(ns) as agent:
            report = await drive(modules, f"{edge.url}/agents/{AGENT}", "thread-node-1")
        sent_run_ids = [i["runId"] for i in agent.inputs]
    finally:
        await edge.stop()
        await gateway.stop()

    first = report["first"]
    assert first["ok"], first
    assert first["types"][0] == "RUN_STARTED" and first["types"][-1] == "RUN_FINISHED"
    assert report["pendingAfterFirst"] == ["approve-run-1"]

    uncovered = report["uncovered"]
    assert not uncovered["ok"] and uncovered["status"] is None
    assert "pending interrupt" in uncovered["message"] and "approve-run-1" in uncovered["message"]

    bad = report["badPayload"]
    assert not bad["ok"] and bad["status"] == 422, bad
    assert bad["types"] == []  # rejected before any run started
    codes = [reason["code"] for reason in bad["payload"]["reasons"]]
    assert codes and set(codes) == {"payload_schema_mismatch"}
    assert bad["payload"]["reasons"][0]["interruptId"] == "approve-run-1"
    assert report["pendingAfterBad"] == ["approve-run-1"]

    resumed = report["resumed"]
    assert resumed["ok"], resumed
    assert resumed["types"][0] == "RUN_STARTED" and resumed["types"][-1] == "RUN_FINISHED"
    assert report["pendingAfterResume"] == []
    assert report["lastMessage"] == "Sent as approved "

    # Only what the gateway forwarded reached the agent: not the guarded run-2, not run-3.
    assert sent_run_ids == ["run-1", "run-4"]
