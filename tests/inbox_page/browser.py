"""A real browser on the page: Debian's `chromium`, headless, driven by Playwright.

Playwright drives the system's browser (`executable_path`); nothing downloads a
browser build. The page is served by uvicorn in this process, on the test's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn
from playwright.async_api import Browser, BrowserContext, Page, async_playwright
from starlette.applications import Starlette
from starlette.requests import Request

from tests.integration.support import free_port

CHROMIUM = os.environ.get("INBOX_PAGE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
COOKIE = "inbox-session"
TOKEN = "a-long-random-session-token"


async def cookie_authorize(request: Request) -> bool:
    """What a deployment's `authorize` may do for a browser: a session cookie (a browser
    sends no Authorization header on navigations or EventSource)."""
    return request.cookies.get(COOKIE) == TOKEN


@contextlib.asynccontextmanager
async def serving(app: Starlette) -> AsyncIterator[str]:
    """`app` on a free local port until the block ends; yields its base URL."""
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, timeout=15)


@contextlib.asynccontextmanager
async def browser() -> AsyncIterator[Browser]:
    if not os.path.exists(CHROMIUM):
        pytest.fail(
            f"no chromium at {CHROMIUM}: install Debian's package (apt-get install -y chromium) "
            "or name one in INBOX_PAGE_CHROMIUM",
            pytrace=False,
        )
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield launched
        finally:
            await launched.close()


async def shot(page: Page, name: str) -> None:
    """A screenshot into $INBOX_PAGE_SHOTS (the docs' images: docs/assets), when set."""
    folder = os.environ.get("INBOX_PAGE_SHOTS")
    if folder:
        await page.screenshot(path=os.path.join(folder, name), full_page=True)


async def signed_in(b: Browser, base_url: str) -> tuple[BrowserContext, Page, list[str]]:
    """A browser context holding the session cookie, a page in it, and the list its
    console errors (a Content-Security-Policy violation among them) are kept in."""
    context = await b.new_context(viewport={"width": 1280, "height": 900})
    await context.add_cookies([{"name": COOKIE, "value": TOKEN, "url": base_url}])
    page = await context.new_page()
    errors: list[str] = []

    def on_console(message: Any) -> None:
        # a form the page refused to send yet is answered 422, which the browser logs
        if message.type == "error" and "status of 422" not in message.text:
            errors.append(message.text)

    page.on("console", on_console)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    return context, page, errors
