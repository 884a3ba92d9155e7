"""The audit trail on the real broker: one record per decided request, exactly when its
forward or rejection is visible (across a kill -9 of the gateway), never a payload, and
`agui-gateway audit` reading it back with its filters."""

from __future__ import annotations

import asyncio
import hashlib
import signal
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from gateway.codec.records import InRecord
from gateway.core import Decision, Verdict
from gateway.core.values.identity import Identity
from gateway.kafka.pairs import audit
from tests.integration.support import (
    GATEWAY_BIN,
    GatewayProcess,
    Namespace,
    collect,
    header,
    produce,
    values,
)
from tests.integration.test_gateway_durability import (
    assert_exactly_once,
    request_for,
    send_requests,
    thread_events,
    wait_metric,
)
from tests.record_schemas import check

AGENT = "ops"  # the durability helpers' agent
SECRET = "IBAN DE89 3704 0044 0532 0130 00"


@pytest.fixture
async def ns(kafka_bootstrap: str) -> Namespace:
    return Namespace(kafka_bootstrap)


async def audit_records(ns: Namespace, count: int, settle: float = 3.0) -> list[dict]:
    records = await collect(ns.bootstrap, ns.audit, count=count, timeout=90, settle=settle)
    return values(records)  # `collect` checked each against schemas/audit.schema.json


@pytest.mark.parametrize("sig", [signal.SIGKILL], ids=["sigkill"])
async def test_each_decision_has_one_audit_record_iff_its_output_is_visible_across_a_kill(
    ns, tmp_path, sig
) -> None:
    await ns.create_agent(AGENT, partitions=3)
    threads = [f"t{i:03d}" for i in range(120)]
    first = await GatewayProcess(ns, tmp_path, name="first").start()
    await produce(ns.bootstrap, ns.events(AGENT), [e for t in threads for e in thread_events(t)])
    await wait_metric(first, 'agui_gateway_runs_closed_total{outcome="interrupt"}', len(threads))
    sender = asyncio.create_task(send_requests(ns, threads, pause=0.01))
    await wait_metric(first, "agui_gateway_requests_total{", 20)
    assert await first.stop(sig) in (0, -signal.SIGKILL)  # mid-traffic
    second = await GatewayProcess(ns, tmp_path, name="second").start()
    try:
        await sender
        await assert_exactly_once(ns, threads)  # each forward and rejection once
        found = await audit_records(ns, len(threads))
        by_correlation = Counter(r["correlationId"] for r in found)
        assert [c for c, n in by_correlation.items() if n > 1] == [], "duplicate audit records"
        assert set(by_correlation) == set(threads), "an audit gap"
        good = {t for i, t in enumerate(threads) if i % 2 == 0}
        verdicts = {r["correlationId"]: r["verdict"] for r in found}
        assert {t for t, v in verdicts.items() if v == "forward"} == good
        assert {t for t, v in verdicts.items() if v == "reject"} == set(threads) - good
        # the forwards' audit records name what reached the agent
        forwarded = await collect(ns.bootstrap, ns.run_requests(AGENT), count=len(good))
        assert {header(r, "agui-correlation-id") for r in forwarded} == good
        for record in found:
            assert record["attestation"] == "unattested" and record["identity"] is None
            assert record["source"]["topic"] == ns.requests(AGENT)
            assert record["interrupts"][0]["interruptId"] == "a"
            assert record["interrupts"][0]["reason"] == "tool_call"
    finally:
        await second.stop()


async def run_audit(ns: Namespace, *args: str, **settings: object) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        str(GATEWAY_BIN),
        "audit",
        *args,
        env=ns.env(**settings),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def lines(out: str) -> list[dict]:
    found = [orjson.loads(line) for line in out.splitlines()]
    for body in found:
        check("audit", body)
    return found


