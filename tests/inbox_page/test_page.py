"""The page's routes on Starlette's TestClient, reading the in-memory InboxSource.

What reaches the gateway is the sender's: here a recording one answers with the
verdict the test gives it (the real path, to the real gateway, is test_browser_gateway).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.testclient import TestClient

from gateway.client import ReplyTimeout, UnknownAgent, parse_reply
from gateway.inbox.page import InboxPage, routes
from gateway.inbox.page.app import CSP
from gateway.settings import Settings
from tests.inbox.support import check
from tests.inbox_page.memory import MemorySource, item

NOW = int(time.time() * 1000)
EVIL = '<script>alert("x")</script>'


class Recording:
    """An AnswerSender that keeps what it is asked to send and answers `verdict`."""

    def __init__(self, verdict: dict[str, Any] | Exception | None = None) -> None:
        self.verdict = verdict
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.closed = False

    async def send(self, agent: str, run_input: dict[str, Any]) -> Any:
        self.sent.append((agent, run_input))
        if isinstance(self.verdict, Exception):
            raise self.verdict
        base = {
            "agent": agent,
            "threadId": run_input["threadId"],
            "runId": run_input["runId"],
            "correlationId": "c-1",
            "at": "2026-12-03T13:00:00Z",
        }
        return parse_reply({**base, **(self.verdict or {"verdict": "forward"})})

    async def aclose(self) -> None:
        self.closed = True


def client_for(source: MemorySource, sender: Recording, allowed: bool = True) -> TestClient:
    async def authorize(request: Request) -> bool:
        return allowed and request.headers.get("authorization") == "Bearer let-me-in"

    app = Starlette(routes=routes(source, authorize, Settings(), sender=sender))
    return TestClient(app, headers={"Authorization": "Bearer let-me-in"})


@pytest.fixture
def source() -> MemorySource:
    s = MemorySource(lag=0.4)
    s.open(item("billing", "t-2", "late", reason="tool_approval", opened_ms=NOW - 60_000))
    s.open(
        item(
            "billing",
            "t-1",
            "approve",
            reason="tool_approval",
            message=EVIL,
            schema={"type": "boolean"},
            opened_ms=NOW - 120_000,
            expires_ms=NOW + 3_600_000,
        )
    )
    s.open(
        item(
            "billing",
            "t-1",
            "refund",
            reason="input_required",
            schema={
                "type": "object",
                "properties": {"amount": {"type": "integer", "maximum": 100}},
                "required": ["amount"],
            },
            opened_ms=NOW - 120_000,
        )
    )
    s.open(item("support", "t-9", "gone", opened_ms=NOW - 30_000, expires_ms=NOW - 1000))
    s.latency["billing"] = (1.5, 9.25)
    s.uncovered["billing"] = 3
    return s


def rows_in(html: str) -> list[str]:
    return [part.split('"', 1)[0] for part in html.split('data-key="')[1:]]


def test_the_inbox_lists_open_interrupts_oldest_first_with_summary_and_lag(source):
    response = client_for(source, Recording()).get("/inbox")
    assert response.status_code == 200
    html = response.text
    assert rows_in(html) == [
        "billing\x1ft-1\x1fapprove",
        "billing\x1ft-1\x1frefund",
        "billing\x1ft-2\x1flate",
        "support\x1ft-9\x1fgone",
    ]
    assert "view lag: 0.4 s" in html
    assert "1.50 s" in html and "9.25 s" in html  # p50 and p95 from the summary
    assert "input_required: 1, tool_approval: 2" in html
    assert '<td class="num">3</td>' in html  # uncovered interrupts
    # the expired one says so, and offers only abandoning
    gone = html.split('data-key="support\x1ft-9\x1fgone"')[1].split("</tr>")[0]
    assert "expired" in gone and ">Abandon</a>" in gone


def test_everything_from_records_is_escaped_and_the_policy_is_tight(source):
    response = client_for(source, Recording()).get("/inbox")
    assert EVIL not in response.text
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in response.text
    assert response.headers["content-security-policy"] == CSP
    assert "script-src 'self'" in CSP and "unsafe-inline" not in CSP
    assert "<script>" not in response.text.replace(
        '<script defer src="/inbox/assets/inbox.js">', ""
    )
    page = client_for(source, Recording()).get(
        "/inbox/thread", params={"agent": "billing", "thread": "t-1"}
    )
    assert EVIL not in page.text and page.headers["content-security-policy"] == CSP


def test_filters_go_to_the_source_as_the_contract_names_them(source):
    client = client_for(source, Recording())
    params = {
        "agent": "billing, support",
        "reason": "tool_approval",
        "q": "late",
        "olderThan": "10",
    }
    html = client.get("/inbox", params=params).text
    assert source.queries[-1] == {
        "limit": ["200"],
        "agent": ["billing", "support"],
        "reason": ["tool_approval"],
        "olderThan": ["10"],
        "q": ["late"],
    }
    assert rows_in(html) == ["billing\x1ft-2\x1flate"]
    assert 'value="tool_approval"' in html  # the filter stays filled in


def test_a_filter_the_view_refuses_shows_no_rows(source):
    html = client_for(source, Recording()).get("/inbox", params={"expiringBefore": "soon"}).text
    assert rows_in(html) == []
    assert "The view refused the filters: expiringBefore" in html


def test_a_view_that_raises_on_a_filter_is_shown_as_refusing_it(source):
    def refusing(query):
        raise ValueError("olderThan is not a number")

    source.interrupts = refusing  # type: ignore[method-assign]
    html = client_for(source, Recording()).get("/inbox", params={"olderThan": "x"}).text
    assert rows_in(html) == []
    assert "The view refused the filters: olderThan is not a number" in html


def test_no_access_without_authorization(source):
    client = client_for(source, Recording(), allowed=False)
    for path in ("/inbox", "/inbox/events", "/inbox/summary", "/inbox/assets/inbox.js"):
        assert client.get(path).status_code == 401
    assert client.post("/inbox/answer", data={"agent": "billing"}).status_code == 401


def test_the_thread_page_asks_for_every_open_interrupt_in_one_form(source):
    client = client_for(source, Recording())
    html = client.get("/inbox/thread", params={"agent": "billing", "thread": "t-1"}).text
    assert html.count('class="part') == 2
    assert 'name="0.id" value="approve"' in html and 'name="1.id" value="refund"' in html
    assert 'name="0:" value="approve"' in html  # boolean: approve / deny
    assert 'name="1:/amount"' in html  # the object's field
    assert "answer or abandon each" in html
    missing = client.get("/inbox/thread", params={"agent": "billing", "thread": "nope"})
    assert missing.status_code == 404


def test_the_thread_page_shows_its_runs_and_last_verdicts_escaped(source):
    source.verdicts[("billing", "t-1")] = [
        {"verdict": "reject", "reasons": ["uncovered_interrupt", EVIL], "reasonsOmitted": 0,
         "correlationId": "c-9", "attestation": "verified", "subject": "ada@example.com",
         "interrupts": [{"interrupt": "approve", "status": "resolved", "forwarded": False}],
         "interruptsOmitted": 0, "run": "n1", "forwardedRun": None,
         "atMs": 1_764_000_000_000, "at": "2025-11-24T16:00:00.000Z"},
        {"verdict": "forward", "reasons": [], "reasonsOmitted": 0, "correlationId": None,
         "attestation": "unattested", "subject": None, "interrupts": [],
         "interruptsOmitted": 0, "run": "r-1", "forwardedRun": "r-1",
         "atMs": 1_763_999_000_000, "at": "2025-11-24T15:43:20.000Z"},
    ]  # fmt: skip
    check("thread", source.thread("billing", "t-1"))
    client = client_for(source, Recording())
    html = client.get("/inbox/thread", params={"agent": "billing", "thread": "t-1"}).text
    verdicts = html.split('<section class="verdicts">')[1].split("</section>")[0]
    first, second = verdicts.split("<li")[1:]
    assert "<strong>reject</strong>" in first and "uncovered_interrupt" in first
    assert "by ada@example.com" in first and "approve: resolved" in first and "c-9" in first
    assert "2025-11-24 16:00:00Z" in first
    assert "<strong>forward</strong>" in second and "by unattested" in second
    assert "started r-1" in second
    assert EVIL not in html
    runs = html.split('<section class="runs">')[1].split("</section>")[0]
    assert "r-1" in runs and "approve: open" in runs and "refund: open" in runs


def test_the_thread_page_says_when_verdicts_are_not_known(source):
    source.verdicts_unknown = "topic_missing"
    check("thread", source.thread("billing", "t-1"))
    html = (
        client_for(source, Recording())
        .get("/inbox/thread", params={"agent": "billing", "thread": "t-1"})
        .text
    )
    assert "Not known: the inbox cannot read this agent&#x27;s audit topic" in html
    source.verdicts_unknown = None
    html = (
        client_for(source, Recording())
        .get("/inbox/thread", params={"agent": "billing", "thread": "t-1"})
        .text
    )
    assert '<p class="none">None.</p>' in html


def test_an_expired_interrupt_can_only_be_abandoned_on_its_thread(source):
    html = (
        client_for(source, Recording())
        .get("/inbox/thread", params={"agent": "support", "thread": "t-9"})
        .text
    )
    assert "Expired: it can only be abandoned." in html
    assert 'name="0.status" value="cancelled"' in html and 'value="resolved"' not in html


def answer_fields(amount: str = "40") -> dict[str, str]:
    return {
        "agent": "billing",
        "thread": "t-1",
        "confirm": "0",
        "0.id": "approve",
        "0.status": "resolved",
        "0:": "approve",
        "1.id": "refund",
        "1.status": "resolved",
        "1:/amount": amount,
    }


def test_a_forward_answers_every_interrupt_in_one_request_and_shows_the_run(source):
    sender = Recording()
    response = client_for(source, sender).post("/inbox/answer", data=answer_fields())
    assert response.status_code == 200
    body = response.json()
    assert body["sent"] is True and body["verdict"] == "forward"
    [(agent, run_input)] = sender.sent
    assert agent == "billing" and body["runId"] == run_input["runId"]
    assert run_input["threadId"] == "t-1" and run_input["runId"].startswith("inbox-")
    assert run_input["resume"] == [
        {"interruptId": "approve", "status": "resolved", "payload": True},
        {"interruptId": "refund", "status": "resolved", "payload": {"amount": 40}},
    ]


def test_schema_errors_are_shown_before_sending_and_sent_only_when_confirmed(source):
    sender = Recording(
        {
            "verdict": "reject",
            "reasons": [
                {
                    "code": "payload_schema_mismatch",
                    "detail": "the value is greater than the maximum of 100",
                    "interruptId": "refund",
                    "path": "/resume/1/payload/amount",
                }
            ],
        }
    )
    client = client_for(source, sender)
    checked = client.post("/inbox/check", data=answer_fields("500")).json()
    assert [(i["interruptId"], i["path"], i["schema"]) for i in checked["issues"]] == [
        ("refund", "/amount", True)
    ]
    first = client.post("/inbox/answer", data=answer_fields("500"))
    assert first.status_code == 422 and first.json()["confirmable"] is True
    assert sender.sent == []
    second = client.post("/inbox/answer", data=answer_fields("500") | {"confirm": "1"})
    body = second.json()
    assert body["verdict"] == "reject"
    assert body["reasons"][0]["code"] == "payload_schema_mismatch"
    assert body["reasons"][0]["interruptId"] == "refund"
    assert len(sender.sent) == 1


def test_unreadable_fields_are_never_sent_even_when_confirmed(source):
    sender = Recording()
    response = client_for(source, sender).post(
        "/inbox/answer", data=answer_fields("lots") | {"confirm": "1"}
    )
    assert response.status_code == 422
    assert response.json()["confirmable"] is False
    assert sender.sent == []


def test_a_cross_site_post_is_refused(source):
    sender = Recording()
    client = client_for(source, sender)
    refused = client.post(
        "/inbox/answer", data=answer_fields(), headers={"Origin": "https://evil.example"}
    )
    assert refused.status_code == 403 and sender.sent == []
    same = client.post(
        "/inbox/answer", data=answer_fields(), headers={"Origin": "http://testserver"}
    )
    assert same.status_code == 200 and len(sender.sent) == 1


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (ReplyTimeout("c-1", 10.0), 504, "verdict_timeout"),
        (UnknownAgent("no requests topic"), 404, "unknown_agent"),
        (ConnectionError("broker gone"), 503, "kafka_unavailable"),
    ],
)
def test_when_no_verdict_comes_the_page_says_why(source, error, status, code):
    response = client_for(source, Recording(error)).post("/inbox/answer", data=answer_fields())
    assert response.status_code == status
    assert response.json()["error"] == code


def test_answering_a_thread_the_view_does_not_know_is_refused(source):
    sender = Recording()
    response = client_for(source, sender).post(
        "/inbox/answer", data={"agent": "billing", "thread": "nope", "0.id": "x"}
    )
    assert response.status_code == 404 and sender.sent == []


def test_a_large_form_is_refused(source):
    sender = Recording()
    app = Starlette(
        routes=routes(source, _yes, Settings(inbox_page_max_body_bytes=100), sender=sender)
    )
    response = TestClient(app).post("/inbox/answer", data=answer_fields() | {"pad": "x" * 200})
    assert response.status_code == 413 and sender.sent == []


async def _yes(request: Request) -> bool:
    return True


def test_no_payload_reaches_the_logs(source, caplog):
    caplog.set_level("DEBUG")
    fields = {"agent": "billing", "thread": "t-2", "0.id": "late", "0.status": "resolved"}
    fields |= {"0:": "approve", "0:/json": '{"card": "hunter2-secret"}'}
    sender = Recording()
    assert client_for(source, sender).post("/inbox/answer", data=fields).status_code == 200
    assert sender.sent[0][1]["resume"][0]["payload"] == {"card": "hunter2-secret"}
    logged = [r for r in caplog.records if r.name.startswith("gateway.inbox")]
    assert logged, "the answer is logged"
    for record in logged:
        text = repr(record.__dict__)
        assert "hunter2" not in text and "let-me-in" not in text
    assert logged[-1].__dict__["verdict"] == "forward"
    assert logged[-1].__dict__["answered"] == [("late", "resolved")]


def test_the_summary_and_the_assets(source):
    client = client_for(source, Recording())
    summary = client.get("/inbox/summary").json()
    assert [a["agent"] for a in summary["agents"]] == ["billing", "support"]
    script = client.get("/inbox/assets/inbox.js")
    assert script.headers["content-type"].startswith("text/javascript")
    assert "EventSource" in script.text
    assert client.get("/inbox/assets/other.js").status_code == 404


async def test_the_live_stream_renders_rows_and_closes(source):
    page = InboxPage(source, _yes, Settings(), sender=Recording())
    newcomer = item("support", "t-5", "new", message=EVIL, opened_ms=NOW)
    frame = page._frame("/inbox", {"op": "open", "item": newcomer})
    assert frame is not None and frame["event"] == "interrupt-open"
    assert EVIL not in frame["data"] and "support\\u001ft-5\\u001fnew" in frame["data"]
    closing = {
        "op": "close",
        "key": "k",
        "agent": "a",
        "thread": "t",
        "interrupt": "i",
        "status": "expired",
    }
    assert page._frame("/inbox", closing) == {
        "event": "interrupt-close",
        "data": '{"key":"k","agent":"a","thread":"t","interrupt":"i","status":"expired"}',
    }
    assert page._frame("/inbox", {"op": "compacted"}) is None
    await page.aclose()
    assert page.sender.closed  # type: ignore[attr-defined]
    assert asyncio.get_running_loop()


def test_with_no_broker_the_real_sender_says_kafka_is_unavailable(source):
    # the default sender: a GatewayClient, here pointed at a port nothing listens on
    app = Starlette(routes=routes(source, _yes, Settings(bootstrap_servers="127.0.0.1:1")))
    client = TestClient(app)
    for _ in range(2):  # a failed start leaves nothing behind: the next answer tries again
        response = client.post("/inbox/answer", data=answer_fields())
        assert response.status_code == 503
        assert response.json() == {
            "sent": False,
            "error": "kafka_unavailable",
            "detail": "KafkaConnectionError",
        }
