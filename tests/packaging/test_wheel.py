"""`pip install .` gives a working gateway: the wheel, installed outside the checkout.

To cover a new console command, add it to COMMANDS (its `--help` must work
from an installed wheel) and, if it talks to Kafka, a test like
`test_installed_run_writes_state_restarts_and_restores` that starts it with
`installed.script()` from `outside`.
"""

from __future__ import annotations

import asyncio
import subprocess
import zipfile
from pathlib import Path

import orjson
import pytest

from tests.integration.support import (
    REPO_ROOT,
    GatewayProcess,
    Namespace,
    collect,
    header,
    produce,
    values,
)
from tests.packaging.conftest import Installed

# agui-gateway subcommands an installed wheel must offer.
COMMANDS = ["run", "check", "topics", "demo", "bridge", "edge", "acls", "audit"]
AGENT = "pkg"


def test_the_wheel_ships_every_schema_file(wheel: Path) -> None:
    expected = sorted(
        p.name for p in (REPO_ROOT / "schemas").iterdir() if p.suffix in (".avsc", ".json")
    )
    assert expected, "no schema files in schemas/"
    with zipfile.ZipFile(wheel) as zf:
        shipped = sorted(Path(n).name for n in zf.namelist() if n.startswith("gateway/schemas/"))
    assert set(expected) <= set(shipped), shipped


def run_outside(
    installed: Installed, outside: Path, *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run the installed venv's program with `args` from a directory outside the checkout."""
    return subprocess.run(
        list(args),
        cwd=outside,
        env=installed.env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_installed_package_reads_its_schemas_outside_the_checkout(
    installed: Installed, outside: Path
) -> None:
    code = (
        "import gateway, gateway.codec.changelog as c; "
        "c.schema(c.AVRO_VERSIONS[-1]); print(gateway.__file__)"
    )
    result = run_outside(installed, outside, str(installed.python), "-c", code)
    assert result.returncode == 0, result.stderr
    location = Path(result.stdout.strip())
    assert installed.venv in location.parents, location  # not the checkout's sources


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_of_the_installed_script_answers_help(
    installed: Installed, outside: Path, command: str
) -> None:
    result = run_outside(installed, outside, str(installed.script()), command, "--help")
    assert result.returncode == 0, result.stderr
    assert command in result.stdout


def test_every_module_of_the_installed_package_imports(installed: Installed, outside: Path) -> None:
    """The wheel carries every module with what it imports: the bridge, the edge, the client."""
    script = (
        "import importlib, pkgutil, gateway\n"
        "names = [m.name for m in pkgutil.walk_packages(gateway.__path__, 'gateway.')\n"
        "         if not m.name.endswith('.__main__')]  # that one runs the command\n"
        "for name in names: importlib.import_module(name)\n"
        "print(len(names), ' '.join(names))\n"
    )
    result = run_outside(installed, outside, str(installed.python), "-c", script, timeout=120)
    assert result.returncode == 0, result.stderr
    for module in ("gateway.bridge.service", "gateway.edge.app", "gateway.client.client"):
        assert module in result.stdout.split()


def thread_events(thread: str) -> list[tuple[str, dict]]:
    run = f"{thread}-r1"
    return [
        (thread, {"type": "RUN_STARTED", "threadId": thread, "runId": run}),
        (
            thread,
            {
                "type": "RUN_FINISHED",
                "threadId": thread,
                "runId": run,
                "outcome": {
                    "type": "interrupt",
                    "interrupts": [
                        {"id": "a", "reason": "tool_call"},
                        {"id": "b", "reason": "input_required"},
                    ],
                },
            },
        ),
    ]


def resume(thread: str, cover_b: bool) -> dict:
    entries = [{"interruptId": "a", "status": "resolved", "payload": {"ok": True}}]
    if cover_b:
        entries.append({"interruptId": "b", "status": "cancelled"})
    return {"threadId": thread, "runId": f"{thread}-r2", "messages": [], "resume": entries}


async def wait_for_sample(gw: GatewayProcess, sample: str, at_least: float) -> None:
    seen = 0.0
    for _ in range(300):
        text = await asyncio.to_thread(gw.metrics)
        seen = sum(
            float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(sample)
        )
        if seen >= at_least:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{sample} reached {seen}, wanted {at_least}\n{gw.log_tail()}")


@pytest.mark.integration
async def test_installed_run_writes_state_restarts_and_restores(
    kafka_bootstrap: str, installed: Installed, outside: Path
) -> None:
    """State written by one installed gateway is restored by the next, which judges on it."""
    ns = Namespace(kafka_bootstrap)
    binary = installed.script()
    await ns.create_agent(AGENT, partitions=1, binary=binary)
    threads = ["good", "uncovered"]

    first = await GatewayProcess(ns, outside, "first", binary=binary, cwd=outside).start()
    try:
        await produce(
            ns.bootstrap, ns.events(AGENT), [e for t in threads for e in thread_events(t)]
        )
        # a state write: the interrupted threads reach the changelog
        await wait_for_sample(first, 'agui_gateway_runs_closed_total{outcome="interrupt"}', 2)
        changelog = await collect(ns.bootstrap, ns.changelog(AGENT), count=2, timeout=30)
        assert {r.key.decode() for r in changelog} >= set(threads), first.log_tail()
    finally:
        assert await first.stop() == 0, first.log_tail()

    second = await GatewayProcess(ns, outside, "second", binary=binary, cwd=outside).start()
    try:
        await wait_for_sample(second, "agui_gateway_state_restore_seconds_count", 1)
        for thread, cover_b in (("good", True), ("uncovered", False)):
            await produce(
                ns.bootstrap,
                ns.requests(AGENT),
                [(thread, resume(thread, cover_b))],
                headers=[("agui-correlation-id", thread.encode())],
            )
        # only restored state knows that "uncovered" left interrupt b open
        forwarded = await collect(ns.bootstrap, ns.run_requests(AGENT), count=1, timeout=60)
        assert [header(r, "agui-correlation-id") for r in forwarded] == ["good"]
        rejected = values(await collect(ns.bootstrap, ns.rejections, count=1, timeout=60))
        assert [r["correlationId"] for r in rejected] == ["uncovered"], rejected
        assert [(x["code"], x.get("interruptId")) for x in rejected[0]["reasons"]] == [
            ("uncovered_interrupt", "b")
        ], orjson.dumps(rejected).decode()
    finally:
        assert await second.stop() == 0, second.log_tail()
