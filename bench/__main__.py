"""`python -m bench`: run the benchmark and write bench/results/latest.{json,md}.

    .venv/bin/python -m bench [--size tiny|small|medium|full] [--out bench/results]
                              [--bootstrap HOST:PORT] [--only ingest,decisions,...]
                              [--fleet 1,10,50,200,1000] [--fleet-layout both]
                              [--profile] [--repeat N]
                              [--interrupt-share 0.3]

`loop` (issue 25): the whole loop, edge -> gateway -> bridge -> an agent stub,
as a person's approving resume feels it.

`instances` (issue 27): three gateway processes on one group at a steady load,
one killed with kill -9, then a rolling restart, then a fourth added; the
waits, balance, pairs moved and the standby memory. Run only when named (`--only instances`).

Without --bootstrap it starts (or reuses) the local broker with
deploy/kafka.sh, which honours KAFKA_PORT; a broker it had to start is
stopped again at the end unless --keep-broker. Every topic and group it
creates lives in a fresh namespace (`bench<hex>...`) and is deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib
import logging
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

from bench import broker as brokers
from bench import gatewayrun
from bench.config import SIZES, Context
from bench.report import machine, now_iso, source_version, write
from bench.scenarios import fleet as fleet_scenario
from gateway.observe.logs import JsonFormatter

SCENARIOS = (
    "ingest",
    "decisions",
    "latency",
    "pause",
    "hog",
    "memory",
    "restore",
    "core",
    "fleet",
    "loop",
    "inbox",
    "instances",
)
# run when asked for by name: `instances` restarts three gateway processes (a minute at tiny)
DEFAULT_SCENARIOS = tuple(s for s in SCENARIOS if s != "instances")
DEFAULT_OUT = Path(__file__).resolve().parent / "results"
FLEET_BROKER_HEAP = "-Xms512m -Xmx2g"  # KAFKA_HEAP_OPTS for a broker started for a large fleet


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--size", choices=sorted(SIZES), default="small", help="default small")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results directory")
    p.add_argument("--bootstrap", metavar="HOST:PORT", help="use this broker; start none")
    p.add_argument(
        "--only",
        default=",".join(DEFAULT_SCENARIOS),
        help=f"comma-separated scenarios of {','.join(SCENARIOS)} (default: all but "
        f"{','.join(s for s in SCENARIOS if s not in DEFAULT_SCENARIOS)})",
    )
    p.add_argument("--repeat", type=int, help="measurements per figure (default: per size)")
    p.add_argument(
        "--interrupt-share",
        type=float,
        default=0.3,
        help="share of runs on the events topic ending in interrupts (default 0.3)",
    )
    p.add_argument(
        "--fleet-producer-scope",
        choices=("pair", "instance"),
        default="pair",
        help="the fleet's gateway setting producer_scope (default pair, the gateway's default)",
    )
    p.add_argument(
        "--fleet",
        metavar="N,N,...",
        help="fleet sizes in agents (4 partitions each), e.g. 1,10,50,200,1000 "
        "(default per size: tiny 2; small 1,10,50; full 1,10,50,200,1000)",
    )
    p.add_argument(
        "--fleet-layout",
        choices=("agent", "group", "both"),
        default="both",
        help="the fleet's layout: agent (each agent on topics of its own, 4 partitions each), "
        "group (all agents in one group on shared topics), or both side by side (default)",
    )
    p.add_argument("--seed", type=int, default=20250601)
    p.add_argument(
        "--profile",
        action="store_true",
        help="also profile the gateway (pyinstrument) during ingest, decisions and latency",
    )
    p.add_argument(
        "--gateway-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a gateway setting for every gateway the bench runs but the fleet's "
        "(repeatable), e.g. "
        "producer_scope=instance, to measure it beside the defaults",
    )
    p.add_argument(
        "--fleet-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting of the fleet's gateway (repeatable), e.g. fetch_max_wait_ms=500, "
        "to measure it beside the defaults",
    )
    p.add_argument("--keep-broker", action="store_true", help="leave a broker it started running")
    p.add_argument("--keep-topics", action="store_true", help="do not delete the run's topics")
    return p


class _Counting(logging.Handler):
    """Counts the Kafka client's warnings and errors (they are part of the story)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        message = re.sub(r"\d+", "N", record.getMessage())[:160]
        self.counts[f"{record.levelname} {record.name}: {message}"] += 1


def _configure_logs(work: Path) -> _Counting:
    """Logs as the service writes them (JSON lines, INFO), to a file in the scratch dir."""
    handler = logging.FileHandler(work / "gateway-in-process.log")
    handler.setFormatter(JsonFormatter())
    counting = _Counting()
    root = logging.getLogger()
    root.handlers[:] = [handler, counting]
    root.setLevel(logging.INFO)
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    return counting


