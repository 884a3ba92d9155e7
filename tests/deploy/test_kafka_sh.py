"""deploy/kafka.sh formats KRaft storage with any valid cluster id, and repairs a bad saved one.

These run the real script and Kafka's own StorageTool (the jars the test
command already resolved) on a temporary state dir; no broker is started.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.integration.support import REPO_ROOT, free_port

KAFKA_SH = REPO_ROOT / "deploy" / "kafka.sh"
CLUSTER_ID = re.compile(r"^[A-Za-z0-9_-]{22}$")


def kafka_sh(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    port = free_port()
    env = dict(os.environ, KAFKA_STATE_DIR=str(state), KAFKA_PORT=str(port))
    env["KAFKA_CONTROLLER_PORT"] = str(free_port())
    return subprocess.run(
        [str(KAFKA_SH), *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )


def formatted_id(state: Path) -> str:
    meta = (state / "data" / "meta.properties").read_text()
    match = re.search(r"^cluster\.id=(.*)$", meta, re.MULTILINE)
    assert match, meta
    return match.group(1)


# Ids an older version of the script saved: 1 in 64 started with '-', and
# "format -t <id>" then read the id as an option.
DASH_IDS = ["-tBcdefghijklmnopqrstu", "--cluster-id-is-valid_"]


@pytest.mark.parametrize("saved", DASH_IDS)
def test_a_saved_id_starting_with_a_dash_formats(tmp_path: Path, saved: str) -> None:
    tmp_path.joinpath("cluster.id").write_text(saved + "\n")
    result = kafka_sh(tmp_path, "format")
    assert result.returncode == 0, result.stderr
    assert formatted_id(tmp_path) == saved
    assert result.stdout.strip() == saved


def test_cluster_id_option_starting_with_a_dash_formats(tmp_path: Path) -> None:
    result = kafka_sh(tmp_path, "format", "--cluster-id=-abcdefghijklmnopqrstu")
    assert result.returncode == 0, result.stderr
    assert formatted_id(tmp_path) == "-abcdefghijklmnopqrstu"
    assert tmp_path.joinpath("cluster.id").read_text().strip() == "-abcdefghijklmnopqrstu"
    # formatted storage keeps its id: another one is refused, not silently ignored
    again = kafka_sh(tmp_path, "format", "--cluster-id=AAAAAAAAAAAAAAAAAAAAAQ")
    assert again.returncode == 1
    assert "already formatted with cluster id -abcdefghijklmnopqrstu" in again.stderr


def test_a_saved_id_that_cannot_work_is_replaced_by_kafkas_own(tmp_path: Path) -> None:
    tmp_path.joinpath("cluster.id").write_text("-t\n")
    result = kafka_sh(tmp_path, "format")
    assert result.returncode == 0, result.stderr
    assert "the saved cluster id '-t'" in result.stderr and "replaced" in result.stderr
    new = formatted_id(tmp_path)
    assert CLUSTER_ID.match(new) and not new.startswith("-"), new
    assert tmp_path.joinpath("cluster.id").read_text().strip() == new
    assert result.stdout.strip() == new


def test_an_invalid_cluster_id_option_is_rejected_before_formatting(tmp_path: Path) -> None:
    result = kafka_sh(tmp_path, "format", "--cluster-id=nope")
    assert result.returncode == 1
    assert "--cluster-id=nope is not a Kafka cluster id" in result.stderr
    assert not (tmp_path / "data" / "meta.properties").exists()
