"""gateway.core is pure: no I/O, no clock, nothing from the rest of the service."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import gateway.core
from tests.imports import under

CORE_DIR = Path(gateway.core.__file__).parent
CORE_FILES = sorted(CORE_DIR.rglob("*.py"))

NEVER_LOADED = ("asyncio", "aiokafka", "prometheus_client")

FORBIDDEN_IMPORTS = {
    "time": "the clock is an argument",
    "asyncio": "the core is synchronous",
    "aiokafka": "Kafka belongs to the shell",
    "kafka": "Kafka belongs to the shell",
    "confluent_kafka": "Kafka belongs to the shell",
    "prometheus_client": "metrics belong to the shell",
    "logging": "the core returns findings; the shell logs them",
    "socket": "no network",
    "ssl": "no network",
    "selectors": "no I/O",
    "urllib": "no network",
    "http": "no network",
    "requests": "no network",
    "httpx": "no network",
    "os": "no environment or files",
    "sys": "no process state",
    "io": "no I/O",
    "pathlib": "no files",
    "shutil": "no files",
    "tempfile": "no files",
    "sqlite3": "no storage",
    "subprocess": "no processes",
    "threading": "no threads",
    "multiprocessing": "no processes",
    "concurrent": "no threads",
    "signal": "no process state",
    "random": "deterministic",
    "secrets": "deterministic",
    "uuid": "deterministic",
}
FORBIDDEN_CALLS = {"open", "print", "input", "breakpoint", "exec", "eval"}
CLOCK_READS = {"now", "utcnow", "today", "time_ns", "monotonic", "perf_counter"}


def test_importing_the_whole_core_loads_no_shell_module():
    script = (
        "import importlib, json, pkgutil, sys\n"
        "import gateway.core\n"
        "names = [m.name for m in pkgutil.walk_packages(gateway.core.__path__, 'gateway.core.')]\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps({'walked': names, 'modules': sorted(sys.modules)}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    report = json.loads(done.stdout)
    modules = set(report["modules"])
    on_disk = {  # modules, and the subpackages holding them
        "gateway.core." + ".".join(p.relative_to(CORE_DIR).with_suffix("").parts)
        for p in CORE_FILES
        if p.name != "__init__.py"
    } | {
        "gateway.core." + ".".join(p.parent.relative_to(CORE_DIR).parts)
        for p in CORE_FILES
        if p.name == "__init__.py" and p.parent != CORE_DIR
    }
    assert set(report["walked"]) == on_disk  # every core module was really imported
    for banned in NEVER_LOADED:
        loaded = under(modules, banned)
        assert loaded == [], f"importing gateway.core loads {loaded}"
    ours = under(modules, "gateway")
    outside = [m for m in ours if m != "gateway" and not m.startswith("gateway.core")]
    assert outside == []
    assert "gateway.core.requests.judge" in ours and "gateway.core.events.lifecycle" in ours


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                found.append((node.lineno, "gateway.core." + (node.module or "")))
            elif node.module:
                found.append((node.lineno, node.module))
    return found


@pytest.mark.parametrize("path", CORE_FILES, ids=lambda p: p.name)
def test_no_core_module_imports_io_or_the_clock(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    problems = []
    for line, module in imported_modules(tree):
        top = module.split(".")[0]
        if top in FORBIDDEN_IMPORTS:
            problems.append(f"{path.name}:{line} imports {module}: {FORBIDDEN_IMPORTS[top]}")
        if top == "gateway" and not (
            module == "gateway.core" or module.startswith("gateway.core.")
        ):
            problems.append(f"{path.name}:{line} imports {module}, outside the core")
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in FORBIDDEN_CALLS:
            problems.append(f"{path.name}:{node.lineno} calls {func.id}()")
        if isinstance(func, ast.Attribute) and func.attr in CLOCK_READS:
            problems.append(f"{path.name}:{node.lineno} reads the clock ({func.attr}())")
    assert problems == []


def test_the_checks_catch_what_they_are_for():
    bad = ast.parse(
        "import time\nfrom gateway.kafka import consumer\nfrom datetime import datetime\n"
        "x = datetime.now()\nprint(x)\n"
    )
    modules = [m for _, m in imported_modules(bad)]
    assert "time" in modules and "gateway.kafka" in modules
    calls = [n for n in ast.walk(bad) if isinstance(n, ast.Call)]
    assert any(isinstance(c.func, ast.Attribute) and c.func.attr in CLOCK_READS for c in calls)
    assert any(isinstance(c.func, ast.Name) and c.func.id in FORBIDDEN_CALLS for c in calls)
    assert len(CORE_FILES) >= 11
