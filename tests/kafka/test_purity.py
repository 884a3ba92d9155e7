"""Output shaping, the round, deciding, the merge and commit pacing are pure: no Kafka client,
no event loop, no clock, no metrics."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import gateway.kafka
from tests.imports import loaded_by, under

KAFKA_DIR = Path(gateway.kafka.__file__).parent
PURE = ("shaping", "round", "decide", "merge", "pacing", "audit")

FORBIDDEN = {
    "aiokafka": "Kafka belongs to the checkpoint and the clients module",
    "kafka": "Kafka belongs to the checkpoint and the clients module",
    "asyncio": "shaping and the round are synchronous",
    "prometheus_client": "metric updates are deferred callables, made by the shell",
    "time": "the clock is an argument",
    "socket": "no network",
    "os": "no environment or files",
    "threading": "no threads",
    "random": "deterministic",
}
# What a pure module may import of the project.
ALLOWED_PROJECT = ("gateway.core", "gateway.codec", "gateway.kafka.pairs.shaping")
CLOCK_READS = {"now", "utcnow", "today", "time_ns", "monotonic", "perf_counter"}


def imports(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def problems_of(source: str, name: str) -> list[str]:
    tree = ast.parse(source)
    problems = []
    for line, module in imports(tree):
        top = module.split(".")[0]
        if top in FORBIDDEN:
            problems.append(f"{name}:{line} imports {module}: {FORBIDDEN[top]}")
        if top == "gateway" and not any(
            module == allowed or module.startswith(allowed + ".") for allowed in ALLOWED_PROJECT
        ):
            problems.append(f"{name}:{line} imports {module}")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in CLOCK_READS
        ):
            problems.append(f"{name}:{node.lineno} reads the clock ({node.func.attr}())")
    return problems


@pytest.mark.parametrize("module", PURE)
def test_a_pure_module_imports_no_kafka_loop_clock_or_metrics(module):
    (path,) = KAFKA_DIR.rglob(f"{module}.py")
    assert problems_of(path.read_text(), path.name) == []


def test_importing_the_pure_modules_loads_no_kafka_client_loop_or_metrics():
    modules = loaded_by(
        "gateway.kafka.pairs.shaping",
        "gateway.kafka.pairs.round",
        "gateway.kafka.pairs.decide",
        "gateway.kafka.pairs.merge",
    )
    for banned in ("aiokafka", "asyncio", "prometheus_client"):
        assert under(modules, banned) == []
    assert "gateway.kafka.pairs.round" in modules and "gateway.kafka.pairs.shaping" in modules


def test_the_check_catches_what_it_is_for():
    bad = (
        "import asyncio\nfrom aiokafka import AIOKafkaProducer\n"
        "from gateway.kafka.runner import Gateway\nimport time\nx = time.monotonic()\n"
    )
    found = problems_of(bad, "bad.py")
    assert len(found) == 5
    assert any("asyncio" in p for p in found) and any("gateway.kafka.runner" in p for p in found)
