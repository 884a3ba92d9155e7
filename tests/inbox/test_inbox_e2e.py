"""The inbox against the real gateway on the real broker: interrupts raised on an agent's
own topics and on a group's appear in the view of `agui-gateway run` (inbox_enabled) and
of a separate `agui-gateway inbox`; answered, they leave both, live."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from gateway.codec import interrupts as records
from tests.inbox.support import check
from tests.integration.support import (
    GATEWAY_BIN,
    GatewayProcess,
    Namespace,
    collect,
    free_port,
    started,
)
from tests.integration.test_groups_e2e import (
    GROUPS,
    create_group,
    events,
    interrupted,
    request,
    resume,
)
from tests.integration.test_groups_e2e import (
    started as run_started,
)

TOKEN = "inbox-e2e-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
async def ns(kafka_bootstrap: str) -> Namespace:
    return Namespace(kafka_bootstrap)


class InboxProcess:
    """One `agui-gateway inbox` subprocess."""

    def __init__(self, ns: Namespace, log_dir: Path) -> None:
        self.port = free_port()
        self.env = ns.env(inbox_port=self.port, inbox_token=TOKEN, groups=GROUPS)
        self.log_path = log_dir / "inbox.log"
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> InboxProcess:
        log = self.log_path.open("ab")
        self.proc = started(
            await asyncio.create_subprocess_exec(
                str(GATEWAY_BIN), "inbox", env=self.env, stdout=log, stderr=log
            )
        )
        log.close()
        return self

    async def stop(self) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.terminate()
        return await asyncio.wait_for(self.proc.wait(), 30)


async def poll(
    url: str, until: Callable[[dict[str, Any]], bool], timeout: float = 60
) -> dict[str, Any]:
    """GET `url` (with the token) until its JSON satisfies `until`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    async with httpx.AsyncClient(timeout=5) as client:
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                answer = await client.get(url, headers=AUTH)
                last = (answer.status_code, answer.text[:2000])
                if answer.status_code == 200 and until(answer.json()):
                    return answer.json()
            await asyncio.sleep(0.2)
    raise AssertionError(f"{url}: not as expected in {timeout} s; last {last!r}")


def listed(answer: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(i["agent"], i["thread"], i["interrupt"]) for i in answer["items"]}


async def watch(url: str, changes: list[dict[str, Any]]) -> None:
    """Read the live changes at `url` into `changes` until cancelled."""
    async with (
        httpx.AsyncClient(timeout=None) as client,
        client.stream("GET", url, headers=AUTH) as stream,
    ):
        assert stream.status_code == 200
        async for line in stream.aiter_lines():
            if line.startswith("data:"):
                changes.append(orjson.loads(line[5:]))


