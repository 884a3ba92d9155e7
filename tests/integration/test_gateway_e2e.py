"""End to end on the real broker: the gateway judges, forwards, rejects and replies."""

from __future__ import annotations

import pytest

from tests.integration.support import GatewayProcess, Namespace, collect, header, produce, values

AGENT = "support"


def started(thread: str, run: str) -> dict:
    return {"type": "RUN_STARTED", "threadId": thread, "runId": run}


def interrupted(thread: str, run: str, *interrupts: dict) -> dict:
    return {
        "type": "RUN_FINISHED",
        "threadId": thread,
        "runId": run,
        "outcome": {"type": "interrupt", "interrupts": list(interrupts)},
    }


def resume(thread: str, run: str, *entries: dict) -> dict:
    return {"threadId": thread, "runId": run, "messages": [], "resume": list(entries)}


@pytest.fixture
async def ns(kafka_bootstrap: str) -> Namespace:
    return Namespace(kafka_bootstrap)


async def test_resume_lifecycle_end_to_end(ns: Namespace, create_topics, tmp_path) -> None:
    report = await ns.create_agent(AGENT, partitions=3)
    assert "created" in report and ns.changelog(AGENT) in report
    reply_topic = (await create_topics([f"{ns.prefix}.replies"], partitions=1))[0]
    gateway = await GatewayProcess(ns, tmp_path).start()
    try:
        thread = "thread-1"
        await produce(
            ns.bootstrap,
            ns.events(AGENT),
            [
                (thread, started(thread, "run-1")),
                (thread, {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "hi"}),
                (
                    thread,
                    interrupted(
                        thread,
                        "run-1",
                        {"id": "approve", "reason": "tool_call", "toolCallId": "c1"},
                        {"id": "ask", "reason": "input_required"},
                    ),
                ),
            ],
        )

        def hdrs(correlation: str) -> list[tuple[str, bytes]]:
            return [
                ("agui-reply-to", reply_topic.encode()),
                ("agui-correlation-id", correlation.encode()),
            ]

        # 1. uncovered: only one of two interrupts answered
        await produce(
            ns.bootstrap,
            ns.requests(AGENT),
            [
                (
                    thread,
                    resume(
                        thread,
                        "run-2",
                        {
                            "interruptId": "approve",
                            "status": "resolved",
                            "payload": {"approved": True},
                        },
                    ),
                ),
            ],
            headers=hdrs("c-uncovered"),
        )
        # 2. covering, plus one unrecognised entry and an unknown member
        good = resume(
            thread,
            "run-2",
            {"interruptId": "approve", "status": "resolved", "payload": {"approved": True}},
            {"interruptId": "ask", "status": "cancelled"},
            {"interruptId": "ghost", "status": "resolved"},
        )
        good["forwardedProps"] = {"keep": {"me": [1, None]}}
        good["madeUp"] = 1
        await produce(ns.bootstrap, ns.requests(AGENT), [(thread, good)], headers=hdrs("c-good"))
        # 3. the same request again: a duplicate
        await produce(ns.bootstrap, ns.requests(AGENT), [(thread, good)], headers=hdrs("c-dup"))
        # 4. a different answer to the same interrupts: already_resumed
        await produce(
            ns.bootstrap,
            ns.requests(AGENT),
            [
                (
                    thread,
                    resume(
                        thread,
                        "run-3",
                        {"interruptId": "approve", "status": "cancelled"},
                        {"interruptId": "ask", "status": "cancelled"},
                    ),
                ),
            ],
            headers=hdrs("c-again"),
        )

        replies = await collect(ns.bootstrap, reply_topic, count=4, settle=1.0)
        by_corr = {
            header(r, "agui-correlation-id"): v
            for r, v in zip(replies, values(replies), strict=True)
        }
        assert len(replies) == 4, [values(replies)]
        assert by_corr["c-uncovered"]["verdict"] == "reject"
        assert [r["code"] for r in by_corr["c-uncovered"]["reasons"]] == ["uncovered_interrupt"]
        assert by_corr["c-uncovered"]["reasons"][0]["interruptId"] == "ask"
        assert by_corr["c-good"]["verdict"] == "forward"
        assert by_corr["c-dup"]["verdict"] == "duplicate"
        assert by_corr["c-again"]["verdict"] == "reject"
        assert {r["code"] for r in by_corr["c-again"]["reasons"]} == {"already_resumed"}

        forwarded = await collect(ns.bootstrap, ns.run_requests(AGENT), count=1, settle=1.5)
        assert len(forwarded) == 1, values(forwarded)
        sent = values(forwarded)[0]
        assert header(forwarded[0], "agui-correlation-id") == "c-good"
        assert forwarded[0].key == thread.encode()
        assert [e["interruptId"] for e in sent["resume"]] == ["approve", "ask"]
        assert "madeUp" not in sent
        assert sent["forwardedProps"] == {"keep": {"me": [1, None]}}

        rejections = values(await collect(ns.bootstrap, ns.rejections, count=2, settle=1.0))
        assert sorted(r["correlationId"] for r in rejections) == ["c-again", "c-uncovered"]
        uncovered = next(r for r in rejections if r["correlationId"] == "c-uncovered")
        assert uncovered["agent"] == AGENT and uncovered["threadId"] == thread
        assert uncovered["input"]["runId"] == "run-2"

        warnings = values(await collect(ns.bootstrap, ns.warnings, count=2, settle=1.0))
        codes = {(w["code"], w.get("interruptId"), w.get("path")) for w in warnings}
        assert ("unrecognised_entry", "ghost", "/resume/2") in codes
        assert ("unknown_member_stripped", None, "/madeUp") in codes
    finally:
        await gateway.stop()


