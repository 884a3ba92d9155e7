"""`agui-gateway demo`: its scenarios against the core, and end to end on the real broker."""

from __future__ import annotations

import asyncio
import random
import re
import sys
import time
import urllib.request
from pathlib import Path

import orjson
import pytest

from gateway.core import Policy, apply_event, judge
from gateway.demo.console import FINAL_MARKER
from gateway.demo.runs import plan_run
from gateway.demo.scenarios import SCENARIOS, Interrupted
from tests.integration.support import REPO_ROOT, Namespace, collect

GATEWAY_BIN = Path(sys.executable).with_name("agui-gateway")
DURATION_S = 20
RUN_TIMEOUT_S = 75


def field(summary: str, name: str) -> str:
    match = re.search(rf"^\s*{re.escape(name)}\s+(.*?)\s*$", summary, re.MULTILINE)
    assert match, f"no {name!r} line in the final summary:\n{summary}"
    return match.group(1)


def pairs(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", text)}


def fetch(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.status, response.read().decode()


@pytest.mark.parametrize("strict", [False, True])
def test_every_scenario_gets_the_verdict_it_expects_from_the_core(strict: bool) -> None:
    """The clients count a verdict as unexpected: the expectations must be the core's own."""
    rng = random.Random(20240611)
    judged: dict[str, int] = {}
    for n in range(400):
        thread, run = f"thread-{n}", f"run-{n}"
        plan = plan_run(rng, thread, run, depth=0)
        if plan.outcome != "interrupt":
            continue
        now = time.time()
        state = None
        for event in plan.events:
            state = apply_event(state, thread, event, int(now * 1000)).state
        assert state is not None and len(state.interrupts) == len(plan.interrupts)
        for name, (_, build) in SCENARIOS.items():
            sends = build(Interrupted(thread, run, plan.interrupts), rng, now, strict)
            if sends is None:
                continue
            judged[name] = judged.get(name, 0) + 1
            current = state
            for send in sends:
                at_ms = int((send.not_before or now) * 1000)
                try:
                    raw = orjson.loads(send.body)
                except orjson.JSONDecodeError:  # the gateway rejects it before judging
                    verdict, codes = "reject", {"malformed_input"}
                else:
                    decision, new = judge(current, raw, at_ms, Policy(strict=strict), thread)
                    verdict = str(decision.verdict)
                    codes = {r.code for r in decision.reasons}
                    current = new if new is not None else current
                assert (verdict, codes) == (send.expect, set(send.reasons)), (name, send)
                assert send.answers == (verdict == "forward"), (name, send)
    assert set(judged) == set(SCENARIOS), judged


@pytest.mark.integration
@pytest.mark.timeout(150)
async def test_demo_runs_traffic_through_the_gateway_and_summarises_it(
    kafka_bootstrap: str, unique_name
) -> None:
    ns = Namespace(kafka_bootstrap)
    agent = unique_name("demo")[:20]
    argv = ["demo", "--agent", agent, "--duration", str(DURATION_S), "--rate", "10"]
    proc = await asyncio.create_subprocess_exec(
        str(GATEWAY_BIN),
        *argv,
        env={**ns.env(http_port=0), "COLUMNS": "400"},  # one line per figure
        cwd=str(REPO_ROOT),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    stderr = asyncio.create_task(proc.stderr.read())
    lines: list[str] = []
    metrics_seen: tuple[int, str] | None = None
    inbox_seen: tuple[int, str] | None = None
    try:
        async with asyncio.timeout(RUN_TIMEOUT_S):
            while line := (await proc.stdout.readline()).decode():
                lines.append(line)
                # the first periodic summary: traffic flows, so /metrics must show it
                if metrics_seen is None and line.startswith("  requests forwarded"):
                    url = re.search(r"http://\S+/metrics", "".join(lines))
                    assert url, "".join(lines)
                    metrics_seen = await asyncio.to_thread(fetch, url.group(0))
                    # the demo opens the inbox and says where, with a token made for it
                    inbox = re.search(
                        r"the inbox is at (http://\S+/inbox): sign in with token (\S+) ",
                        "".join(lines),
                    )
                    assert inbox, "".join(lines)
                    bearer = {"Authorization": f"Bearer {inbox.group(2)}"}
                    inbox_seen = await asyncio.to_thread(fetch, inbox.group(1), bearer)
            err = (await stderr).decode()
            returncode = await proc.wait()
    finally:
        stderr.cancel()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    out = "".join(lines)
    assert returncode == 0, f"exit {returncode}\nstdout:\n{out}\nstderr:\n{err}"
    assert err == "", err

    assert metrics_seen is not None, out
    status, body = metrics_seen
    assert status == 200
    assert f'agui_gateway_events_total{{agent="{agent}"' in body
    assert inbox_seen is not None and inbox_seen[0] == 200, inbox_seen
    assert "Interrupt inbox" in inbox_seen[1] and 'id="interrupts"' in inbox_seen[1]
    assert re.search(r"^\s+inbox\s+http://\S+/inbox \(sign in with token ", out, re.M), out

    assert out.count(FINAL_MARKER) == 1, out
    summary = out.split(FINAL_MARKER, 1)[1]
    forwarded = int(field(summary, "requests forwarded"))
    rejected = int(field(summary, "requests rejected"))
    duplicates = int(field(summary, "duplicate requests"))
    reasons = pairs(field(summary, "rejection reasons"))
    assert forwarded > 0, summary
    assert duplicates > 0, summary
    for reason in ("uncovered_interrupt", "payload_schema_mismatch", "malformed_input"):
        assert reasons.get(reason, 0) > 0, (reason, summary)
    assert len([r for r in reasons.values() if r > 0]) >= 4, summary
    assert rejected <= sum(reasons.values()), summary
    # every simulated request got the verdict and reasons its scenario called for
    assert field(summary, "unexpected verdicts") == "0", summary
    assert int(field(summary, "conversations started")) >= DURATION_S * 10 * 0.8, summary
    # failed runs are published and the gateway closes them as failed
    assert pairs(field(summary, "runs published by outcome"))["failed"] > 0, summary
    assert pairs(field(summary, "runs closed by outcome"))["failed"] > 0, summary

    # the gateway's metrics agree with what it committed to Kafka
    run_requests = await collect(
        ns.bootstrap, ns.run_requests(agent), count=forwarded, timeout=20, settle=2.0
    )
    assert len(run_requests) == forwarded
    for record in run_requests:  # keyed by threadId, as the agents consume them
        assert orjson.loads(record.value)["threadId"] == record.key.decode()
    rejections = await collect(ns.bootstrap, ns.rejections, count=rejected, timeout=20, settle=1.0)
    assert len(rejections) == rejected


@pytest.mark.integration
async def demo_output(ns: Namespace, argv: list[str], timeout: float) -> str:
    """What `agui-gateway <argv>` printed, once it exited 0 with nothing on stderr."""
    proc = await asyncio.create_subprocess_exec(
        str(GATEWAY_BIN),
        *argv,
        env={**ns.env(http_port=0), "COLUMNS": "400"},  # one line per figure
        cwd=str(REPO_ROOT),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(timeout):
            stdout, stderr = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    out, err = stdout.decode(), stderr.decode()
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{out}\nstderr:\n{err}"
    assert err == "", err
    return out


@pytest.mark.timeout(200)
async def test_demo_with_the_real_agent_runs_each_approved_tool_call_once(
    kafka_bootstrap: str, unique_name
) -> None:
    """`--real-agent`: a pydantic-ai agent behind the in-process bridge, driven through the
    gateway; its tool runs exactly once per approval the gateway forwarded."""
    ns = Namespace(kafka_bootstrap)
    agent = unique_name("demo")[:20]
    real = f"{agent}-payments"
    argv = ["demo", "--agent", agent, "--duration", "20", "--rate", "2", "--real-agent"]
    out = await demo_output(ns, argv, timeout=150)

    title = f"real agent {real!r} (pydantic-ai, behind the bridge)"
    assert out.count(FINAL_MARKER) == 1, out
    periodic, final = out.split(FINAL_MARKER, 1)
    assert title in periodic, out  # the live console drew the agent's rows while it ran
    assert field(periodic, "bridge runs by result")
    summary = final.split(title, 1)[1]  # the real agent's section is the last one

    calls, approvals = (int(n) for n in field(summary, "tool calls / approvals").split()[:3:2])
    assert calls == approvals >= 1, summary
    completed = int(field(summary, "approved runs completed"))
    assert 1 <= completed <= approvals, summary
    runs = pairs(field(summary, "bridge runs by result"))
    assert runs["success"] == calls, summary  # each approved run ended in success, once
    assert runs["interrupt"] >= runs["success"], summary
    assert field(summary, "bridge runs in flight") == "0", summary
    assert field(summary, "agent HTTP errors") == "none", summary
    assert field(summary, "unexpected verdicts") == "0", summary
    verdicts = pairs(field(summary, "gateway verdicts"))
    sent = pairs(field(summary, "requests sent by kind"))
    assert sent["approval"] == approvals, summary
    assert verdicts["forward"] == sent["request"] + approvals, summary
    assert verdicts.get("reject", 0) == sent.get("bad_resume", 0), summary
    assert verdicts.get("duplicate", 0) == sent.get("replay", 0), summary
    relayed = field(summary, "events relayed")
    assert int(relayed.split()[0]) > 0 and relayed.endswith("0 by the bridge"), summary
    # the agent was asked for exactly the runs the gateway forwarded
    assert int(field(summary, "agent HTTP requests").split()[0]) == verdicts["forward"], summary