async def test_the_view_follows_the_gateway_on_own_and_group_topics(ns: Namespace, tmp_path):
    await create_group(ns, partitions=2)
    await ns.create_agent("solo", partitions=1)
    gateway = await GatewayProcess(
        ns, tmp_path, groups=GROUPS, inbox_enabled="true", inbox_token=TOKEN
    ).start()
    inbox = await InboxProcess(ns, tmp_path).start()
    base = f"http://127.0.0.1:{gateway.port}"
    other = f"http://127.0.0.1:{inbox.port}"
    changes: list[dict[str, Any]] = []
    watching = None
    try:
        async with httpx.AsyncClient(timeout=5) as client:
            assert (await client.get(f"{base}/interrupts")).status_code == 401
            wrong = {"Authorization": "Bearer nope"}
            assert (await client.get(f"{base}/interrupts", headers=wrong)).status_code == 401
        await poll(f"{base}/interrupts", lambda a: a["lagSeconds"] == 0)
        watching = asyncio.create_task(watch(f"{base}/interrupts/events", changes))
        await events(ns, "alpha", run_started("g1", "ra"), interrupted("g1", "ra", "x"))
        await events(
            ns, "solo", run_started("s1", "rs"), interrupted("s1", "rs", "a", "b"), owner="solo"
        )
        await events(
            ns, "solo", run_started("s2", "r2"), interrupted("s2", "r2", "c", "d"), owner="solo"
        )
        wanted = {("alpha", "g1", "x"), ("solo", "s1", "a"), ("solo", "s1", "b")}
        wanted |= {("solo", "s2", "c"), ("solo", "s2", "d")}
        for url in (base, other):
            answer = await poll(f"{url}/interrupts", lambda a: listed(a) == wanted)
            check("interrupts", answer)
        team = await poll(f"{base}/interrupts?group=team", lambda a: a["total"] == 1)
        assert listed(team) == {("alpha", "g1", "x")}
        thread = await poll(f"{other}/threads/solo/s1", lambda a: len(a["open"]) == 2)
        check("thread", thread)
        assert [(r["run"], r["status"], r["closedAtMs"]) for r in thread["runs"]] == [
            ("rs", "interrupted", thread["open"][0]["openedAtMs"])
        ]
        assert [(i["interrupt"], i["status"]) for i in thread["runs"][0]["interrupts"]] == [
            ("a", "open"),
            ("b", "open"),
        ]

        # answered: alpha's x, and solo's a (b is abandoned)
        await request(ns, "alpha", resume("g1", "n1", "x"), "alpha-g1")
        solo = resume("s1", "n2", "a", "b")
        solo["resume"][1] = {"interruptId": "b", "status": "cancelled"}
        await request(ns, None, solo, "solo-s1", owner="solo")
        # s2: a resume leaving d uncovered is rejected; one naming zzz too is forwarded,
        # zzz stripped with a warning
        await request(ns, None, resume("s2", "n3", "c"), "solo-s2-short", owner="solo")
        await request(ns, None, resume("s2", "n4", "c", "d", "zzz"), "solo-s2", owner="solo")
        for url in (base, other):
            await poll(f"{url}/interrupts", lambda a: a["total"] == 0)
        summary = await poll(
            f"{other}/interrupts/summary",
            lambda a: (
                {x["agent"] for x in a["agents"] if x["latency"]["p50Seconds"] is not None}
                == {"alpha", "solo"}
            ),
        )
        check("summary", summary)
        solo_summary = await poll(
            f"{other}/interrupts/summary",
            lambda a: any(
                x["agent"] == "solo" and x["uncoveredInterrupts"] and x["unrecognisedEntries"]
                for x in a["agents"]
            ),
        )
        [counted] = [x for x in solo_summary["agents"] if x["agent"] == "solo"]
        assert (counted["uncoveredInterrupts"], counted["unrecognisedEntries"]) == (1, 1)

        # the thread's history: s2's rejected resume and its forwarded one, newest first,
        # with their codes, and the run the forward started; s1's interrupts closed
        s2 = await poll(
            f"{other}/threads/solo/s2", lambda a: len(a["verdicts"] or []) == 2, timeout=90
        )
        check("thread", s2)
        assert s2["verdictsKnown"] and s2["open"] == []
        forward, reject = s2["verdicts"]
        assert (reject["verdict"], reject["reasons"], reject["forwardedRun"]) == (
            "reject", ["uncovered_interrupt"], None,
        )  # fmt: skip
        assert (reject["run"], reject["correlationId"]) == ("n3", "solo-s2-short")
        assert [(e["interrupt"], e["status"], e["forwarded"]) for e in reject["interrupts"]] == [
            ("c", "resolved", False)
        ]
        assert (forward["verdict"], forward["reasons"], forward["forwardedRun"]) == (
            "forward", [], "n4",
        )  # fmt: skip
        assert forward["correlationId"] == "solo-s2"
        assert forward["attestation"] == "unattested" and forward["subject"] is None
        assert reject["atMs"] <= forward["atMs"]
        runs = {r["run"]: r for r in s2["runs"]}
        assert [(i["interrupt"], i["status"]) for i in runs["r2"]["interrupts"]] == [
            ("c", "resolved"),
            ("d", "resolved"),
        ]
        assert (runs["n4"]["status"], runs["n4"]["startedAtMs"]) == ("forwarded", forward["atMs"])
        s1 = await poll(f"{other}/threads/solo/s1", lambda a: len(a["verdicts"] or []) == 1)
        check("thread", s1)
        assert [(i["interrupt"], i["status"]) for i in s1["runs"][0]["interrupts"]] == [
            ("a", "resolved"),
            ("b", "cancelled"),
        ]
        on_gateway = await poll(f"{base}/threads/solo/s2", lambda a: len(a["verdicts"] or []) == 2)
        assert [v["verdict"] for v in on_gateway["verdicts"]] == ["forward", "reject"]

        deadline = time.monotonic() + 10
        while len(changes) < 10 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        for change in changes:
            check("change", change)
        closes = {(c["agent"], c["interrupt"]): c["status"] for c in changes if c["op"] == "close"}
        assert closes == {("alpha", "x"): "resolved", ("solo", "a"): "resolved",
                          ("solo", "b"): "cancelled", ("solo", "c"): "resolved",
                          ("solo", "d"): "resolved"}  # fmt: skip
        assert len([c for c in changes if c["op"] == "open"]) == 5

        # the topic itself: a record per opening, a tombstone per close, each once
        everything = await collect(ns.bootstrap, ns.interrupts, count=10, settle=1.0)
        written = [r for r in everything if records.parse_key(r.key)[2] is not None]
        assert len(written) == 10
        tombstones = sorted(records.split_key(r.key)[2] for r in written if r.value is None)
        assert tombstones == ["a", "b", "c", "d", "x"]
    finally:
        if watching is not None:
            watching.cancel()
            with contextlib.suppress(BaseException):
                await watching
        assert await inbox.stop() == 0, inbox.log_path.read_text()[-3000:]
        await gateway.stop()
