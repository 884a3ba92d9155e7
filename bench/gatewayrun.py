"""Running the real gateway for a measurement: in this process, or as `agui-gateway run`.

In-process, `TimedGateway` is the service's own `Gateway` with two thin
observations: when the first record of a ready pair arrived (around its `round`),
and when the pairs' committed offsets (what each round's transaction committed,
reported by `Assignment.observe_commits`) reached the targets. Nothing the gateway
does changes; startup, group join and state restore are outside the timed span.

As a subprocess, the gateway is exactly what `agui-gateway run` starts; the
bench watches /readyz and the group's committed offsets from outside.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import ConsumerRecord
from prometheus_client import CollectorRegistry

from bench.broker import REPO_ROOT, Admin
from gateway.commands import collector
from gateway.kafka.assign.assignment import Assignment
from gateway.kafka.pairs.round import Round
from gateway.kafka.pairs.slot import PairKey, PairSlot
from gateway.kafka.runner import Gateway
from gateway.kafka.wire.topics import agent_topic_layout
from gateway.observe.metrics import Metrics
from gateway.settings import Settings

AGENT = "bench"
# gateway settings every scenario's gateway but the fleet's gets (`--gateway-setting`), e.g. to
# measure a setting against the defaults in the same session
SETTING_OVERRIDES: dict[str, str] = {}


@dataclass(frozen=True)
class Names:
    """Topic templates: inputs in one namespace, the gateway's outputs in another."""

    inputs: str  # namespace of the events and requests topics
    outputs: str  # namespace of run-requests, changelog, rejections, warnings, replies
    group: str

    def settings(self, bootstrap: str, **overrides: Any) -> dict[str, Any]:
        return {
            "bootstrap_servers": bootstrap,
            "client_id": self.group,
            "group_id": self.group,
            "events_topic": f"{self.inputs}.{{agent}}.events",
            "requests_topic": f"{self.inputs}.{{agent}}.requests",
            "run_requests_topic": f"{self.outputs}.{{agent}}.run-requests",
            "changelog_topic": f"{self.outputs}.{{agent}}.gateway-changelog",
            "rejections_topic": f"{self.outputs}.rejections",
            "warnings_topic": f"{self.outputs}.warnings",
            "audit_topic": f"{self.outputs}.audit",
            "interrupts_topic": f"{self.outputs}.interrupts",
            "log_level": "INFO",
            **SETTING_OVERRIDES,
            **overrides,
        }

    @property
    def events(self) -> str:
        return f"{self.inputs}.{AGENT}.events"

    @property
    def requests(self) -> str:
        return f"{self.inputs}.{AGENT}.requests"

    @property
    def run_requests(self) -> str:
        return f"{self.outputs}.{AGENT}.run-requests"

    @property
    def changelog(self) -> str:
        return f"{self.outputs}.{AGENT}.gateway-changelog"

    @property
    def rejections(self) -> str:
        return f"{self.outputs}.rejections"

    @property
    def replies(self) -> str:
        return f"{self.outputs}.replies"


def make_settings(names: Names, bootstrap: str, **overrides: Any) -> Settings:
    return Settings(**names.settings(bootstrap, **overrides))


async def create_topics(
    admin: Admin, names: Names, settings: Settings, partitions: int, *, inputs: bool
) -> None:
    """The agent's topic set as `agui-gateway topics create` lays it out, plus a replies topic."""
    layout = agent_topic_layout(settings, AGENT, partitions, partitions)
    if not inputs:
        layout.pop(names.events)
        layout.pop(names.requests)
    layout[names.replies] = (1, {})
    await admin.create(layout)


