"""scripts/run.sh runs the gateway from a regular install of what it needs, without dev tools."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.checkout import copy_checkout
from tests.integration.support import Namespace

DEV_TOOLS = {"pytest", "mypy", "ruff", "hypothesis", "pyinstrument", "ag-ui-validate"}
NEEDED = {"agui-gateway", "aiokafka", "fastavro", "pydantic", "prometheus-client", "rich"}
DEMO_EXTRA = {"pydantic-ai-slim"}  # demo --real-agent


def test_run_sh_installs_the_gateway_without_the_dev_tools(
    tmp_path: Path, kafka_bootstrap: str, unique_name
) -> None:
    tree = copy_checkout(tmp_path / "clone")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["KAFKA_PORT"] = "not-a-port"  # --help must not start a broker
    result = subprocess.run(
        [str(tree / "scripts" / "run.sh"), "--help"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    assert "--rate" in result.stdout and "--duration" in result.stdout, result.stdout
    assert "--real-agent" in result.stdout, result.stdout
    assert "kafka.sh" not in result.stderr

    python = tree / ".venv-run" / "bin" / "python"
    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert listed.returncode == 0, listed.stderr
    names = {p["name"].lower().replace("_", "-") for p in json.loads(listed.stdout)}
    assert NEEDED | DEMO_EXTRA <= names, sorted((NEEDED | DEMO_EXTRA) - names)
    assert not names & DEV_TOOLS, sorted(names & DEV_TOOLS)
    assert not (tree / ".venv").exists()
    # a regular install: the code runs from the venv, not from the clone
    where = subprocess.run(
        [str(python), "-c", "import gateway; print(gateway.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert where.returncode == 0, where.stderr
    assert (tree / ".venv-run") in Path(where.stdout.strip()).parents, where.stdout

    # Given a broker (as the compose stack's), run.sh starts none and runs the demo on it,
    # with the real agent behind the bridge (the demo extra is installed).
    ns = Namespace(kafka_bootstrap)
    demo_env = {**ns.env(http_port=0), "KAFKA_PORT": "not-a-port", "COLUMNS": "200"}
    demo_env.pop("PYTHONPATH", None)
    agent = unique_name("rs")[:20]
    demo = subprocess.run(
        [
            str(tree / "scripts" / "run.sh"),
            *("--agent", agent, "--duration", "4", "--rate", "2", "--real-agent"),
        ],
        cwd=tree,
        env=demo_env,
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
    )
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "kafka.sh" not in demo.stderr, demo.stderr
    assert "=== final summary ===" in demo.stdout
    assert f"real agent '{agent}-payments'" in demo.stdout, demo.stdout[-3000:]
