"""Agent groups end to end on the real broker, through `agui-gateway run`.

Many agents share one group's topics (`<prefix>.team.*`), each record naming its agent
in the `agui-agent` header; an agent with topics of its own is served beside them.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections import Counter

import orjson
import pytest

from tests.integration.support import (
    GATEWAY_BIN,
    GatewayProcess,
    Namespace,
    collect,
    header,
    produce,
    values,
)
from tests.integration.test_gateway_durability import wait_metric

GROUP = "team"
GROUPS = json.dumps({GROUP: {"agents": ["alpha", "beta"], "agent_pattern": "w-[0-9]+"}})


@pytest.fixture
async def ns(kafka_bootstrap: str) -> Namespace:
    return Namespace(kafka_bootstrap)


async def create_group(ns: Namespace, partitions: int) -> None:
    groups = json.loads(GROUPS)
    groups[GROUP]["partitions"] = partitions
    proc = await asyncio.create_subprocess_exec(
        str(GATEWAY_BIN),
        "topics",
        "create",
        "--group",
        GROUP,
        env=ns.env(groups=json.dumps(groups)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0, (out + err).decode()


def agent_header(agent: str | bytes | None) -> list[tuple[str, bytes]]:
    if agent is None:
        return []
    return [("agui-agent", agent if isinstance(agent, bytes) else agent.encode())]


def started(thread: str, run: str) -> dict:
    return {"type": "RUN_STARTED", "threadId": thread, "runId": run}


def interrupted(thread: str, run: str, *ids: str) -> dict:
    return {
        "type": "RUN_FINISHED",
        "threadId": thread,
        "runId": run,
        "outcome": {
            "type": "interrupt",
            "interrupts": [{"id": i, "reason": "tool_call"} for i in ids],
        },
    }


def resume(thread: str, run: str, *ids: str) -> dict:
    return {
        "threadId": thread,
        "runId": run,
        "messages": [],
        "resume": [{"interruptId": i, "status": "resolved", "payload": True} for i in ids],
    }


async def events(ns: Namespace, agent: str | bytes | None, *records: dict, owner=GROUP) -> None:
    thread = records[0]["threadId"]
    await produce(
        ns.bootstrap, ns.events(owner), [(thread, r) for r in records], agent_header(agent)
    )


async def request(
    ns: Namespace,
    agent: str | bytes | None,
    body: dict,
    correlation: str,
    reply_topic: str | None = None,
    owner: str = GROUP,
) -> None:
    headers = [*agent_header(agent), ("agui-correlation-id", correlation.encode())]
    if reply_topic:
        headers.append(("agui-reply-to", reply_topic.encode()))
    await produce(ns.bootstrap, ns.requests(owner), [(body["threadId"], body)], headers)


async def test_agents_of_a_group_and_an_agent_alone_are_judged_apart(
    ns: Namespace, create_topics, tmp_path
) -> None:
    await create_group(ns, partitions=2)
    await ns.create_agent("solo", partitions=1)
    reply_topic = (await create_topics([f"{ns.prefix}.replies"], partitions=1))[0]
    gateway = await GatewayProcess(ns, tmp_path, groups=GROUPS).start()
    try:
        # alpha and beta both have a thread t1: alpha's is interrupted, beta's running
        await events(ns, "alpha", started("t1", "ra"), interrupted("t1", "ra", "x"))
        await events(ns, "beta", started("t1", "rb"))
        await events(ns, None, started("t1", "rz"))  # no agent: a warning, dropped
        await events(ns, "solo", started("t1", "rs"), interrupted("t1", "rs", "x"), owner="solo")
        await request(ns, "beta", resume("t1", "n1", "x"), "beta-t1", reply_topic)
        await request(ns, "alpha", resume("t1", "n1", "x"), "alpha-t1", reply_topic)
        await request(ns, None, resume("t1", "n1", "x"), "missing", reply_topic)
        await request(ns, "bad agent", resume("t1", "n1", "x"), "illegal", reply_topic)
        await request(ns, b"\xff", resume("t1", "n1", "x"), "binary", reply_topic)
        await request(ns, "stranger", resume("t1", "n1", "x"), "stranger", reply_topic)
        await request(ns, None, resume("t1", "n1", "x"), "solo-t1", reply_topic, owner="solo")

        replies = await collect(ns.bootstrap, reply_topic, count=7, settle=1.0)
        by = {
            header(r, "agui-correlation-id"): v
            for r, v in zip(replies, values(replies), strict=True)
        }
        verdicts = {
            c: (v["verdict"], v["agent"], v.get("group"), [r["code"] for r in v.get("reasons", [])])
            for c, v in by.items()
        }
        assert verdicts == {
            "beta-t1": ("reject", "beta", GROUP, ["run_active"]),
            "alpha-t1": ("forward", "alpha", GROUP, []),
            "missing": ("reject", None, GROUP, ["agent_missing"]),
            "illegal": ("reject", None, GROUP, ["agent_name_illegal"]),
            "binary": ("reject", None, GROUP, ["agent_name_illegal"]),
            "stranger": ("reject", None, GROUP, ["agent_not_allowed"]),
            "solo-t1": ("forward", "solo", None, []),
        }
        forwards = await collect(ns.bootstrap, ns.run_requests(GROUP), count=1, settle=1.0)
        assert [
            (r.key, header(r, "agui-agent"), header(r, "agui-correlation-id")) for r in forwards
        ] == [(b"t1", "alpha", "alpha-t1")]
        solo = await collect(ns.bootstrap, ns.run_requests("solo"), count=1, settle=0.5)
        assert [header(r, "agui-agent") for r in solo] == [None]  # own topics: as always
        rejections = values(await collect(ns.bootstrap, ns.rejections, count=5, settle=0.5))
        assert Counter(r["agent"] for r in rejections) == {"beta": 1, None: 4}
        warnings = values(await collect(ns.bootstrap, ns.warnings, count=1, settle=0.5))
        assert [
            (w["code"], w["agent"], w["group"]) for w in warnings if w["code"] == "agent_missing"
        ] == [("agent_missing", None, GROUP)]
        metrics = await asyncio.to_thread(gateway.metrics)
        assert 'agui_gateway_threads{agent="team"}' in metrics  # the group's, not per agent
        assert 'agent="alpha"' not in metrics and 'agent="beta"' not in metrics
    finally:
        await gateway.stop()


def rebalances(gateway: GatewayProcess) -> tuple[int, int]:
    """How often the gateway's pairs were revoked and prepared (each rebalance does both;
    the first join too)."""
    log = gateway.log_path.read_text()
    return log.count('"msg":"pairs revoked"'), log.count('"msg":"pairs prepared"')


async def test_an_agent_joining_a_group_while_traffic_runs_pauses_nothing(
    ns: Namespace, tmp_path
) -> None:
    await create_group(ns, partitions=2)
    gateway = await GatewayProcess(ns, tmp_path, groups=GROUPS).start()
    try:
        for i in range(5):
            await events(ns, "w-1", started(f"t{i}", "r1"), interrupted(f"t{i}", "r1", "x"))
        await wait_metric(gateway, 'agui_gateway_runs_closed_total{outcome="interrupt"}', 5)
        assigned = gateway.http("/readyz")[1]
        before = rebalances(gateway)
        assert before == (1, 1)  # the first join's: what a rebalance would add to
        # traffic runs for w-1 while w-2, named nowhere before, sends its first records
        sender = asyncio.gather(
            *(request(ns, "w-1", resume(f"t{i}", "r2", "x"), f"w-1/t{i}") for i in range(5))
        )
        for i in range(5):
            await events(ns, "w-2", started(f"t{i}", "r1"), interrupted(f"t{i}", "r1", "x"))
            await request(ns, "w-2", resume(f"t{i}", "r2", "x"), f"w-2/t{i}")
        await sender
        forwards = await collect(ns.bootstrap, ns.run_requests(GROUP), count=10, settle=1.0)
        assert sorted(header(r, "agui-correlation-id") for r in forwards) == sorted(
            [f"w-1/t{i}" for i in range(5)] + [f"w-2/t{i}" for i in range(5)]
        )
        assert {header(r, "agui-agent") for r in forwards} == {"w-1", "w-2"}
        # nothing was created, refreshed into a new assignment, revoked or prepared again
        assert rebalances(gateway) == before
        assert gateway.http("/readyz")[1] == assigned
    finally:
        await gateway.stop()


async def test_a_groups_threads_survive_a_restart_keyed_by_agent(ns: Namespace, tmp_path) -> None:
    await create_group(ns, partitions=2)
    first = await GatewayProcess(ns, tmp_path, name="first", groups=GROUPS, strict=True).start()
    try:
        await events(ns, "alpha", started("t1", "ra"), interrupted("t1", "ra", "xa"))
        await events(ns, "beta", started("t1", "rb"), interrupted("t1", "rb", "xb"))
        await wait_metric(first, 'agui_gateway_runs_closed_total{outcome="interrupt"}', 2)
    finally:
        await first.stop()
    changelog = await collect(ns.bootstrap, ns.changelog(GROUP), count=2, settle=0.5)
    assert sorted(r.key for r in changelog) == [b"4:beta:t1", b"5:alpha:t1"]
    second = await GatewayProcess(ns, tmp_path, name="second", groups=GROUPS, strict=True).start()
    try:
        # strict: a thread the restore lost would be thread_unknown
        await request(ns, "alpha", resume("t1", "n1", "xa"), "alpha")
        await request(ns, "beta", resume("t1", "n1", "xa"), "beta")  # alpha's interrupt id
        await request(ns, "w-5", resume("t1", "n1", "xa"), "w-5")  # no thread t1 for w-5
        forwards = await collect(ns.bootstrap, ns.run_requests(GROUP), count=1, settle=1.0)
        assert [header(r, "agui-correlation-id") for r in forwards] == ["alpha"]
        rejected = values(await collect(ns.bootstrap, ns.rejections, count=2, settle=0.5))
        codes = {r["correlationId"]: (r["agent"], r["reasons"][0]["code"]) for r in rejected}
        assert codes == {
            "beta": ("beta", "uncovered_interrupt"),  # beta's own interrupt xb, restored
            "w-5": ("w-5", "thread_unknown"),
        }
    finally:
        await second.stop()


@pytest.mark.parametrize("scope", ["pair", "instance"])
async def test_a_group_decides_every_request_exactly_once_across_a_kill(
    ns: Namespace, tmp_path, scope: str
) -> None:
    await create_group(ns, partitions=3)
    agents = [f"w-{i}" for i in range(4)]
    threads = [f"t{i:02d}" for i in range(25)]  # the same thread ids for every agent
    first = await GatewayProcess(
        ns, tmp_path, name="first", groups=GROUPS, producer_scope=scope
    ).start()
    for agent in agents:
        await produce(
            ns.bootstrap,
            ns.events(GROUP),
            [(t, e) for t in threads for e in (started(t, "r1"), interrupted(t, "r1", "a", "b"))],
            agent_header(agent),
        )
    total = len(agents) * len(threads)
    await wait_metric(first, 'agui_gateway_runs_closed_total{outcome="interrupt"}', total)

    async def send() -> None:
        for n, thread in enumerate(threads):
            for agent in agents:
                ids = ("a", "b") if n % 2 == 0 else ("a",)  # odd threads: uncovered
                await request(ns, agent, resume(thread, "r2", *ids), f"{agent}/{thread}")
                await asyncio.sleep(0.005)

    sender = asyncio.create_task(send())
    await wait_metric(first, "agui_gateway_requests_total{", 20)
    assert await first.stop(signal.SIGKILL) == -signal.SIGKILL
    second = await GatewayProcess(
        ns, tmp_path, name="second", groups=GROUPS, producer_scope=scope
    ).start()
    try:
        await sender
        good = {f"{a}/{t}" for n, t in enumerate(threads) for a in agents if n % 2 == 0}
        bad = {f"{a}/{t}" for n, t in enumerate(threads) for a in agents if n % 2 == 1}
        forwarded = await collect(
            ns.bootstrap, ns.run_requests(GROUP), count=len(good), timeout=90, settle=3.0
        )
        rejected = await collect(
            ns.bootstrap, ns.rejections, count=len(bad), timeout=60, settle=1.0
        )
        fwd = Counter(header(r, "agui-correlation-id") for r in forwarded)
        rej = Counter(orjson.loads(r.value)["correlationId"] for r in rejected)
        assert [c for c, n in fwd.items() if n > 1] == [], "duplicate forwards"
        assert [c for c, n in rej.items() if n > 1] == [], "duplicate rejections"
        assert set(fwd) == good and set(rej) == bad
        # each forward went to its own agent, each rejection names its own
        assert all(
            header(r, "agui-agent") == header(r, "agui-correlation-id").split("/")[0]
            for r in forwarded
        )
        assert all(r["agent"] == r["correlationId"].split("/")[0] for r in values(rejected))
        assert {r["reasons"][0]["code"] for r in values(rejected)} == {"uncovered_interrupt"}
    finally:
        await second.stop()


async def test_an_agent_moved_from_its_own_topics_to_a_group_loses_and_repeats_nothing(
    ns: Namespace, tmp_path
) -> None:
    """The documented move: the gateway serves the agent's own topics, whatever the
    settings say of its group, until they are drained; then its publishers switch to the
    group's topics, naming it. Requests on both sides of the cut-over are each decided
    exactly once, and none is lost across a restart between the two."""
    mover = "w-9"  # admitted by the group's pattern, and with topics of its own
    await create_group(ns, partitions=2)
    await ns.create_agent(mover, partitions=2)
    own = [f"own{i}" for i in range(6)]
    moved = [f"moved{i}" for i in range(6)]
    strict = {"groups": GROUPS, "strict": "true"}  # a lost state would be thread_unknown
    first = await GatewayProcess(ns, tmp_path, name="first", **strict).start()
    try:
        for t in own:  # open interrupts on its own topics, answered there (the drain)
            await events(ns, None, started(t, "r1"), interrupted(t, "r1", "x"), owner=mover)
        for t in own:
            await request(ns, None, resume(t, "r2", "x"), f"c-{t}", owner=mover)
        drained = await collect(ns.bootstrap, ns.run_requests(mover), count=len(own), settle=1.0)
        assert sorted(header(r, "agui-correlation-id") for r in drained) == sorted(
            f"c-{t}" for t in own
        )
    finally:
        await first.stop()
    # the cut-over, across a restart: the same agent now speaks on the group's topics
    second = await GatewayProcess(ns, tmp_path, name="second", **strict).start()
    try:
        for t in moved:
            await events(ns, mover, started(t, "r1"), interrupted(t, "r1", "x"))
        for t in moved:
            await request(ns, mover, resume(t, "r2", "x"), f"c-{t}")
        forwards = await collect(ns.bootstrap, ns.run_requests(GROUP), count=len(moved), settle=1.5)
        assert sorted(header(r, "agui-correlation-id") for r in forwards) == sorted(
            f"c-{t}" for t in moved
        )
        assert {header(r, "agui-agent") for r in forwards} == {mover}
        # nothing decided twice on the agent's own side after the restart
        again = await collect(ns.bootstrap, ns.run_requests(mover), count=len(own), settle=1.5)
        assert len(again) == len(own)
        rejected = values(await collect(ns.bootstrap, ns.rejections, count=None, timeout=2))
        assert [r for r in rejected if str(r.get("correlationId", "")).startswith("c-")] == []
    finally:
        await second.stop()
