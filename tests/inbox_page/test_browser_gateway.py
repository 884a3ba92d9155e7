"""Answers from the page, in Debian's chromium, judged by the real gateway on the real broker.

The gateway (`agui-gateway run`) reads interrupts from the agent's events topic; the
page lists them from the in-memory InboxSource, which the test fills as the view would
(the view itself is another part of the inbox). Answers go through the page's own
sender, `GatewayClient`, to the agent's requests topic: a form answering both
interrupts of a thread is forwarded (the run that follows is shown, and its request is
on the run-requests topic), one breaking its responseSchema is rejected with
`payload_schema_mismatch` (shown, nothing forwarded), one built from a view that lags
(one of two open interrupts listed) is rejected with `uncovered_interrupt`, and an interrupt that expired on
the page can only be abandoned, which the gateway forwards.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from playwright.async_api import expect
from starlette.applications import Starlette

from gateway.inbox.page import InboxPage, KafkaSender
from tests.inbox_page.browser import browser, cookie_authorize, serving, shot, signed_in
from tests.inbox_page.memory import MemorySource, item
from tests.integration.inprocess import settings_for
from tests.integration.support import GatewayProcess, Namespace, collect, produce, values

pytestmark = pytest.mark.integration

AGENT = "billing"
AMOUNT = {
    "type": "object",
    "properties": {"amount": {"type": "integer", "minimum": 1, "maximum": 100}},
    "required": ["amount"],
}
TAGS = {"type": "array", "items": {"type": "string"}, "minItems": 1}


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def interrupted(thread: str, run: str, *interrupts: dict) -> list[tuple[str, dict]]:
    return [
        (thread, {"type": "RUN_STARTED", "threadId": thread, "runId": run}),
        (
            thread,
            {
                "type": "RUN_FINISHED",
                "threadId": thread,
                "runId": run,
                "outcome": {"type": "interrupt", "interrupts": list(interrupts)},
            },
        ),
    ]


def as_item(thread: str, run: str, interrupt: dict, opened_ms: int) -> dict:
    """The view's item for an interrupt the events raised."""
    expires = interrupt.get("expiresAt")
    return item(
        AGENT,
        thread,
        interrupt["id"],
        run=run,
        reason=interrupt.get("reason"),
        message=interrupt.get("message"),
        schema=interrupt.get("responseSchema"),
        tool_call=interrupt.get("toolCallId"),
        opened_ms=opened_ms,
        expires_ms=int(datetime.fromisoformat(expires).timestamp() * 1000) if expires else None,
    )


