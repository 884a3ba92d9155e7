"""`agui-gateway run` fails clearly when it cannot start."""

import os
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


def test_unreachable_kafka_is_exit_2_with_one_clear_line():
    result = run({"AGUI_GATEWAY_BOOTSTRAP_SERVERS": "127.0.0.1:1", "AGUI_GATEWAY_HTTP_PORT": "0"})
    assert result.returncode == 2
    assert "cannot run against Kafka at 127.0.0.1:1" in result.stderr
    assert "Traceback" not in result.stderr


def test_invalid_settings_are_exit_2_naming_the_setting():
    result = run({"AGUI_GATEWAY_MERGE_MAX_WAIT_MS": "-5"})
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "agui-gateway: invalid setting merge_max_wait_ms (env AGUI_GATEWAY_MERGE_MAX_WAIT_MS): "
        "Input should be greater than or equal to 0 (got '-5')"
    ]
