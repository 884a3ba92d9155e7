"""The page in a real browser (Debian's chromium): rows, live changes, countdowns, the form.

The source is the in-memory InboxSource; answers go to a recording sender (the path to
the real gateway is test_browser_gateway.py, on the broker).
"""

from __future__ import annotations

import asyncio
import time

from playwright.async_api import expect
from starlette.applications import Starlette

from gateway.inbox.page import InboxPage
from gateway.settings import Settings
from tests.inbox_page.browser import browser, cookie_authorize, serving, signed_in
from tests.inbox_page.memory import MemorySource, item
from tests.inbox_page.test_page import EVIL, Recording

AMOUNT = {
    "type": "object",
    "properties": {"amount": {"type": "integer", "minimum": 1, "maximum": 100}},
    "required": ["amount"],
}


async def test_rows_live_changes_countdown_and_an_answer_in_chromium(tmp_path):
    now = int(time.time() * 1000)
    source = MemorySource(lag=0.1)
    source.open(
        item(
            "billing",
            "t-1",
            "approve",
            reason="tool_approval",
            message=EVIL,
            schema={"type": "boolean"},
            opened_ms=now - 90_000,
        )
    )
    source.open(
        item(
            "billing",
            "t-1",
            "refund",
            reason="input_required",
            schema=AMOUNT,
            opened_ms=now - 90_000,
        )
    )
    source.open(item("support", "t-2", "soon", opened_ms=now - 10_000, expires_ms=now + 4_000))
    sender = Recording()
    settings = Settings(inbox_page_summary_refresh_s=0.5)
    page_app = InboxPage(source, cookie_authorize, settings, sender=sender)
    app = Starlette(routes=page_app.routes())
    async with serving(app) as base_url, browser() as b:
        context, page, errors = await signed_in(b, base_url)
        await page.goto(f"{base_url}/inbox")
        rows = page.locator("#interrupts tbody tr.row")
        await expect(rows).to_have_count(3)
        await expect(rows.nth(0).locator("td.message")).to_have_text(EVIL)  # as text, escaped
        await expect(page.locator("#live")).to_have_text("live")

        # the summary and the view's lag follow the view without a reload
        await expect(page.locator("#lag")).to_have_text("view lag: 0.1 s")
        source.lag = 2.4
        source.latency["billing"] = (3.0, 12.5)
        await expect(page.locator("#lag")).to_have_text("view lag: 2.4 s", timeout=3000)
        billing = page.locator('table.summary tr[data-agent="billing"] td')
        await expect(billing.nth(4)).to_have_text("12.50 s", timeout=3000)
        await expect(billing.nth(2)).to_have_text("input_required: 1, tool_approval: 1")

        # an interrupt opens: its row appears, newest last, without a reload
        started = time.monotonic()
        source.open(item("support", "t-3", "fresh", reason="tool_approval", opened_ms=now))
        await expect(rows).to_have_count(4, timeout=1000)
        assert time.monotonic() - started < 1.0
        await expect(rows.nth(3).locator("td.thread")).to_have_text("t-3")
        # it closes: the row leaves
        source.close("support\x1ft-3\x1ffresh", "resolved")
        await expect(rows).to_have_count(3, timeout=1000)

        # the countdown runs out: the row says expired and offers only abandoning
        soon = page.locator('tr.row[data-agent="support"]')
        await expect(soon.locator("td.expiry")).to_have_text("expired", timeout=6000)
        await expect(soon.locator("a.answer")).to_have_text("Abandon")
        await expect(soon).to_have_class("row expired")
        await page.screenshot(path=str(tmp_path / "inbox.png"), full_page=True)

        # the thread's form: both interrupts in one, a schema error shown before sending
        await rows.nth(0).locator("td.thread a").click()
        await expect(page.locator("fieldset.part")).to_have_count(2)
        await page.locator('input[name="0:"][value="approve"]').check()
        await page.locator('input[name="1:/amount"]').fill("500")
        issues = page.locator('fieldset.part[data-interrupt="refund"] ul.issues li')
        await expect(issues).to_have_count(1)
        await expect(issues.first).to_contain_text("/amount")
        await page.locator('input[name="1:/amount"]').fill("40")
        await expect(issues).to_have_count(0)
        await page.locator("#send").click()
        await expect(page.locator("#result .forward")).to_contain_text("Forwarded: run inbox-")
        [(agent, run_input)] = sender.sent
        assert agent == "billing"
        assert run_input["resume"] == [
            {"interruptId": "approve", "status": "resolved", "payload": True},
            {"interruptId": "refund", "status": "resolved", "payload": {"amount": 40}},
        ]
        await expect(page.locator("#result .forward")).to_contain_text(run_input["runId"])
        assert errors == [], errors
        assert len(source.subscribers) >= 1  # the open page follows the changes
        await context.close()
        # the browser gone, its stream ends and the page stops following the view
        deadline = time.monotonic() + 10
        while source.subscribers:
            assert time.monotonic() < deadline, "a closed page still follows the view"
            await asyncio.sleep(0.05)
    source.stop()