async def test_poison_records_are_rejected_and_never_block(ns: Namespace, tmp_path) -> None:
    await ns.create_agent(AGENT, partitions=1)
    gateway = await GatewayProcess(ns, tmp_path).start()
    try:
        thread = "t-poison"
        await produce(
            ns.bootstrap,
            ns.requests(AGENT),
            [
                (thread, b"\xff\xfe not utf-8"),
                (thread, b"{not json"),
                (thread, b"[1, 2]"),
                (
                    None,
                    resume(
                        "x",
                        "r",
                    ),
                ),
                (thread, {"threadId": thread, "runId": "r-ok", "messages": []}),
            ],
        )
        await produce(ns.bootstrap, ns.events(AGENT), [(thread, b"\x00garbage")])
        rejections = values(await collect(ns.bootstrap, ns.rejections, count=4, settle=1.0))
        assert len(rejections) == 4
        codes = [r["reasons"][0]["code"] for r in rejections]
        assert codes.count("malformed_input") == 3 and codes.count("thread_mismatch") == 1
        assert any("inputBase64" in r for r in rejections)
        assert any(r.get("inputText") == "{not json" for r in rejections)
        forwarded = values(await collect(ns.bootstrap, ns.run_requests(AGENT), count=1))
        assert [f["runId"] for f in forwarded] == ["r-ok"]
        warnings = values(await collect(ns.bootstrap, ns.warnings, count=2, settle=0.5))
        assert any(w.get("rule") == "malformed_event" for w in warnings)
        assert any(w["code"] == "thread_unknown" for w in warnings)
    finally:
        await gateway.stop()


async def test_a_new_agent_is_picked_up_without_a_restart(ns: Namespace, tmp_path) -> None:
    await ns.create_agent("first", partitions=1)
    gateway = await GatewayProcess(ns, tmp_path).start()
    try:
        await ns.create_agent("latecomer", partitions=2)  # after the gateway started
        thread = "t-late"
        await produce(
            ns.bootstrap,
            ns.events("latecomer"),
            [
                (thread, started(thread, "r1")),
                (thread, interrupted(thread, "r1", {"id": "q", "reason": "input_required"})),
            ],
        )
        await produce(
            ns.bootstrap,
            ns.requests("latecomer"),
            [
                (thread, resume(thread, "r2", {"interruptId": "q", "status": "cancelled"})),
            ],
        )
        forwarded = values(
            await collect(ns.bootstrap, ns.run_requests("latecomer"), count=1, timeout=60)
        )
        assert [f["runId"] for f in forwarded] == ["r2"]
        warnings = values(await collect(ns.bootstrap, ns.warnings, count=1, timeout=3))
        assert not any(w["code"] == "thread_unknown" for w in warnings)  # judged on its state
    finally:
        await gateway.stop()


