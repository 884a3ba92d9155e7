"""The bridge killed mid-run: the agent is never called twice for one run request."""

from __future__ import annotations

import asyncio
import signal
import uuid

import pytest

from tests.bridge.agents import Served, scripted_agent
from tests.bridge.support import (
    BridgeProcess,
    TopicReader,
    bridge_settings,
    closed_runs,
    wait_balanced,
)
from tests.integration.support import Namespace, header, produce

pytestmark = pytest.mark.integration

AGENT = "killed"


def request(thread: str, mode: str) -> dict:
    return {
        "threadId": thread,
        "runId": f"run-{uuid.uuid4().hex[:8]}",
        "messages": [],
        "forwardedProps": {"mode": mode},
    }


async def test_sigkill_mid_run_closes_the_run_and_never_calls_the_agent_again(
    ns: Namespace, tmp_path
) -> None:
    await ns.create_agent(AGENT, partitions=1)
    app, counters = scripted_agent()
    async with Served(app) as agent:
        settings = bridge_settings(ns, {AGENT: {"url": agent.url}})
        bridge = await BridgeProcess(ns, tmp_path, "bridge-1", **settings).start()
        async with TopicReader(ns.bootstrap, ns.events(AGENT)) as events:
            try:
                await produce(
                    ns.bootstrap,
                    ns.run_requests(AGENT),
                    [("t-k", request("t-k", "slow"))],
                    headers=[("agui-correlation-id", b"corr-slow")],
                )
                # the run has started and its first event is committed: kill the bridge
                await events.wait(lambda _: len(events.thread("t-k")) >= 1)
                assert counters.modes == ["slow"]
            finally:
                await bridge.stop(signal.SIGKILL)

            bridge = await BridgeProcess(ns, tmp_path, "bridge-2", **settings).start()
            try:
                await events.wait(lambda _: closed_runs(events.thread("t-k")) >= 1, timeout=60)
                restarted = events.thread("t-k")
                assert [e["type"] for e in restarted] == ["RUN_STARTED", "RUN_ERROR"]
                assert restarted[-1]["code"] == "bridge_restarted"
                assert header(events.records[-1], "agui-correlation-id") == "corr-slow"
                assert counters.modes == ["slow"]  # not started again

                # a new request on the thread works
                await produce(ns.bootstrap, ns.run_requests(AGENT), [("t-k", request("t-k", "ok"))])
                await events.wait(lambda _: closed_runs(events.thread("t-k")) >= 2)
                await events.poll(1.5)
                assert events.thread("t-k")[-1]["type"] == "RUN_FINISHED"
                assert closed_runs(events.thread("t-k")) == 2
                assert counters.modes == ["slow", "ok"]
                metrics = bridge.metrics()
                assert (
                    f'agui_gateway_bridge_runs_total{{agent="{AGENT}",result="success"}} 1.0'
                    in metrics
                )
            finally:
                assert await bridge.stop() == 0

            # a third bridge finds nothing left to do: no request is run again
            bridge = await BridgeProcess(ns, tmp_path, "bridge-3", **settings).start()
            try:
                await events.poll(3.0)
                assert closed_runs(events.thread("t-k")) == 2
                assert counters.modes == ["slow", "ok"]
            finally:
                await bridge.stop()


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill-9"])
async def test_a_rebalance_mid_run_never_runs_a_request_twice(
    ns: Namespace, tmp_path, how: signal.Signals
) -> None:
    """One of two bridges leaves mid-run, stopped (it leaves the group) or killed with
    kill -9 (its partitions move at the session timeout): the other takes its partitions
    over, closes the runs it cut short, and no request reaches the agent twice."""
    agent_name = "rebalanced"
    await ns.create_agent(agent_name, partitions=4)
    app, counters = scripted_agent()
    threads = [f"t-{i}" for i in range(8)]
    held = [request(t, "held") for t in threads]  # each runs until counters.release
    after = [request(t, "ok") for t in threads]
    async with Served(app) as agent:
        settings = bridge_settings(ns, {agent_name: {"url": agent.url}}, revoke_timeout_s=1)
        staying, leaving = await asyncio.gather(
            BridgeProcess(ns, tmp_path, "bridge-a", **settings).start(),
            BridgeProcess(ns, tmp_path, "bridge-b", **settings).start(),
        )
        async with TopicReader(ns.bootstrap, ns.events(agent_name)) as events:
            try:
                # both bridges own their share before any request exists: a late joiner
                # would otherwise take (and rightly close) runs of the first one
                kept, moved = await wait_balanced([staying, leaving], partitions=4)
                await produce(
                    ns.bootstrap,
                    ns.run_requests(agent_name),
                    [(r["threadId"], r) for r in held + after],
                )
                async with TopicReader(ns.bootstrap, ns.run_requests(agent_name)) as requests:
                    await requests.wait(lambda records: len(records) == len(held + after))
                partition = {r.key.decode(): r.partition for r in requests.records}
                stays = [t for t in threads if partition[t] in kept]
                moves = [t for t in threads if partition[t] in moved]
                assert stays and moves, partition

                # every thread's first run is in flight, held by the agent: one bridge
                # leaves, its partitions move to the other
                await events.wait(lambda _: all(events.thread(t) for t in threads))
                assert sorted(counters.run_ids) == sorted(r["runId"] for r in held)
                assert await leaving.stop(how) == (0 if how == signal.SIGTERM else -how)
                # the runs it was relaying are closed by the bridge that took them over,
                # while the other bridge's runs are still held by the agent
                await events.wait(
                    lambda _: all(closed_runs(events.thread(t)) >= 1 for t in moves),
                    timeout=90,
                )
                for t in moves:
                    assert events.thread(t)[1]["code"] == "bridge_restarted", events.thread(t)
                for t in stays:
                    assert closed_runs(events.thread(t)) == 0, events.thread(t)

                counters.release.set()
                await events.wait(
                    lambda _: all(closed_runs(events.thread(t)) >= 2 for t in threads),
                    timeout=90,
                )
                await events.poll(1.5)  # a run started twice would close a third time
            finally:
                counters.release.set()
                await leaving.stop()
                await staying.stop()
    # every request reached the agent exactly once: none twice, none lost
    assert sorted(counters.run_ids) == sorted(r["runId"] for r in held + after)
    for t in threads:
        closes = [e for e in events.thread(t) if e["type"] in ("RUN_FINISHED", "RUN_ERROR")]
        assert len(closes) == 2, events.thread(t)
        assert closes[1]["type"] == "RUN_FINISHED", events.thread(t)
        if t in moves:  # closed by the bridge that took its partition over
            assert closes[0].get("code") == "bridge_restarted", events.thread(t)
        else:  # relayed through the rebalance by the bridge that kept its partition
            assert closes[0]["type"] == "RUN_FINISHED", events.thread(t)
