"""On the real broker, through a real `agui-gateway run`: /metrics counts exactly what happened.

One agent, a scripted mix of event streams and run requests whose every outcome is
known in advance; after each phase the counters must settle at exactly the values
the scenario implies (never "at least").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from gateway import __version__
from tests.integration.support import GatewayProcess, Namespace, produce
from tests.observe.exposition import Samples, by, parse, select, stable_view, total

pytestmark = pytest.mark.integration

AGENT = "obs"
SCHEMA = {
    "type": "object",
    "required": ["approved"],
    "properties": {"approved": {"type": "boolean"}},
}


def started(thread: str, run: str) -> tuple[str, dict]:
    return thread, {"type": "RUN_STARTED", "threadId": thread, "runId": run}


def finished(thread: str, run: str, outcome: dict | None = None) -> tuple[str, dict]:
    event: dict = {"type": "RUN_FINISHED", "threadId": thread, "runId": run}
    if outcome is not None:
        event["outcome"] = outcome
    return thread, event


def interrupted(thread: str, run: str, *interrupts: dict) -> tuple[str, dict]:
    return finished(thread, run, {"type": "interrupt", "interrupts": list(interrupts)})


def request(thread: str, run: str, *entries: dict) -> tuple[str, dict]:
    body: dict = {"threadId": thread, "runId": run, "messages": []}
    if entries:
        body["resume"] = list(entries)
    return thread, body


def entry(interrupt_id: str, status: str = "resolved", payload: object = None) -> dict:
    out: dict = {"interruptId": interrupt_id, "status": status}
    if payload is not None:
        out["payload"] = payload
    return out


async def settled(
    gateway: GatewayProcess,
    ready: Callable[[Samples], bool],
    what: str,
    timeout: float = 30,
    quiet: float = 1.5,
) -> Samples:
    """/metrics once `ready` holds and nothing but lag has changed for `quiet` seconds."""
    deadline = time.monotonic() + timeout
    last: Samples | None = None
    since = 0.0
    while time.monotonic() < deadline:
        samples = parse(await asyncio.to_thread(gateway.metrics))
        view = stable_view(samples)
        if ready(samples):
            if view == last:
                if time.monotonic() - since >= quiet:
                    return samples
            else:
                since = time.monotonic()
        last = view
        await asyncio.sleep(0.25)
    summary = {k: v for k, v in (last or {}).items() if k[0].startswith("agui_gateway_")}
    raise AssertionError(
        f"metrics did not settle ({what}) in {timeout}s; last: {summary}\n{gateway.log_tail()}"
    )


def counts(samples: Samples, name: str, label: str | tuple[str, ...]) -> dict:
    """Non-zero values: the gateway creates an agent's bounded series at zero up front."""
    return {k: v for k, v in by(samples, name, label, agent=AGENT).items() if v}


@pytest.fixture
async def ns(kafka_bootstrap: str) -> Namespace:
    return Namespace(kafka_bootstrap)


