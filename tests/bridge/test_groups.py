"""The bridge and a group of agents on one set of topics, on the real broker.

Two real offline pydantic-ai agents (their AG-UI adapter) at different URLs, both
of group `team`: each request on `team`'s run-requests topic reaches the agent its
`agui-agent` header names, once, and every event relayed names that agent.
Requests naming no agent, or an agent the bridge does not serve, are closed with
the bridge's RUN_ERROR and hold nothing up.
"""

from __future__ import annotations

import signal
import uuid
from typing import Any

import orjson
import pytest

from tests.bridge.agents import Served, approval_agent, scripted_agent
from tests.bridge.support import (
    BridgeProcess,
    TopicReader,
    bridge_settings,
    closed_runs,
    wait_balanced,
)
from tests.integration.support import Namespace, header, produce

pytestmark = pytest.mark.integration

GROUP = "team"
GROUPS = orjson.dumps({GROUP: {"agents": ["alpha", "beta", "gamma"]}}).decode()
USER = [{"id": "u1", "role": "user", "content": "please pay alice"}]


def run_input(thread: str, run: str, **more: Any) -> dict[str, Any]:
    return {
        "threadId": thread,
        "runId": run,
        "messages": USER,
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
        **more,
    }


async def send(ns: Namespace, agent: str | None, thread: str, run: str, **more: Any) -> None:
    headers = [("agui-correlation-id", f"c-{run}".encode())]
    if agent is not None:
        headers.append(("agui-agent", agent.encode()))
    await produce(
        ns.bootstrap,
        ns.run_requests(GROUP),
        [(thread, run_input(thread, run, **more))],
        headers=headers,
    )


def of_run(events: TopicReader, run: str) -> list[Any]:
    """The records caused by request `run` (by the correlation id the test gave it)."""
    return [r for r in events.records if header(r, "agui-correlation-id") == f"c-{run}"]


async def test_each_request_reaches_the_agent_it_names_once(ns: Namespace, tmp_path) -> None:
    await ns.create_agent(GROUP, partitions=2)
    alpha_app, alpha = approval_agent()
    beta_app, beta = approval_agent()
    async with Served(alpha_app) as alpha_at, Served(beta_app) as beta_at:
        assert alpha_at.url != beta_at.url
        settings = bridge_settings(
            ns, {"alpha": {"url": alpha_at.url}, "beta": {"url": beta_at.url}}, groups=GROUPS
        )
        bridge = await BridgeProcess(ns, tmp_path, "bridge-1", **settings).start()
        async with TopicReader(ns.bootstrap, ns.events(GROUP)) as events:
            try:
                await wait_balanced([bridge], partitions=2)
                assert (await bridge.readiness())[1]["groups"] == [GROUP]
                # the same thread id for both agents, and requests the bridge cannot run
                await send(ns, "alpha", "same", "r-alpha")
                await send(ns, "beta", "same", "r-beta")
                await send(ns, "gamma", "same", "r-gamma")  # of the group, not served here
                await send(ns, None, "same", "r-none")  # names no agent
                await send(ns, "mallory", "same", "r-mallory")  # not of the group
                await send(ns, "not a name!", "same", "r-illegal")
                await send(ns, "alpha", "after", "r-after")  # nothing above holds it up
                runs = [
                    "r-alpha",
                    "r-beta",
                    "r-gamma",
                    "r-none",
                    "r-mallory",
                    "r-illegal",
                    "r-after",
                ]
                await events.wait(
                    lambda _: all(closed_runs(values(of_run(events, r))) >= 1 for r in runs),
                    timeout=60,
                )
                await events.poll(1.5)

                assert sorted(alpha.run_ids) == ["r-after", "r-alpha"]  # two threads: any order
                assert beta.run_ids == ["r-beta"]
                for agent, run in (("alpha", "r-alpha"), ("beta", "r-beta"), ("alpha", "r-after")):
                    records = of_run(events, run)
                    assert {header(r, "agui-agent") for r in records} == {agent}
                    assert values(records)[0] == {
                        **values(records)[0],
                        "type": "RUN_STARTED",
                        "runId": run,
                    }
                    assert values(records)[-1]["type"] == "RUN_FINISHED"
                    assert values(records)[-1]["outcome"]["type"] == "interrupt"
                    assert closed_runs(values(records)) == 1
                refused = {
                    run: (values(of_run(events, run)), of_run(events, run))
                    for run in ("r-gamma", "r-none", "r-mallory", "r-illegal")
                }
                for run, code, named in (
                    ("r-gamma", "agent_not_served", "gamma"),
                    ("r-none", "agent_missing", None),
                    ("r-mallory", "agent_not_allowed", None),
                    ("r-illegal", "agent_name_illegal", None),
                ):
                    event_values, records = refused[run]
                    assert [(e["type"], e["code"]) for e in event_values] == [("RUN_ERROR", code)]
                    assert header(records[0], "agui-agent") == named
                    assert all(r.key == b"same" for r in records)

                metrics = bridge.metrics()
                # the agent label is the topics' owner (the group), as the gateway's
                assert 'agui_gateway_bridge_runs_total{agent="team",result="interrupt"} 3.0' in (
                    metrics
                )
                assert 'agent="alpha"' not in metrics
                refused_total = "agui_gateway_bridge_requests_refused_total"
                for code in ("agent_not_served", "agent_missing", "agent_not_allowed"):
                    assert f'{refused_total}{{code="{code}",owner="team"}} 1.0' in metrics
                assert f'{refused_total}{{code="agent_name_illegal",owner="team"}} 1.0' in metrics
            finally:
                assert await bridge.stop() == 0

            # a second bridge finds nothing to do: no request is run twice
            bridge = await BridgeProcess(ns, tmp_path, "bridge-2", **settings).start()
            try:
                await events.poll(3.0)
                assert sorted(alpha.run_ids) == ["r-after", "r-alpha"]  # two threads: any order
                assert beta.run_ids == ["r-beta"]
                assert closed_runs(values(events.records)) == len(runs)
            finally:
                await bridge.stop()