class TimedGateway(Gateway):
    """The service's `Gateway`, observed at two points through its public interface:
    `round` (the loop's per-round step) notes when the first record of a ready pair
    arrived, and `Assignment.observe_commits` notes each committed round's offsets,
    so the end is the moment the commit reaching the targets landed (commits run in
    the background while the next round is judged)."""

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        targets: dict[TopicPartition, int],
        span: Span | None = None,
    ) -> None:
        super().__init__(settings, metrics)
        self.targets = targets
        self.span = span
        self.first: float | None = None
        self.done_at: float | None = None
        self.all_ready_at: float | None = None
        self.records_before_all_ready = 0  # consumed by early pairs while others prepared
        self.done = asyncio.Event()
        self.armed = True  # records count only once armed
        self.targets_final = True  # targets are checked only once they are all known
        self.rounds = 0
        self.committed_rounds = 0
        self.decided = 0  # requests decided in committed rounds
        self.committed: dict[TopicPartition, int] = {}  # as the commits reported them

    def compose(
        self, consumer: AIOKafkaConsumer, admin: AIOKafkaAdminClient, offsets: AIOKafkaConsumer
    ) -> Assignment:
        assignment = super().compose(consumer, admin, offsets)
        assignment.observe_commits(self._committed)
        return assignment

    def held(self) -> dict[PairKey, PairSlot]:
        return self.assignment.slots if self.assignment is not None else {}

    def all_ready(self) -> bool:
        slots = self.held()
        return bool(slots) and all(s.ready for s in slots.values())

    async def round(self, batch: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        if batch and self.armed and self.all_ready_at is None and self.assignment is not None:
            for tp, messages in batch.items():
                found = self.assignment.slot_for(tp)
                if messages and found is not None and found[0].ready:
                    self.records_before_all_ready += len(messages)
                    self._start()
        elif batch and self.armed:
            self._start()
        await super().round(batch)
        self.rounds += 1
        if self.all_ready_at is None and self.all_ready():
            self.all_ready_at = time.perf_counter()

    def _start(self) -> None:
        if self.first is None:
            self.first = time.perf_counter()
            if self.span is not None:
                self.span.start()

    def _committed(self, slot: PairSlot, done: Round) -> None:
        self.committed_rounds += 1
        self.decided += len(done.decided)
        self.committed.update(slot.committed)
        self.check()

    def check(self) -> None:
        """Mark the end once armed, with every target known and committed."""
        if self.done_at is None and self.armed and self.targets_final and self.reached():
            self.done_at = time.perf_counter()
            if self.span is not None:
                self.span.stop()
            self.done.set()

    def reached(self) -> bool:
        committed = self.committed
        return all(committed.get(tp, -1) >= end for tp, end in self.targets.items())


@dataclass
class InProcessRun:
    seconds: float  # max(first record, every pair ready) -> targets committed
    records_before: int  # records consumed before that start (by pairs ready early)
    startup_seconds: float  # run() called -> first record (join, prepare, restore)
    restore_overlap_seconds: float  # first record -> every pair ready (0: ready before)
    rounds: int
    registry: CollectorRegistry
    extra: dict[str, Any] = field(default_factory=dict)
    commits: int = 0  # rounds committed (each pair's transaction)
    decided: int = 0  # requests decided in those rounds


class Span(Protocol):
    """Something to start at the first record and stop when the targets are committed."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


@contextlib.contextmanager
def service_collector() -> Iterator[None]:
    """The service's collector settings (`agui-gateway run`'s), what exists now frozen
    first; the bench's own settings again after."""
    thresholds = gc.get_threshold()
    collector.configure()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