async def test_answers_from_the_page_are_judged_by_the_gateway(kafka_bootstrap, tmp_path):
    ns = Namespace(kafka_bootstrap)
    await ns.create_agent(AGENT, partitions=1)
    gateway = await GatewayProcess(ns, tmp_path).start()
    sender = KafkaSender(settings_for(ns, inbox_page_reply_topic=f"{ns.prefix}.inbox-replies"))
    source = MemorySource(lag=0.0)
    try:
        now = int(time.time() * 1000)
        raised = {
            "t-ok": [
                {
                    "id": "approve",
                    "reason": "tool_approval",
                    "message": "Refund order 1234?",
                    "toolCallId": "call-1",
                    "responseSchema": {"type": "boolean"},
                },
                {
                    "id": "amount",
                    "reason": "input_required",
                    "message": "How much, in EUR?",
                    "responseSchema": AMOUNT,
                },
            ],
            "t-bad": [{"id": "tags", "reason": "input_required", "responseSchema": TAGS}],
            # the view lags: it lists one of t-stale's two interrupts (below)
            "t-stale": [
                {"id": "first", "reason": "tool_approval"},
                {"id": "second", "reason": "tool_approval"},
            ],
            "t-late": [
                {"id": "late", "reason": "tool_approval", "expiresAt": iso(now + 15_000)},
            ],
        }
        for thread, interrupts in raised.items():
            await produce(
                ns.bootstrap, ns.events(AGENT), interrupted(thread, f"{thread}-r1", *interrupts)
            )
            for interrupt in interrupts[:1] if thread == "t-stale" else interrupts:
                source.open(as_item(thread, f"{thread}-r1", interrupt, now))

        page_app = InboxPage(source, cookie_authorize, sender.settings, sender=sender)
        async with serving(Starlette(routes=page_app.routes())) as base_url, browser() as b:
            context, page, errors = await signed_in(b, base_url)
            await page.goto(f"{base_url}/inbox")
            rows = page.locator("#interrupts tbody tr.row")
            await expect(rows).to_have_count(5)
            await expect(page.locator("#live")).to_have_text("live")
            await shot(page, "inbox-page.png")
            # t-late's thread opened in a tab of its own while it can still be answered
            late_page = await context.new_page()
            await late_page.goto(f"{base_url}/inbox/thread?agent={AGENT}&thread=t-late")
            await expect(late_page.locator('input[value="resolved"]')).to_be_enabled()

            # 1. both interrupts of t-ok answered in one form: forwarded, the run shown
            await page.goto(f"{base_url}/inbox/thread?agent={AGENT}&thread=t-ok")
            await expect(page.locator("fieldset.part")).to_have_count(2)
            approve = page.locator('fieldset.part[data-interrupt="approve"]')
            await approve.locator('.decision input[value="approve"]').check()
            amount = page.locator('fieldset.part[data-interrupt="amount"]')
            await amount.locator('input[name$=":/amount"]').fill("40")
            await shot(page, "inbox-page-form.png")
            await page.locator("#send").click()
            forward = page.locator("#result .forward")
            await expect(forward).to_contain_text("Forwarded: run inbox-", timeout=30_000)
            run_ok = (await forward.text_content() or "").split("run ")[1].split(" ")[0]

            # 2. t-bad's JSON breaks its schema: shown before sending, then the gateway's
            # payload_schema_mismatch once sent anyway
            await page.goto(f"{base_url}/inbox/thread?agent={AGENT}&thread=t-bad")
            await page.locator('textarea[name="0:"]').fill("[1]")
            issues = page.locator('fieldset.part[data-interrupt="tags"] ul.issues li.schema')
            await expect(issues).not_to_have_count(0)
            await page.locator("#send").click()
            await expect(page.locator("#send")).to_have_text(
                "Send anyway (the gateway will judge it)"
            )
            await page.locator("#send").click()
            await expect(page.locator("#result .reject")).to_contain_text("Rejected by the gateway")
            await expect(page.locator("#result .reasons")).to_contain_text(
                "payload_schema_mismatch (tags"
            )
            await shot(page, "inbox-page-rejected.png")

            # 3. a form built from a lagging view covers one of two open interrupts: the
            # gateway rejects it (uncovered_interrupt), the page cannot get past the rule
            await page.goto(f"{base_url}/inbox/thread?agent={AGENT}&thread=t-stale")
            await expect(page.locator("fieldset.part")).to_have_count(1)
            await page.locator('.decision input[value="approve"]').check()
            await page.locator("#send").click()
            await expect(page.locator("#result .reasons")).to_contain_text(
                "uncovered_interrupt (second"
            )

            # 4. t-late expires while its thread is open: only abandoning is left
            part = late_page.locator('fieldset.part[data-interrupt="late"]')
            await expect(part).to_have_class("part expired", timeout=20_000)
            await expect(part.locator(".expiry")).to_have_text("expired")
            await expect(part.locator('input[value="resolved"]')).to_be_disabled()
            await expect(part.locator('input[value="cancelled"]')).to_be_checked()
            await late_page.locator("#send").click()
            late = late_page.locator("#result .forward")
            await expect(late).to_contain_text("Forwarded: run inbox-", timeout=30_000)
            run_late = (await late.text_content() or "").split("run ")[1].split(" ")[0]

            # what reached the agent: exactly the two forwards, each answering its interrupts
            forwarded = values(
                await collect(ns.bootstrap, ns.run_requests(AGENT), count=2, timeout=30, settle=2.0)
            )
            by_run = {f["runId"]: f for f in forwarded}
            assert sorted(by_run) == sorted([run_ok, run_late])
            assert by_run[run_ok]["threadId"] == "t-ok"
            assert by_run[run_ok]["resume"] == [
                {"interruptId": "approve", "status": "resolved", "payload": True},
                {"interruptId": "amount", "status": "resolved", "payload": {"amount": 40}},
            ]
            assert by_run[run_late]["resume"] == [{"interruptId": "late", "status": "cancelled"}]
            rejections = values(await collect(ns.bootstrap, ns.rejections, count=2, timeout=30))
            codes = {r["threadId"]: [c["code"] for c in r["reasons"]] for r in rejections}
            assert codes == {
                "t-bad": ["payload_schema_mismatch"],
                "t-stale": ["uncovered_interrupt"],
            }

            # the view closes what the gateway forwarded: the rows leave the open page
            await page.goto(f"{base_url}/inbox")
            await expect(page.locator("#live")).to_have_text("live")
            await expect(rows).to_have_count(5)
            for key in list(source.items):
                if "t-ok" in key or "t-late" in key:
                    source.close(key, "resolved" if "t-ok" in key else "cancelled")
            await expect(rows).to_have_count(2, timeout=1000)
            await expect(rows.locator("td.thread")).to_have_text(["t-bad", "t-stale"])
            assert errors == [], errors
            await context.close()
    finally:
        source.stop()
        await sender.aclose()
        await gateway.stop()