async def test_an_agent_with_only_a_requests_topic_is_not_held_back(
    ns: Namespace, create_topics, tmp_path
) -> None:
    await create_topics([ns.requests("solo")], partitions=1)
    outputs = [ns.run_requests("solo"), ns.rejections, ns.warnings, ns.audit, ns.interrupts]
    await create_topics(outputs, partitions=1)
    gateway = await GatewayProcess(ns, tmp_path, merge_max_wait_ms=60_000).start()
    try:
        await produce(
            ns.bootstrap,
            ns.requests("solo"),
            [("t", {"threadId": "t", "runId": "r", "messages": []})],
        )
        forwarded = values(
            await collect(ns.bootstrap, ns.run_requests("solo"), count=1, timeout=20)
        )
        assert [f["runId"] for f in forwarded] == ["r"]  # long before the 60 s merge wait
    finally:
        await gateway.stop()


async def test_a_reply_topic_created_just_before_its_request_gets_a_binary_correlated_reply(
    ns: Namespace, create_topics, tmp_path
) -> None:
    """The trap of a hand-written service: a fresh reply topic, a 16-byte binary id."""
    await ns.create_agent(AGENT, partitions=1)
    # metadata would show the new topic only after 10 minutes without the refresh
    gateway = await GatewayProcess(ns, tmp_path, discovery_interval_ms=600_000).start()
    try:
        thread = "thread-fresh"
        await produce(
            ns.bootstrap,
            ns.events(AGENT),
            [
                (thread, started(thread, "run-1")),
                (thread, interrupted(thread, "run-1", {"id": "ok", "reason": "tool_call"})),
            ],
        )
        reply_topic = (await create_topics([f"{ns.prefix}.fresh-replies"], partitions=1))[0]
        binary_id = bytes([0x8F, 0xFF, 0x00, 0x41]) + bytes(range(12))
        await produce(
            ns.bootstrap,
            ns.requests(AGENT),
            [(thread, resume(thread, "run-2", {"interruptId": "ok", "status": "resolved"}))],
            headers=[("agui-reply-to", reply_topic.encode()), ("agui-correlation-id", binary_id)],
        )
        (reply,) = await collect(ns.bootstrap, reply_topic, count=1, settle=1.0)
        body = values([reply])[0]
        assert body["verdict"] == "forward"
        assert body["correlationId"] == "j/8AQQABAgMEBQYHCAkKCw=="
        assert body["correlationIdEncoding"] == "base64"
        assert dict(reply.headers)["agui-correlation-id"] == binary_id
        (forwarded,) = await collect(ns.bootstrap, ns.run_requests(AGENT), count=1, settle=1.0)
        assert dict(forwarded.headers)["agui-correlation-id"] == binary_id
    finally:
        assert await gateway.stop() == 0


async def test_a_reply_topic_created_after_the_gateway_started_holds_up_no_first_commit(
    ns: Namespace, create_topics, tmp_path
) -> None:
    """Each pair's first transaction forwards a request and replies to a brand-new topic.

    A producer that met the new reply topic while the forward's partition was still
    being added to its transaction used to lose that partition from its metadata: the
    commit, and the pair, hung until the batch expired (40 s). The replies' timeout is
    the bound such a hang exceeds, not a timing claim.
    """
    partitions = 4
    await ns.create_agent(AGENT, partitions=partitions)
    gateway = await GatewayProcess(ns, tmp_path).start()
    try:
        reply_topic = (await create_topics([f"{ns.prefix}.late-replies"], partitions=2))[0]
        threads = [f"t-late-{i}" for i in range(4 * partitions)]  # every pair, most likely
        await produce(
            ns.bootstrap,
            ns.requests(AGENT),
            [(t, {"threadId": t, "runId": f"r-{t}", "messages": []}) for t in threads],
            headers=[("agui-reply-to", reply_topic.encode())],
        )
        replies = values(await collect(ns.bootstrap, reply_topic, count=len(threads), timeout=25))
        assert sorted(r["threadId"] for r in replies) == sorted(threads)
        assert {r["verdict"] for r in replies} == {"forward"}
        forwarded = values(
            await collect(ns.bootstrap, ns.run_requests(AGENT), count=len(threads), timeout=5)
        )
        assert sorted(f["threadId"] for f in forwarded) == sorted(threads)
    finally:
        assert await gateway.stop() == 0
