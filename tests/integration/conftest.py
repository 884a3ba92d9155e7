"""Fixtures for tests that need the real local Kafka broker (deploy/kafka.sh).

`kafka_bootstrap` runs `deploy/kafka.sh start`, which reuses a broker that is
already running from the same state dir, and fails the tests (never skips them)
when the broker cannot be started. A broker this session had to start itself is
stopped again at the end of the session unless KAFKA_KEEP_RUNNING=1; one that was
already running is left alone, and so is one started in a lane of `pytest -n`.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import for_code

REPO_ROOT = Path(__file__).resolve().parents[2]
KAFKA_SH = REPO_ROOT / "deploy" / "kafka.sh"
INTEGRATION_DIR = Path(__file__).resolve().parent

# deploy/kafka.sh waits KAFKA_START_TIMEOUT (default 90 s) itself; this is a backstop.
START_TIMEOUT_S = float(os.environ.get("KAFKA_START_TIMEOUT", "90")) + 120
TOPIC_READY_TIMEOUT_S = 30.0

CreateTopics = Callable[..., Awaitable[list[str]]]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test collected under tests/integration as `integration`."""
    for item in items:
        if INTEGRATION_DIR in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.integration)


def kafka_port() -> int:
    return int(os.environ.get("KAFKA_PORT", "9092"))


def kafka_state_dir() -> Path:
    """The state dir deploy/kafka.sh uses (same default as the script)."""
    configured = os.environ.get("KAFKA_STATE_DIR")
    if configured:
        return Path(configured)
    return REPO_ROOT / ".kafka" / str(kafka_port())


def new_unique_name(prefix: str) -> str:
    """A topic/group/transactional id nobody else uses: `<prefix>-<uuid4 hex>`."""
    return f"{prefix}-{uuid.uuid4().hex}"


def _run_kafka_sh(command: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(KAFKA_SH), command],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap address "127.0.0.1:<KAFKA_PORT>" of a running local broker."""
    expected = f"127.0.0.1:{kafka_port()}"
    try:
        already_running = _run_kafka_sh("status", timeout=60).returncode == 0
        result = _run_kafka_sh("start", timeout=START_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"deploy/kafka.sh start could not be run: {exc!r}", pytrace=False)
    if result.returncode != 0:
        pytest.fail(
            f"deploy/kafka.sh start failed (exit {result.returncode}):\n"
            f"{result.stderr}\n{result.stdout}",
            pytrace=False,
        )
    lines = result.stdout.strip().splitlines()
    bootstrap = lines[-1].strip() if lines else ""
    if bootstrap != expected:
        pytest.fail(
            f"deploy/kafka.sh start printed {bootstrap!r}, expected {expected!r}\n{result.stderr}",
            pytrace=False,
        )
    yield bootstrap
    # A lane of `pytest -n` does not stop it: the other lane may still be using it
    # (scripts/test.sh starts it before the lanes and stops it after them).
    in_a_lane = "PYTEST_XDIST_WORKER" in os.environ
    if not already_running and not in_a_lane and os.environ.get("KAFKA_KEEP_RUNNING") != "1":
        _run_kafka_sh("stop", timeout=120)


@pytest.fixture(scope="session")
def kafka_state() -> Path:
    """State dir (pid file, data, logs) of the broker deploy/kafka.sh runs."""
    return kafka_state_dir()


@pytest.fixture(scope="session")
def unique_name() -> Callable[[str], str]:
    """`unique_name(prefix)` -> `<prefix>-<uuid4 hex>` for topics, groups, txn ids."""
    return new_unique_name


@pytest.fixture(scope="session")
async def kafka_admin(kafka_bootstrap: str) -> AsyncIterator[AIOKafkaAdminClient]:
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap, request_timeout_ms=30000)
    await asyncio.wait_for(admin.start(), timeout=30)
    try:
        yield admin
    finally:
        await admin.close()


async def _wait_for_leaders(
    admin: AIOKafkaAdminClient, names: list[str], partitions: int, timeout: float
) -> None:
    """Wait until the metadata shows every topic with all partitions led."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        topics = await admin.describe_topics(names)
        last = topics
        ready = {
            t["topic"]
            for t in topics
            if t["error_code"] == 0
            and len(t["partitions"]) == partitions
            and all(p["leader"] >= 0 for p in t["partitions"])
        }
        if ready == set(names):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topics not ready after {timeout} s: {last!r}")
        await asyncio.sleep(0.1)


@pytest.fixture(scope="session")
async def create_topics(kafka_admin: AIOKafkaAdminClient) -> CreateTopics:
    """`await create_topics(names, partitions=1, configs=None)` -> names.

    Creates the topics (replication factor 1), raises on any per-topic error and
    returns once every partition has a leader.
    """

    async def _create(
        names: list[str] | str,
        partitions: int = 1,
        configs: dict[str, str] | None = None,
    ) -> list[str]:
        if isinstance(names, str):
            names = [names]
        new_topics = [
            NewTopic(
                name=name,
                num_partitions=partitions,
                replication_factor=1,
                topic_configs=dict(configs or {}),
            )
            for name in names
        ]
        response = await asyncio.wait_for(
            kafka_admin.create_topics(new_topics, timeout_ms=20000), timeout=30
        )
        for topic_error in response.topic_errors:
            name, code = topic_error[0], topic_error[1]
            if code != 0:
                message = topic_error[2] if len(topic_error) > 2 else ""
                raise for_code(code)(f"creating topic {name!r} failed: {message}")
        await _wait_for_leaders(kafka_admin, list(names), partitions, TOPIC_READY_TIMEOUT_S)
        return list(names)

    return _create


# --- the secure broker (KAFKA_SECURITY=sasl_ssl deploy/kafka.sh) ---------------------


def secure_ports() -> tuple[int, int]:
    """Client and controller ports of the secure broker: KAFKA_PORT + 100 and + 200."""
    port = int(os.environ.get("KAFKA_SECURE_PORT", kafka_port() + 100))
    controller = int(os.environ.get("KAFKA_SECURE_CONTROLLER_PORT", kafka_port() + 200))
    return port, controller


@pytest.fixture(scope="session")
def secure_kafka() -> Iterator[tuple[str, Path]]:
    """(bootstrap, secure dir) of a SASL_SSL broker with ACLs, started for this session."""
    port, controller = secure_ports()
    env = {
        **os.environ,
        "KAFKA_SECURITY": "sasl_ssl",
        "KAFKA_PORT": str(port),
        "KAFKA_CONTROLLER_PORT": str(controller),
    }
    env.pop("KAFKA_STATE_DIR", None)

    def kafka_sh(command: str, timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(KAFKA_SH), command],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    already_running = kafka_sh("status", timeout=60).returncode == 0
    result = kafka_sh("start", timeout=START_TIMEOUT_S)
    if result.returncode != 0:
        pytest.fail(
            f"secure deploy/kafka.sh start failed (exit {result.returncode}):\n{result.stderr}",
            pytrace=False,
        )
    yield result.stdout.strip().splitlines()[-1], REPO_ROOT / ".kafka" / str(port) / "secure"
    if not already_running and os.environ.get("KAFKA_KEEP_RUNNING") != "1":
        kafka_sh("stop", timeout=120)
