"""Sizes and the context every scenario gets."""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Size:
    name: str
    partitions: int
    repeat: int  # measurements per figure (best or median of these)
    ingest_threads: int  # threads on the events topic (~128 events per run, 1.25 runs each)
    decision_threads: int  # interrupted threads answered by the request stream
    latency_rate: float  # offered load, requests/s
    latency_seconds: float
    latency_warmup_seconds: float  # excluded from the percentiles
    memory_threads: int
    restore_threads: int
    core_seconds: float  # time budget per core micro-benchmark
    pair_events: int  # records fed to one PartitionPair without Kafka
    # the soak: events on a fixed set of threads, memory after all of them ÷ after a tenth
    soak_threads: int = 2_000
    soak_events: int = 200_000
    # pause recovery and CPU hog (issue 13): runs of each (worst reported)
    disturb_repeat: int = 1
    pause_run_seconds: float = 4.5  # load offered at latency_rate for this long
    pause_at_seconds: float = 1  # SIGSTOP this far into the load
    pause_seconds: float = 2
    hog_rate: float = 100  # requests/s offered with one core taken
    hog_seconds: float = 2
    # the fleet (issue 15): agents (4 partitions each) per measured size, and its phases
    fleet_agents: tuple[int, ...] = (2,)
    fleet_idle_seconds: float = 1
    fleet_load_seconds: float = 2  # at each of 50 and 200 requests/s in total
    fleet_add_seconds: float = 3  # 50 requests/s while one agent is added
    fleet_ready_timeout: float = 60  # a size not ready by then ends the scenario
    # the gateway's discovery_interval_ms in the fleet (None: its default); tiny only
    # shortens the wait for a new agent's topics to be seen
    fleet_discovery_ms: int | None = 1000
    # the fleet's group layout (issue 26): partitions of the one group's topics, chosen for
    # the fleet's traffic (at most 200 requests/s in total), not its number of agents
    fleet_group_partitions: int = 8
    # the whole loop (issue 25, section 3): conversations through edge, gateway, bridge and
    # an agent stub, `loop_concurrency` at a time; the first `loop_warmup` are not measured
    loop_conversations: int = 6
    loop_concurrency: int = 3
    loop_warmup: int = 3
    # the inbox's view (issue 28): open interrupts held, and API requests measured
    inbox_interrupts: int = 100_000
    inbox_queries: int = 2_000
    # several instances as one (issue 27): three gateway processes on one agent's pairs
    instances_partitions: int = 6
    instances_rate: float = 20  # requests/s offered throughout
    instances_threads: int = 400  # a thread is used again once its request was decided
    instances_warmup_seconds: float = 4
    instances_settle_seconds: float = 3  # after the takeover, the restart, the rolling restart
    instances_session_timeout_ms: int = 6000  # the broker's group.min.session.timeout.ms


SMALL = Size(
    name="small",
    partitions=4,
    repeat=2,
    ingest_threads=2_000,
    decision_threads=4_000,
    latency_rate=300,
    latency_seconds=8,
    latency_warmup_seconds=1,
    memory_threads=20_000,
    restore_threads=20_000,
    core_seconds=0.5,
    pair_events=100_000,
    soak_threads=10_000,
    soak_events=2_000_000,
    pause_run_seconds=10,
    pause_at_seconds=3,
    hog_rate=300,
    hog_seconds=8,
    fleet_agents=(1, 10, 50),
    fleet_idle_seconds=3,
    fleet_load_seconds=5,
    fleet_add_seconds=6,
    fleet_ready_timeout=120,
    fleet_discovery_ms=None,
    loop_conversations=208,
    loop_concurrency=8,
    loop_warmup=8,
)

SIZES = {
    "tiny": Size(
        name="tiny",
        partitions=2,
        repeat=1,
        ingest_threads=150,
        decision_threads=400,
        latency_rate=100,
        latency_seconds=3,
        latency_warmup_seconds=0.5,
        memory_threads=5_000,
        restore_threads=5_000,
        core_seconds=0.2,
        pair_events=20_000,
        inbox_interrupts=2_000,
        inbox_queries=200,
        # the smoke test's soak: the figure exists, 7 s instead of 23 on a slow machine
        soak_events=50_000,
    ),
    "small": SMALL,
    # the latency target's offered load (1,000 requests/s) for a shorter time than full,
    # and a decisions workload half full's: to compare commits side by side
    "medium": dataclasses.replace(
        SMALL,
        name="medium",
        ingest_threads=6_000,
        decision_threads=8_000,
        latency_rate=1000,
        latency_seconds=10,
        latency_warmup_seconds=2,
        memory_threads=50_000,
        restore_threads=50_000,
        hog_rate=500,
    ),
    "full": Size(
        name="full",
        partitions=4,
        repeat=3,
        ingest_threads=12_000,
        decision_threads=15_000,
        latency_rate=1000,
        latency_seconds=20,
        latency_warmup_seconds=2,
        memory_threads=100_000,
        restore_threads=100_000,
        core_seconds=1.0,
        pair_events=300_000,
        soak_threads=10_000,
        soak_events=10_000_000,
        disturb_repeat=2,
        pause_run_seconds=15,
        pause_at_seconds=5,
        hog_rate=500,
        hog_seconds=15,
        fleet_agents=(1, 10, 50, 200, 1000),
        fleet_idle_seconds=5,
        fleet_load_seconds=10,
        fleet_add_seconds=8,
        fleet_ready_timeout=120,
        instances_partitions=12,
        instances_rate=200,
        instances_threads=5000,
        instances_warmup_seconds=15,
        instances_settle_seconds=10,
        fleet_discovery_ms=None,
        loop_conversations=808,
        loop_concurrency=8,
        loop_warmup=8,
    ),
}


@dataclass
class Context:
    bootstrap: str
    size: Size
    out: Path
    seed: int
    interrupt_share: float
    namespace: str  # prefix of every topic and group this run creates
    profile: bool
    work: Path  # scratch dir (gateway logs, profiles in progress)
    fleet: tuple[int, ...] = ()  # --fleet: fleet sizes instead of the size's own
    fleet_producer_scope: str = "pair"  # --fleet-producer-scope: the fleet gateway's setting
    fleet_layout: str = "both"  # --fleet-layout: agent (own topics), group, or both

    def log(self, message: str) -> None:
        print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    def describe(self) -> dict[str, Any]:
        return {
            "size": asdict(self.size),
            "seed": self.seed,
            "interrupt_share": self.interrupt_share,
            "namespace": self.namespace,
            "fleet": list(self.fleet or self.size.fleet_agents),
            "fleet_producer_scope": self.fleet_producer_scope,
            "fleet_layout": self.fleet_layout,
        }
