"""`agui-gateway run` fails clearly when it cannot start."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

GATEWAY = Path(sys.executable).with_name("agui-gateway")


def run(env_extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGUI_GATEWAY_")}
    env.update(env_extra)
    return subprocess.run(
        [str(GATEWAY), "run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        stdin=subprocess.DEVNULL,
    )


def records(stderr: str) -> list[dict]:
    """stderr as JSON Lines: every line must be one JSON object."""
    return [json.loads(line) for line in stderr.splitlines()]


def test_unreachable_kafka_is_exit_2_with_one_clear_line():
    result = run({"AGUI_GATEWAY_BOOTSTRAP_SERVERS": "127.0.0.1:1", "AGUI_GATEWAY_HTTP_PORT": "0"})
    assert result.returncode == 2
    errors = [r["msg"] for r in records(result.stderr) if r["level"] == "error"]
    assert any("cannot run against Kafka at 127.0.0.1:1" in e for e in errors)
    assert "Traceback" not in result.stderr


def test_invalid_settings_are_exit_2_naming_the_setting():
    result = run({"AGUI_GATEWAY_MERGE_MAX_WAIT_MS": "-5"})
    assert result.returncode == 2
    assert [(r["level"], r["msg"]) for r in records(result.stderr)] == [
        (
            "error",
            "agui-gateway: invalid setting merge_max_wait_ms (env AGUI_GATEWAY_MERGE_MAX_WAIT_MS): "
            "Input should be greater than or equal to 0 (got '-5')",
        )
    ]


def test_an_unknown_variable_and_a_bad_settings_file_name_their_source(tmp_path):
    path = tmp_path / "gateway.toml"
    path.write_text("bogus = 1\n")
    result = run({"AGUI_GATEWAY_CONFIG_FILE": str(path)})
    assert result.returncode == 2
    assert [r["msg"] for r in records(result.stderr)] == [
        f"agui-gateway: invalid setting bogus (settings file {path}, key bogus): no such setting"
    ]
    result = run({"AGUI_GATEWAY_BOGUS": "1"})
    assert result.returncode == 2
    assert [r["msg"] for r in records(result.stderr)] == [
        "agui-gateway: invalid settings: environment variable AGUI_GATEWAY_BOGUS names no setting"
    ]


def test_a_port_that_cannot_be_bound_is_reported_as_that():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run(
            {"AGUI_GATEWAY_BOOTSTRAP_SERVERS": "127.0.0.1:1", "AGUI_GATEWAY_HTTP_PORT": str(port)}
        )
    assert result.returncode == 2
    errors = [r["msg"] for r in records(result.stderr) if r["level"] == "error"]
    assert errors == [
        f"agui-gateway run: cannot listen for HTTP on 127.0.0.1:{port}: Address already in use"
    ]