async def test_the_payload_is_never_written_only_its_hash(ns, tmp_path) -> None:
    await ns.create_agent(AGENT, partitions=1)
    gw = await GatewayProcess(ns, tmp_path).start()
    try:
        await produce(ns.bootstrap, ns.events(AGENT), thread_events("pay"))
        payload = {"iban": SECRET, "approved": True}
        request = {
            "threadId": "pay",
            "runId": "pay-r2",
            "messages": [],
            "resume": [
                {"interruptId": "a", "status": "resolved", "payload": payload},
                {"interruptId": "b", "status": "cancelled"},
            ],
        }
        await produce(ns.bootstrap, ns.requests(AGENT), [("pay", request)])
        (record,) = await collect(ns.bootstrap, ns.audit, count=1, timeout=60, settle=2.0)
        assert SECRET.encode() not in record.value and b"iban" not in record.value
        assert record.key == f"{AGENT}/pay".encode()
        body = orjson.loads(record.value)
        canonical = ('{"approved":true,"iban":"' + SECRET + '"}').encode()
        assert body["interrupts"][0]["payloadSha256"] == hashlib.sha256(canonical).hexdigest()
        assert body["interrupts"][1] == {
            "interruptId": "b",
            "status": "cancelled",
            "reason": "input_required",
            "forwarded": True,
            "payloadSha256": None,
        }
        # the forward itself still carries the payload to the agent
        (forward,) = await collect(ns.bootstrap, ns.run_requests(AGENT), count=1, timeout=30)
        assert SECRET.encode() in forward.value
        code, out, err = await run_audit(ns, "--agent", AGENT, "--output", "json")
        assert code == 0, err
        assert SECRET not in out and lines(out)[0]["interrupts"] == body["interrupts"]
    finally:
        await gw.stop()


def identity_record(
    ns: Namespace,
    thread: str,
    who: Identity | None,
    decided_ms: int,
    agent: str = "pay",
    group: str | None = None,
) -> bytes:
    """An audit record as the gateway's shaping writes it, for a decision carrying an
    identity (the judge will set it once identities are verified)."""
    record = InRecord(ns.requests("pay"), 0, decided_ms % 1000, decided_ms, 1, thread.encode(), b"")
    decision = Decision(Verdict.FORWARD, thread_id=thread, run_id=f"{thread}-r2", identity=who)
    body = audit.body(record, decision, agent, group, thread, decided_ms, decided_ms)
    return audit.encode(body)


async def write_in_transaction(
    ns: Namespace, records: list[tuple[str, bytes, int]], commit: bool
) -> None:
    """Audit records written as the gateway writes them: in a transaction, stamped at
    their decision time (the gateway's producer stamps them as it sends them)."""
    producer = AIOKafkaProducer(
        bootstrap_servers=ns.bootstrap, transactional_id=f"{ns.prefix}-writer-{commit}"
    )
    await producer.start()
    try:
        await producer.begin_transaction()
        for key, value, at in records:
            await producer.send_and_wait(ns.audit, value, key=key.encode(), timestamp_ms=at)
        if commit:
            await producer.commit_transaction()
        else:
            await producer.abort_transaction()
    finally:
        await producer.stop()


