"""The official `@ag-ui/client` (HttpAgent, pinned 1.0.0) through the whole loop:
HttpAgent -> `agui-gateway edge` -> requests topic -> `agui-gateway run` -> run-requests
-> `agui-gateway bridge` -> a real pydantic-ai agent -> events -> edge -> HttpAgent.

The broker is the real local one; the edge, the gateway and the bridge are real
subprocesses; the agent is the bridge tests' pydantic-ai agent (its AG-UI adapter, a
`FunctionModel`, one tool with `requires_approval=True`), served by uvicorn in this
test's event loop, offline. Its interrupt carries pydantic-ai's own `responseSchema`
(`approved` a strict boolean, required), which the gateway checks resumes against.

The client is installed with npm from `tests/edge/node/package.json` into
`.cache/node/edge-client/` (git-ignored) on first use.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.bridge.agents import Served, approval_agent
from tests.bridge.support import BridgeProcess, bridge_settings
from tests.edge.support import EdgeProcess
from tests.integration.support import REPO_ROOT, GatewayProcess, Namespace

pytestmark = pytest.mark.integration

AGENT = "payments"
USER = [{"id": "u1", "role": "user", "content": "please pay alice"}]

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
    CACHE.mkdir(parents=True, exist_ok=True)
    # one install at a time: the suite's two lanes can both get here first
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (marker.is_file() and json.loads(marker.read_text())["version"] == CLIENT_VERSION):
            _npm_install(marker)
    return modules


def _npm_install(marker: Path) -> None:
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


async def drive(modules: Path, url: str, thread_id: str, messages: list[Any]) -> dict:
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(NODE_DIR / "drive_http_agent.cjs"),
        url,
        thread_id,
        json.dumps(messages),
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


async def test_http_agent_through_gateway_bridge_and_pydantic_ai_agent(
    ns: Namespace, tmp_path: Path, create_topics
) -> None:
    modules = installed_client()
    # The edge's reply topic exists before the gateway starts (see docs/reference/records.md, reply topics created while the gateway runs).
    await create_topics([f"{ns.prefix}.edge-replies"])
    app, counters = approval_agent()
    async with Served(app) as served:
        gateway = await GatewayProcess(ns, tmp_path, "gateway").start()
        bridge = await BridgeProcess(
            ns, tmp_path, "bridge", **bridge_settings(ns, {AGENT: {"url": served.url}})
        ).start()
        edge = await EdgeProcess(ns, tmp_path).start()
        try:
            report = await drive(modules, f"{edge.url}/agents/{AGENT}", "thread-node-1", USER)
        finally:
            await edge.stop()
            await bridge.stop()
            await gateway.stop()

    # 1. The agent wants approval for its tool: the run ends in an interrupt carrying
    #    pydantic-ai's responseSchema; the tool has not run.
    first = report["first"]
    assert first["ok"], first
    assert first["types"][0] == "RUN_STARTED" and first["types"][-1] == "RUN_FINISHED"
    assert "TOOL_CALL_START" in first["types"]
    [interrupt] = report["pendingAfterFirst"]
    schema = interrupt["responseSchema"]
    assert schema is not None and "approved" in schema.get("required", []), interrupt
    assert report["messagesAfterFirst"][-1] == {
        "role": "assistant",
        "toolCalls": ["transfer_funds"],
    }

    # 2. The client's own guard refuses a run leaving the interrupt uncovered, unsent.
    uncovered = report["uncovered"]
    assert not uncovered["ok"] and uncovered["status"] is None, uncovered
    assert "pending interrupt" in uncovered["message"]
    assert interrupt["id"] in uncovered["message"]

    # 3. A resume breaking the responseSchema: the gateway's 422, before any run starts.
    bad = report["badPayload"]
    assert not bad["ok"] and bad["status"] == 422, bad
    assert bad["types"] == []
    codes = [reason["code"] for reason in bad["payload"]["reasons"]]
    assert codes and set(codes) == {"payload_schema_mismatch"}
    assert bad["payload"]["reasons"][0]["interruptId"] == interrupt["id"]
    assert [i["id"] for i in report["pendingAfterBad"]] == [interrupt["id"]]

    # 4. The approving resume: the tool runs and the run completes.
    resumed = report["resumed"]
    assert resumed["ok"], resumed
    assert resumed["types"][0] == "RUN_STARTED" and resumed["types"][-1] == "RUN_FINISHED"
    assert report["pendingAfterResume"] == []
    assert report["lastMessage"] == {"role": "assistant", "content": "Done: sent 100 to alice"}

    # The agent's own counters: only the forwarded runs reached it (not the guarded
    # run-2, not the rejected run-3), and the approved tool ran exactly once.
    assert counters.run_ids == ["run-1", "run-4"]
    assert counters.requests == 2
    assert counters.tool_calls == 1
