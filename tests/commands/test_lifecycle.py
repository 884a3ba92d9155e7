"""The stop's bound (`serving`, `run_until_stopped`): a stop that hangs ends the process."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap

from prometheus_client import CollectorRegistry

from gateway.commands import lifecycle
from gateway.http import HttpServer
from gateway.settings import Settings


def ready() -> tuple[bool, dict]:
    return True, {}


async def stopped_by_sigterm(timeout_s: float, *, hang: bool) -> None:
    """Serve, SIGTERM ourselves, then finish at once or hang in the stop path."""
    stop = asyncio.Event()
    http = HttpServer("127.0.0.1", 0, CollectorRegistry(), ready)
    async with lifecycle.serving(http, stop, timeout_s):
        os.kill(os.getpid(), signal.SIGTERM)
        await stop.wait()
        if hang:  # e.g. commit_transaction waiting for a broker that is gone
            await asyncio.Event().wait()


def test_a_stop_that_hangs_is_cut_at_the_bound_and_exits_3(caplog) -> None:
    settings = Settings(shutdown_timeout_s=0.3)
    code = lifecycle.run_until_stopped("run", settings, stopped_by_sigterm(0.3, hang=True))
    assert code == lifecycle.EXIT_SHUTDOWN_TIMEOUT == 3
    lines = [r.getMessage() for r in caplog.records if r.name == "gateway.service"]
    assert len(lines) == 1
    assert lines[0].startswith("shutdown did not finish within shutdown_timeout_s (0.3 s)")
    # where the stop waited: the hanging coroutine, down to the wait it is stuck in
    (record,) = [r for r in caplog.records if r.name == "gateway.service"]
    assert any("stopped_by_sigterm > Event.wait" in where for where in record.waiting), (
        record.waiting
    )
    assert lifecycle._bounds == []  # disarmed: nothing ends this process later


def test_a_stop_within_the_bound_exits_0_and_disarms_it(caplog) -> None:
    settings = Settings(shutdown_timeout_s=5)
    code = lifecycle.run_until_stopped("run", settings, stopped_by_sigterm(5, hang=False))
    assert code == 0
    assert not [r for r in caplog.records if r.name == "gateway.service"]
    assert lifecycle._bounds == []


def test_work_that_hangs_even_when_cancelled_still_ends_the_process() -> None:
    script = textwrap.dedent(
        """
        import asyncio, os, signal
        from prometheus_client import CollectorRegistry
        from gateway.commands import lifecycle
        from gateway.http import HttpServer
        from gateway.observe import logs
        from gateway.settings import Settings

        async def main():
            stop = asyncio.Event()
            http = HttpServer("127.0.0.1", 0, CollectorRegistry(), lambda: (True, {}))
            async with lifecycle.serving(http, stop, 0.3):
                os.kill(os.getpid(), signal.SIGTERM)
                while True:  # swallows the cancellation: a close that never returns
                    try:
                        await asyncio.Event().wait()
                    except asyncio.CancelledError:
                        pass

        logs.configure("INFO")
        raise SystemExit(lifecycle.run_until_stopped("run", Settings(), main()))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 3, result.stderr
    errors = [
        json.loads(line)["msg"]
        for line in result.stderr.splitlines()
        if json.loads(line)["level"] == "error"
    ]
    assert len(errors) == 1 and "shutdown did not finish" in errors[0], result.stderr
    (line,) = [json.loads(line) for line in result.stderr.splitlines() if '"error"' in line]
    assert any("main > Event.wait" in where for where in line["waiting"]), line