async def test_the_command_filters_real_records_by_agent_thread_approver_and_time(
    ns, tmp_path: Path
) -> None:
    await ns.create_agent(AGENT, partitions=2)
    gw = await GatewayProcess(ns, tmp_path).start()
    try:
        threads = ["f1", "f2", "f3"]
        await produce(
            ns.bootstrap, ns.events(AGENT), [e for t in threads for e in thread_events(t)]
        )
        for index, thread in enumerate(threads):
            await produce(
                ns.bootstrap,
                ns.requests(AGENT),
                [(thread, request_for(thread, index != 1))],
                headers=[("agui-correlation-id", f"c-{thread}".encode())],
            )
        await collect(ns.bootstrap, ns.audit, count=3, timeout=60)
    finally:
        await gw.stop()
    ada = Identity("ada@example.com", ("approvers", "staff"), "https://idp", "edge-1")
    bob = Identity("bob@example.com", ("staff",), "https://idp", "")
    day = 86_400_000
    base = (int(time.time() * 1000) // day - 10) * day  # midnight UTC ten days ago
    await write_in_transaction(
        ns,
        [
            (f"pay/{t}", identity_record(ns, t, who, at), at)
            for t, who, at in (
                ("p1", ada, base),
                ("p2", bob, base + day),
                ("p3", None, base + 2 * day),
                ("p4", ada, base + 3 * day),
            )
        ],
        commit=True,
    )
    grouped = identity_record(ns, "g1", bob, base + 4 * day, agent="alpha", group="team")
    await write_in_transaction(ns, [("alpha/g1", grouped, base + 4 * day)], commit=True)
    aborted = [("pay/aborted", identity_record(ns, "aborted", ada, base), base)]
    await write_in_transaction(ns, aborted, commit=False)

    code, out, err = await run_audit(ns, "--agent", AGENT, "--thread", "f2", "--output", "json")
    assert code == 0, err
    (f2,) = lines(out)
    assert (f2["threadId"], f2["verdict"], f2["correlationId"]) == ("f2", "reject", "c-f2")
    assert [r["code"] for r in f2["reasons"]] == ["uncovered_interrupt"]

    code, out, _ = await run_audit(ns, "--agent", AGENT, "--verdict", "forward", "--output", "json")
    assert sorted(b["threadId"] for b in lines(out)) == ["f1", "f3"]

    code, out, _ = await run_audit(ns, "--approver", "ada@example.com", "--output", "json")
    assert [b["threadId"] for b in lines(out)] == ["p1", "p4"]  # not the aborted one
    assert lines(out)[0]["identity"]["groups"] == ["approvers", "staff"]

    code, out, _ = await run_audit(ns, "--approver-group", "staff", "--output", "json")
    assert [b["threadId"] for b in lines(out)] == ["p1", "p2", "p4", "g1"]

    code, out, _ = await run_audit(ns, "--group", "team", "--output", "json")
    assert [(b["agent"], b["group"], b["threadId"]) for b in lines(out)] == [
        ("alpha", "team", "g1")
    ]

    code, out, _ = await run_audit(ns, "--agent", "pay", "--unattested", "--output", "json")
    assert [b["threadId"] for b in lines(out)] == ["p3"]

    # base + 1 day (UTC by its Z), base + 3 days (an offset given)
    since = datetime.fromtimestamp((base + day) / 1000, UTC).isoformat().replace("+00:00", "Z")
    until = datetime.fromtimestamp((base + 3 * day) / 1000, UTC).isoformat()
    code, out, _ = await run_audit(ns, "--since", since, "--until", until, "--output", "json")
    assert [b["threadId"] for b in lines(out)] == ["p2", "p3"]

    code, out, _ = await run_audit(ns, "--agent", "pay", "--limit", "2", "--output", "json")
    assert [b["threadId"] for b in lines(out)] == ["p3", "p4"]  # the newest two
    assert "4 records match; the newest 2 shown" in _

    code, out, err = await run_audit(ns, "--approver", "ada@example.com")  # the table
    assert code == 0, err
    header_line, *rows = out.splitlines()
    assert header_line.split()[:3] == ["decided", "at", "verdict"]
    assert [r.split()[3] for r in rows] == ["p1", "p4"]
    assert all("ada@example.com" in r for r in rows)
    code, out, _ = await run_audit(ns, "--agent", AGENT, "--thread", "f1")
    assert "unattested" in out.splitlines()[1] and "a:resolved, b:cancelled" in out

    code, out, err = await run_audit(ns, "--thread", "nope")
    assert code == 0 and out == "" and "no record" in err


async def test_the_command_says_clearly_what_it_cannot_do(ns) -> None:
    code, _, err = await run_audit(ns, "--since", "yesterday")
    assert code == 2 and "neither an ISO 8601 time" in err
    code, _, err = await run_audit(ns)  # no audit topic in this namespace yet
    assert code == 2 and f"audit topic {ns.audit} does not exist" in err
    code, _, err = await run_audit(ns, audit_topic=f"{ns.prefix}.{{agent}}.audit")
    assert code == 2 and "name the --agent or the --group" in err
    code, _, err = await run_audit(ns, "--limit", "-1")
    assert code == 2 and "--limit" in err
    started = time.monotonic()
    code, _, err = await run_audit(ns, bootstrap_servers="127.0.0.1:1")
    assert code == 2 and "cannot reach Kafka" in err
    assert time.monotonic() - started < 90