async def test_metrics_count_exactly_what_the_scenario_implies(ns: Namespace, tmp_path) -> None:
    await ns.create_agent(AGENT, partitions=2)
    # every metric per agent: the exact per-agent counts below need the full detail
    gateway = await GatewayProcess(
        ns, tmp_path, sweep_interval_s=0.2, metrics_agent_detail="full"
    ).start()
    try:
        # --- phase 1: agent event streams ------------------------------------------------
        await produce(
            ns.bootstrap,
            ns.events(AGENT),
            [
                # t1: interrupted with three interrupts; one has a custom reason, one a schema
                started("t1", "r1"),
                ("t1", {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "hi"}),
                interrupted(
                    "t1",
                    "r1",
                    {"id": "i1", "reason": "tool_call", "toolCallId": "c1"},
                    {"id": "i2", "reason": "escalate_to_legal"},
                    {"id": "i3", "reason": "approval_required", "responseSchema": SCHEMA},
                ),
                # t2: one interrupt, already expired when delivered
                started("t2", "r1"),
                interrupted(
                    "t2",
                    "r1",
                    {"id": "i4", "reason": "input_required", "expiresAt": "2001-01-01T00:00:00Z"},
                ),
                # t3: succeeds, then an event type the protocol does not define
                started("t3", "r1"),
                finished("t3", "r1"),
                ("t3", {"type": "MADE_UP_EVENT"}),
                # t4: fails
                started("t4", "r1"),
                ("t4", {"type": "RUN_ERROR", "message": "boom"}),
                # t5: cancelled
                started("t5", "r1"),
                finished("t5", "r1", {"type": "cancelled"}),
                # t6: a stream that does not open with RUN_STARTED
                ("t6", {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m6", "delta": "x"}),
            ],
        )
        s = await settled(
            gateway,
            lambda s: (
                total(s, "agui_gateway_events_total") == 13
                and total(s, "agui_gateway_interrupts_expired_total") == 1
            ),
            "events consumed and the expiry swept",
        )
        assert counts(s, "agui_gateway_events_total", "type") == {
            "RUN_STARTED": 5,
            "RUN_FINISHED": 4,
            "RUN_ERROR": 1,
            "TEXT_MESSAGE_CONTENT": 2,
            "unknown": 1,
        }
        assert counts(s, "agui_gateway_runs_closed_total", "outcome") == {
            "interrupt": 2,
            "success": 1,
            "cancelled": 1,
            "failed": 1,
        }
        # the custom reason is folded into "other"
        assert counts(s, "agui_gateway_interrupts_raised_total", "reason") == {
            "tool_call": 1,
            "other": 1,
            "approval_required": 1,
            "input_required": 1,
        }
        assert counts(s, "agui_gateway_interrupts_open", "agent") == {AGENT: 4}
        assert counts(s, "agui_gateway_threads", "agent") == {AGENT: 6}
        assert counts(s, "agui_gateway_interrupts_expired_total", "agent") == {AGENT: 1}
        assert counts(s, "agui_gateway_protocol_violations_total", "rule") == {"first_event": 1}
        assert counts(s, "agui_gateway_warnings_total", "code") == {
            "protocol_violation": 1,
            "unknown_event_type": 1,
            "interrupt_expired": 1,
        }
        assert total(s, "agui_gateway_requests_total") == 0

        # --- phase 2: run requests ----------------------------------------------------------
        covering = request(
            "t1",
            "r2",
            entry("i1"),
            entry("i2", "cancelled"),
            entry("i3", payload={"approved": True}),
            entry("ghost"),  # names no open interrupt: stripped with a warning
        )
        await produce(
            ns.bootstrap,
            ns.requests(AGENT),
            [
                # reject: i2 and i3 uncovered (2 reasons)
                request("t1", "r2", entry("i1")),
                # reject: i3's payload breaks its responseSchema
                request(
                    "t1",
                    "r2",
                    entry("i1"),
                    entry("i2", "cancelled"),
                    entry("i3", payload={"approved": "yes"}),
                ),
                # reject: resolving an expired interrupt
                request("t2", "r2", entry("i4")),
                # forward: answers i1 (resolved), i2 (cancelled), i3 (resolved); ghost stripped
                covering,
                # duplicate of the forward
                covering,
                # forward: abandons the expired i4
                request("t2", "r2", entry("i4", "cancelled")),
                # reject: not JSON
                ("t7", b"{not json"),
                # forward: a thread the gateway never saw (thread_unknown warning)
                request("t8", "r1"),
                # forward: a resume on a thread whose run succeeded: unrecognised entry
                request("t3", "r2", entry("ghost2")),
            ],
        )
        s = await settled(
            gateway,
            lambda s: (
                total(s, "agui_gateway_requests_total") == 9
                and total(s, "agui_gateway_decision_seconds_count") == 9
            ),
            "nine requests decided",
        )
        assert counts(s, "agui_gateway_requests_total", "verdict") == {
            "forward": 4,
            "reject": 4,
            "duplicate": 1,
        }

        # --- phase 3: the agent continues t1 ---------------------------------------------------
        await produce(ns.bootstrap, ns.events(AGENT), [started("t1", "r2")])
        s = await settled(
            gateway,
            lambda s: by(s, "agui_gateway_events_total", "type").get("RUN_STARTED") == 6,
            "t1 continued",
        )

        assert counts(s, "agui_gateway_requests_total", "verdict") == {
            "forward": 4,
            "reject": 4,
            "duplicate": 1,
        }
        assert counts(s, "agui_gateway_rejections_total", "reason") == {
            "uncovered_interrupt": 2,
            "payload_schema_mismatch": 1,
            "expired_interrupt": 1,
            "malformed_input": 1,
        }
        assert counts(s, "agui_gateway_uncovered_interrupts_total", "agent") == {AGENT: 2}
        assert counts(s, "agui_gateway_expired_answers_total", "agent") == {AGENT: 1}
        assert counts(s, "agui_gateway_unrecognised_entries_total", "agent") == {AGENT: 2}
        assert counts(s, "agui_gateway_interrupts_expired_total", "agent") == {AGENT: 1}
        assert counts(s, "agui_gateway_interrupts_raised_total", "reason") == {
            "tool_call": 1,
            "other": 1,
            "approval_required": 1,
            "input_required": 1,
        }
        assert counts(s, "agui_gateway_runs_closed_total", "outcome") == {
            "interrupt": 2,
            "success": 1,
            "cancelled": 1,
            "failed": 1,
        }
        # one observation per answer forwarded (the duplicate and the rejects observe none)
        answers = counts(s, "agui_gateway_interrupt_response_seconds_count", ("reason", "status"))
        assert answers == {
            ("tool_call", "resolved"): 1,
            ("other", "cancelled"): 1,
            ("approval_required", "resolved"): 1,
            ("input_required", "cancelled"): 1,
        }
        inf_buckets = by(
            s, "agui_gateway_interrupt_response_seconds_bucket", ("reason", "status"), le="+Inf"
        )
        assert inf_buckets == answers
        assert counts(s, "agui_gateway_events_total", "type") == {
            "RUN_STARTED": 6,
            "RUN_FINISHED": 4,
            "RUN_ERROR": 1,
            "TEXT_MESSAGE_CONTENT": 2,
            "unknown": 1,
        }
        assert counts(s, "agui_gateway_warnings_total", "code") == {
            "protocol_violation": 1,
            "unknown_event_type": 1,
            "interrupt_expired": 1,
            "unrecognised_entry": 2,
            "thread_unknown": 1,
        }
        assert counts(s, "agui_gateway_protocol_violations_total", "rule") == {"first_event": 1}
        # t1's interrupts are gone with its new run; t2's answered i4 stays until t2 moves on
        assert counts(s, "agui_gateway_interrupts_open", "agent") == {AGENT: 1}
        # t1..t6 from events, t8 from its forwarded request (t7's was not JSON)
        assert counts(s, "agui_gateway_threads", "agent") == {AGENT: 7}
        assert total(s, "agui_gateway_decision_seconds_count") == 9
        assert total(s, "agui_gateway_warnings_suppressed_total") == 0
        results = by(s, "agui_gateway_transactions_total", "result")
        assert results.get("aborted") == 0 and results.get("fenced") == 0  # created at zero
        assert results["committed"] >= 1
        assert select(s, "agui_gateway_build_info") == {frozenset({("version", __version__)}): 1.0}

        # --- consumer lag: every partition of both topics caught up ----------------------------
        roles = {"events", "requests"}  # the topic label is the role, not the topic's name
        deadline = time.monotonic() + 20
        lag: dict = {}
        while time.monotonic() < deadline:
            s = parse(await asyncio.to_thread(gateway.metrics))
            lag = {
                k: v
                for k, v in by(s, "agui_gateway_consumer_lag", ("agent", "topic")).items()
                if k[0] == AGENT
            }
            if len(lag) == 2 and not any(lag.values()):
                break
            await asyncio.sleep(0.5)
        # per agent and topic role (summed over partitions), never per partition
        assert lag == {(AGENT, role): 0 for role in roles}
    finally:
        await gateway.stop()
