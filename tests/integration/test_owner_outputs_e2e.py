"""Rejections and warnings on each owner's own topics (a template), on the real broker:
an agent alone and a group, each seeing its own and none of the other's."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.integration.support import GATEWAY_BIN, GatewayProcess, Namespace, collect, values
from tests.integration.test_groups_e2e import events, interrupted, request, resume, started

GROUPS = json.dumps({"team": {"agents": ["alpha", "beta"], "partitions": 2}})


@pytest.fixture
async def ns(kafka_bootstrap: str) -> Namespace:
    return Namespace(kafka_bootstrap)


def templates(ns: Namespace) -> dict[str, str]:
    return {
        "rejections_topic": f"{ns.prefix}.{{agent}}.rejections",
        "warnings_topic": f"{ns.prefix}.{{agent}}.warnings",
        "groups": GROUPS,
    }


async def topics_create(ns: Namespace, *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        str(GATEWAY_BIN),
        "topics",
        "create",
        *args,
        env=ns.env(**templates(ns)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0, (out + err).decode()
    return out.decode()


async def test_each_owner_gets_its_rejections_and_warnings_on_its_own_topics(
    ns: Namespace, tmp_path
) -> None:
    made = {}
    for args in (["--group", "team"], ["--agent", "solo", "--partitions", "1"]):
        out = await topics_create(ns, *args)
        made.update({line.split()[1]: line.split()[0] for line in out.splitlines()})
    for owner in ("team", "solo"):
        for kind in ("rejections", "warnings"):
            assert made[f"{ns.prefix}.{owner}.{kind}"] == "created"
    assert ns.rejections not in made and ns.warnings not in made  # no shared topic
    nowhere = f"{ns.prefix}.no-such-replies"  # a reply topic that does not exist: a warning
    gateway = await GatewayProcess(ns, tmp_path, **templates(ns)).start()
    try:
        # each owner: one running thread (a resume is rejected: run_active), one resumable
        await events(ns, "beta", started("t1", "rb"))
        await events(ns, "alpha", started("t2", "ra"), interrupted("t2", "ra", "x"))
        await events(ns, None, started("t1", "rs"), owner="solo")
        await events(ns, None, started("t2", "rs"), interrupted("t2", "rs", "x"), owner="solo")
        await request(ns, "beta", resume("t1", "n1", "x"), "team-reject", nowhere)
        await request(ns, "alpha", resume("t2", "n2", "x"), "team-forward")
        await request(ns, None, resume("t1", "n1", "x"), "solo-reject", nowhere, owner="solo")
        await request(ns, None, resume("t2", "n2", "x"), "solo-forward", owner="solo")
        await collect(ns.bootstrap, ns.run_requests("team"), count=1)
        await collect(ns.bootstrap, ns.run_requests("solo"), count=1)

        async def on(owner: str, kind: str) -> list[dict]:
            topic = f"{ns.prefix}.{owner}.{kind}"
            return values(await collect(ns.bootstrap, topic, count=1, timeout=60, settle=1.0))

        rejected = {owner: await on(owner, "rejections") for owner in ("team", "solo")}
        assert [(r["agent"], [c["code"] for c in r["reasons"]]) for r in rejected["team"]] == [
            ("beta", ["run_active"])
        ]
        assert [(r["agent"], [c["code"] for c in r["reasons"]]) for r in rejected["solo"]] == [
            ("solo", ["run_active"])
        ]
        warned = {owner: await on(owner, "warnings") for owner in ("team", "solo")}
        assert [(w["code"], w["agent"]) for w in warned["team"]] == [
            ("reply_topic_unknown", "beta")
        ]
        assert [(w["code"], w["agent"]) for w in warned["solo"]] == [
            ("reply_topic_unknown", "solo")
        ]
    finally:
        await gateway.stop()