async def _run(
    ctx: Context, only: list[str], counting: _Counting
) -> tuple[list[Any], dict[str, Any], list[str]]:
    figures: list[Any] = []
    details: dict[str, Any] = {}
    failures: list[str] = []
    for name in only:
        ctx.log(f"{name}: starting")
        started = time.perf_counter()
        warnings_before = Counter(counting.counts)
        try:
            module = importlib.import_module(f"bench.scenarios.{name}")
            found, detail = await module.run(ctx)
        except Exception:
            failures.append(name)
            details[name] = {"error": traceback.format_exc()}
            ctx.log(f"{name}: FAILED\n{traceback.format_exc()}")
            continue
        detail["seconds"] = round(time.perf_counter() - started, 1)
        raised = counting.counts - warnings_before
        if raised:
            detail["client_log_warnings"] = dict(raised.most_common(10))
        figures += found
        details[name] = detail
        ctx.log(f"{name}: done in {detail['seconds']} s")
    return figures, details, failures


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in only if s not in SCENARIOS]
    if unknown:
        print(f"bench: unknown scenario(s) {unknown}; choose from {SCENARIOS}", file=sys.stderr)
        return 2
    ignored = sorted(k for k in os.environ if k.startswith("AGUI_GATEWAY_"))
    for key in ignored:  # the bench configures every gateway it runs itself
        del os.environ[key]
    size = SIZES[args.size]
    try:
        fleet = tuple(int(n) for n in args.fleet.split(",") if n.strip()) if args.fleet else ()
    except ValueError:
        print(
            f"bench: --fleet takes agent counts like 1,10,50, not {args.fleet!r}", file=sys.stderr
        )
        return 2
    if any(n < 1 for n in fleet):
        print("bench: every --fleet size must be at least 1 agent", file=sys.stderr)
        return 2
    if (
        "fleet" in only
        and args.fleet_layout != "group"
        and max(fleet or size.fleet_agents) >= 200
        and not args.bootstrap
    ):
        # a broker this run starts: 512 MB of heap is not enough for hundreds of agents
        os.environ.setdefault("KAFKA_HEAP_OPTS", FLEET_BROKER_HEAP)
    if args.repeat:
        size = dataclasses.replace(size, repeat=args.repeat)
    for flag, given, into in (
        ("--gateway-setting", args.gateway_setting, gatewayrun.SETTING_OVERRIDES),
        ("--fleet-setting", args.fleet_setting, fleet_scenario.SETTINGS),
    ):
        for setting in given:
            key, sep, value = setting.partition("=")
            if not sep or not key.strip():
                print(f"bench: {flag} takes KEY=VALUE, not {setting!r}", file=sys.stderr)
                return 2
            into[key.strip().lower()] = value
    started = time.perf_counter()
    broker = brokers.ensure_broker(args.bootstrap)
    work = Path(tempfile.mkdtemp(prefix="agui-bench-"))
    ctx = Context(
        bootstrap=broker.bootstrap,
        size=size,
        out=args.out,
        seed=args.seed,
        interrupt_share=args.interrupt_share,
        namespace=brokers.namespace(),
        profile=args.profile,
        work=work,
        fleet=fleet,
        fleet_producer_scope=args.fleet_producer_scope,
        fleet_layout=args.fleet_layout,
    )
    counting = _configure_logs(work)
    source_at_start = source_version(brokers.REPO_ROOT)
    ctx.log(f"broker {broker.bootstrap} (Kafka {broker.version}), size {size.name}, out {args.out}")
    info = machine(broker.version)
    try:
        figures, details, failures = asyncio.run(_run(ctx, only, counting))
    finally:
        if not args.keep_topics:
            asyncio.run(_cleanup(ctx))
        if broker.started_here and not args.keep_broker:
            ctx.log("stopping the broker this run started")
            brokers.stop_broker()
    notes = [
        "Throughput figures: each side timed from its first record received to the last record "
        "consumed (raw consumer) or committed (gateway, exactly-once); best of the repeats. "
        "Latency: median over repeats of each repeat's percentile.",
        "The machine may be shared: compare ratios, not absolute rates, across runs.",
    ]
    notes += [d["note"] for d in details.values() if isinstance(d, dict) and d.get("note")]
    if ignored:
        notes.append(f"AGUI_GATEWAY_* variables ignored: {', '.join(ignored)}")
    if failures:
        notes.append(f"FAILED scenarios: {', '.join(failures)} (see the JSON for the traceback)")
    result = {
        "date": now_iso(),
        "size": size.name,
        "command": " ".join(
            shlex.quote(a)
            for a in [
                Path(sys.executable).name,
                "-m",
                "bench",
                *(argv if argv is not None else sys.argv[1:]),
            ]
        ),
        "machine": info,
        "source": _source(source_at_start, source_version(brokers.REPO_ROOT)),
        "config": {
            **ctx.describe(),
            "gateway_settings": dict(gatewayrun.SETTING_OVERRIDES),
            "fleet_settings": dict(fleet_scenario.SETTINGS),
        },
        "wall_seconds": round(time.perf_counter() - started, 1),
        "figures": [f.to_json() for f in figures],
        "details": details,
        "notes": notes,
    }
    json_path, md_path = write(result, args.out)
    ctx.log(f"wrote {json_path} and {md_path}")
    if failures:
        ctx.log(f"gateway logs of this run kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    print(md_path.read_text())
    return 1 if failures else 0


def _source(start: dict[str, Any], end: dict[str, Any]) -> dict[str, Any]:
    """The gateway source measured; whether it moved while the benchmark ran.

    In-process scenarios use the code imported at the start; subprocesses (the
    latency gateway, memory probes) load it when they start.
    """
    return {**start, "changed_during_run": start != end, "at_end": end}


async def _cleanup(ctx: Context) -> None:
    try:
        async with brokers.Admin(ctx.bootstrap) as admin:
            await admin.delete_namespace(ctx.namespace)
    except Exception as exc:  # best effort
        ctx.log(f"could not delete the run's topics: {exc!r}")


if __name__ == "__main__":
    sys.exit(main())