async def run_in_process(
    settings: Settings,
    targets: dict[TopicPartition, int],
    timeout: float,
    span: Span | None = None,
    when_ready: Callable[[], Awaitable[dict[TopicPartition, int]]] | None = None,
) -> InProcessRun:
    """Run the gateway until its commits reach `targets`, then stop it cleanly.

    With `when_ready`, the gateway first starts and prepares every pair (group
    join, restore); then records start to count and `when_ready()` runs (it
    produces the input); the targets it returns are added, and only then is the
    end checked. The gateway may consume the input while it is being produced:
    counting starts before producing, so the first record is never missed.
    """
    registry = CollectorRegistry()
    gateway = TimedGateway(settings, Metrics(registry), dict(targets), span)
    gateway.armed = when_ready is None
    gateway.targets_final = when_ready is None
    stop = asyncio.Event()
    # The bench's own objects (the workload) must not make the gateway's collections slower,
    # and the gateway runs with the service's collector settings (`agui-gateway run`'s).
    with service_collector():
        started = time.perf_counter()
        task = asyncio.create_task(gateway.run(stop))
        waiter = asyncio.create_task(gateway.done.wait())
        try:
            if when_ready is not None:
                deadline = time.monotonic() + timeout
                while not (gateway.ready()[0] and gateway.all_ready()):
                    if task.done():
                        task.result()
                        raise RuntimeError("the gateway stopped before it was ready")
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"gateway not ready within {timeout} s")
                    await asyncio.sleep(0.02)
                gateway.armed = True
                gateway.targets.update(await when_ready())
                gateway.targets_final = True
                gateway.check()  # everything may have committed already
            finished, _ = await asyncio.wait(
                {task, waiter}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if task in finished:
                task.result()  # raises what the gateway raised
                raise RuntimeError("the gateway stopped before reaching the end of its input")
            if waiter not in finished:
                committed = {str(tp): off for tp, off in gateway.committed.items()}
                raise TimeoutError(
                    f"gateway did not commit to the end within {timeout} s: committed "
                    f"{committed}, targets { {str(k): v for k, v in targets.items()} }"
                )
        finally:
            if span is not None:
                span.stop()
            waiter.cancel()
            stop.set()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, timeout=60)
    assert gateway.first is not None and gateway.done_at is not None
    all_ready = gateway.all_ready_at or gateway.first
    start = max(gateway.first, all_ready)
    return InProcessRun(
        seconds=gateway.done_at - start,
        records_before=gateway.records_before_all_ready if all_ready > gateway.first else 0,
        startup_seconds=gateway.first - started,
        restore_overlap_seconds=max(0.0, all_ready - gateway.first),
        rounds=gateway.rounds,
        registry=registry,
        commits=gateway.committed_rounds,
        decided=gateway.decided,
    )


def counter_total(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """Sum of a counter's samples (optionally only those with the given labels)."""
    total = 0.0
    for metric in registry.collect():
        if metric.name != name:
            continue
        for sample in metric.samples:
            if not sample.name.endswith("_total"):
                continue
            if all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def histogram_sum(registry: CollectorRegistry, name: str) -> tuple[float, float]:
    """(sum, count) of a histogram."""
    total = count = 0.0
    for metric in registry.collect():
        if metric.name != name:
            continue
        for sample in metric.samples:
            if sample.name == name + "_sum":
                total += sample.value
            elif sample.name == name + "_count":
                count += sample.value
    return total, count


# --- as a subprocess ----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env_value(value: Any) -> str:
    """A setting as the environment gives it: complex ones (the groups) as JSON."""
    if isinstance(value, dict | list):
        return orjson.dumps(value).decode()
    return str(value)


class GatewayProcess:
    """`python -m gateway run` with the given settings, logging to a file."""

    def __init__(
        self, settings: dict[str, Any], log_path: Path, command: list[str] | None = None
    ) -> None:
        self.port = _free_port()
        self.log_path = log_path
        # what runs instead of `python -m gateway run` (the profiled gateway of the latency run)
        self.command = command or [sys.executable, "-m", "gateway", "run"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGUI_GATEWAY_")}
        env.update({f"AGUI_GATEWAY_{k.upper()}": _env_value(v) for k, v in settings.items()})
        env["AGUI_GATEWAY_HTTP_PORT"] = str(self.port)
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.command,
                env=self.env,
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                cwd=str(REPO_ROOT),
            )

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=2) as r:
                return bool(r.status == 200)
        except (OSError, urllib.error.HTTPError):
            return False

    async def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited {self.proc.returncode}:\n{self.log_tail()}")
            if await asyncio.to_thread(self._ready):
                return
            await asyncio.sleep(0.1)
        raise TimeoutError(f"gateway not ready within {timeout} s:\n{self.log_tail()}")

    def metrics(self) -> dict[str, float]:
        """The process's /metrics, flattened: `name{label=value,...}` -> value."""
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            text = r.read().decode()
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return out

    def log_count(self, text: str) -> int:
        """Lines of the process's log containing `text`."""
        try:
            with self.log_path.open(errors="replace") as f:
                return sum(1 for line in f if text in line)
        except OSError:
            return 0

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    async def stop(self, timeout: float = 60) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            await asyncio.wait_for(asyncio.to_thread(self.proc.wait), timeout=timeout)
        except TimeoutError:
            self.proc.kill()
            await asyncio.to_thread(self.proc.wait)