async def test_a_groups_run_cut_by_a_killed_bridge_is_closed_naming_its_agent(
    ns: Namespace, tmp_path
) -> None:
    await ns.create_agent(GROUP, partitions=1)
    alpha_app, alpha = scripted_agent()
    beta_app, beta = scripted_agent()
    async with Served(alpha_app) as alpha_at, Served(beta_app) as beta_at:
        settings = bridge_settings(
            ns, {"alpha": {"url": alpha_at.url}, "beta": {"url": beta_at.url}}, groups=GROUPS
        )
        bridge = await BridgeProcess(ns, tmp_path, "bridge-1", **settings).start()
        run = f"r-{uuid.uuid4().hex[:6]}"
        async with TopicReader(ns.bootstrap, ns.events(GROUP)) as events:
            try:
                await send(ns, "beta", "same", run, forwardedProps={"mode": "slow"})
                await events.wait(lambda _: len(of_run(events, run)) >= 1)
                assert beta.modes == ["slow"] and alpha.modes == []
            finally:
                await bridge.stop(signal.SIGKILL)
            bridge = await BridgeProcess(ns, tmp_path, "bridge-2", **settings).start()
            try:
                await events.wait(lambda _: closed_runs(values(of_run(events, run))) >= 1)
                records = of_run(events, run)
                assert [e["type"] for e in values(records)] == ["RUN_STARTED", "RUN_ERROR"]
                assert values(records)[-1]["code"] == "bridge_restarted"
                assert header(records[-1], "agui-agent") == "beta"
                assert beta.modes == ["slow"] and alpha.modes == []  # not started again
            finally:
                await bridge.stop()


def values(records: list[Any]) -> list[dict[str, Any]]:
    return [orjson.loads(r.value) for r in records]


async def test_a_group_by_pattern_is_served_by_the_default_endpoint_per_agent(
    ns: Namespace, tmp_path
) -> None:
    """`bridge_agent_pattern` with `bridge_default` (its url with {agent}) serves any agent
    of a group by pattern: each request is POSTed to its own agent's URL."""
    group = "acme"
    await ns.create_agent(group, partitions=1)
    inner, counters = scripted_agent()
    called: list[str] = []  # the agent named in each URL the bridge POSTed to

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            called.append(scope["query_string"].decode())
        await inner(scope, receive, send)

    async with Served(app) as served:
        settings = bridge_settings(
            ns,
            {},
            groups=orjson.dumps({group: {"agent_pattern": "acme-[0-9]+"}}).decode(),
            bridge_agent_pattern="acme-[0-9]+",
            bridge_default=orjson.dumps({"url": served.url + "?agent={agent}"}).decode(),
        )
        bridge = await BridgeProcess(ns, tmp_path, "bridge", **settings).start()
        async with TopicReader(ns.bootstrap, ns.events(group)) as events:
            try:
                for agent in ("acme-1", "acme-2", "acme-3"):
                    await produce(
                        ns.bootstrap,
                        ns.run_requests(group),
                        [("same", run_input("same", f"r-{agent}"))],
                        headers=[
                            ("agui-agent", agent.encode()),
                            ("agui-correlation-id", f"c-r-{agent}".encode()),
                        ],
                    )
                await events.wait(lambda records: closed_runs(values(records)) >= 3)
                await events.poll(1.0)
                assert sorted(called) == ["agent=acme-1", "agent=acme-2", "agent=acme-3"]
                assert sorted(counters.run_ids) == ["r-acme-1", "r-acme-2", "r-acme-3"]
                for agent in ("acme-1", "acme-2", "acme-3"):
                    records = of_run(events, f"r-{agent}")
                    assert {header(r, "agui-agent") for r in records} == {agent}
                    assert values(records)[-1]["type"] == "RUN_FINISHED"
                assert (await bridge.readiness())[1]["groups"] == [group]
            finally:
                assert await bridge.stop() == 0
