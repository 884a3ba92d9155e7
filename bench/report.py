"""Figures, the machine they were measured on, and the JSON and Markdown results."""

from __future__ import annotations

import math
import os
import platform
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson


@dataclass
class Figure:
    key: str
    label: str
    value: float
    unit: str
    how: str  # how the value was reduced from repeated measurements
    target: str | None = None  # e.g. ">= 0.8"
    met: bool | None = None
    headline: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def check(value: float, target: str) -> bool:
    op, threshold = target.split()
    limit = float(threshold)
    return value >= limit if op == ">=" else value <= limit


def figure(
    key: str,
    label: str,
    value: float,
    unit: str,
    how: str,
    target: str | None = None,
) -> Figure:
    return Figure(
        key=key,
        label=label,
        value=value,
        unit=unit,
        how=how,
        target=target,
        met=check(value, target) if target else None,
        headline=target is not None,
    )


def best(values: list[float]) -> float:
    return max(values)


def least(values: list[float]) -> float:
    return min(values)


def median(values: list[float]) -> float:
    return statistics.median(values)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


# --- the machine ----------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def source_version(root: Path) -> dict[str, Any]:
    """The commit measured, and whether gateway/ differed from it."""

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", *args], cwd=root, capture_output=True, text=True, timeout=10
            ).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""

    return {
        "commit": git("rev-parse", "HEAD") or "unknown",
        "gateway_modified": bool(git("status", "--porcelain", "--", "gateway")),
    }


def machine(kafka_version: str) -> dict[str, Any]:
    import aiokafka
    import pydantic

    try:
        load = os.getloadavg()
    except OSError:
        load = (math.nan, math.nan, math.nan)
    return {
        "nproc": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "memory_bytes": _mem_total(),
        "cpu_model": _cpu_model(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "kafka": kafka_version,
        "aiokafka": aiokafka.__version__,
        "pydantic": pydantic.VERSION,
        "loadavg_at_start": [round(x, 2) for x in load],
    }


# --- writing ----------------------------------------------------------------------------------


def _fmt(value: float, unit: str) -> str:
    if unit in ("ratio",):
        return f"{value:.3f}"
    if unit in ("ms",):
        return f"{value:.1f} ms"
    if unit == "bytes":
        return f"{value:,.0f} B"
    if value >= 100:
        return f"{value:,.0f} {unit}"
    return f"{value:.3g} {unit}"


def markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    gib = m["memory_bytes"] / 2**30
    lines = [
        f"# agui-gateway benchmark ({result['size']})",
        "",
        f"- Date: {result['date']}",
        f"- Command: `{result['command']}`",
        f"- Machine: {m['nproc']} CPUs ({m['cpu_model']}), {gib:.1f} GiB RAM, "
        f"{m['implementation']} {m['python']}, Kafka {m['kafka']} (single local broker), "
        f"aiokafka {m['aiokafka']}; load average at start {m['loadavg_at_start']}",
        f"- Gateway source: commit {result['source']['commit'][:12]}"
        + (" with uncommitted changes in gateway/" if result["source"]["gateway_modified"] else "")
        + (
            f" (**changed during the run**, to {result['source']['at_end']['commit'][:12]})"
            if result["source"].get("changed_during_run")
            else ""
        ),
        f"- Wall time: {result['wall_seconds']:.0f} s",
        "",
        "## Headline figures",
        "",
        "| Figure | Value | Target | Met | Measured as |",
        "|---|---|---|---|---|",
    ]
    figures = [Figure(**f) for f in result["figures"]]
    for f in figures:
        if f.headline:
            met = "met" if f.met else "**NOT met**"
            lines.append(f"| {f.label} | {_fmt(f.value, f.unit)} | {f.target} | {met} | {f.how} |")
    lines += ["", "## Supporting figures", "", "| Figure | Value | Measured as |", "|---|---|---|"]
    for f in figures:
        if not f.headline:
            lines.append(f"| {f.label} | {_fmt(f.value, f.unit)} | {f.how} |")
    for detail in (result.get("details") or {}).values():
        table = detail.get("table") if isinstance(detail, dict) else None
        if table:
            lines += ["", f"## {table['title']}", "", "| " + " | ".join(table["header"]) + " |"]
            lines.append("|" + "---|" * len(table["header"]))
            lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in table["rows"]]
    notes = result.get("notes") or []
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def write(result: dict[str, Any], out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "latest.json", out / "latest.md"
    for path, body in (
        (json_path, orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)),
        (md_path, markdown(result).encode()),
    ):
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_bytes(body)
        tmp.replace(path)
    return json_path, md_path


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
