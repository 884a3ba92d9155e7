"""The inbox as `agui-gateway run` and `agui-gateway inbox` serve it: the API, the page on
the real view, and the browser's sign-in (a session cookie that is not the token)."""

from __future__ import annotations

import logging
from http.cookies import SimpleCookie
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from pydantic import SecretStr
from starlette.testclient import TestClient

from gateway import http
from gateway.inbox.service import InboxService
from gateway.inbox.session import COOKIE, session_value
from gateway.settings import Settings
from tests.inbox.support import opened

TOKEN = "s3cret-inbox-token-value"
HTTP = "http://testserver"


def service(**settings: Any) -> InboxService:
    inbox = InboxService(Settings(**settings), CollectorRegistry())
    inbox.view.apply(*opened("bot", "t1", "approve-refund", 10_000), {})
    return inbox


def client(inbox: InboxService, base_url: str = HTTP) -> TestClient:
    """The gateway's own HTTP app with the service's routes, as both commands serve it."""
    app = http.app(CollectorRegistry(), inbox.ready, inbox.routes)
    return TestClient(app, base_url=base_url, follow_redirects=False)


def cookie_of(response: Any) -> SimpleCookie:
    jar: SimpleCookie = SimpleCookie()
    jar.load(response.headers["set-cookie"])
    return jar


def sign_in(api: TestClient, token: str = TOKEN, next_: str = "/inbox") -> Any:
    return api.post("/inbox/login", data={"token": token, "next": next_})


@pytest.fixture
def inbox() -> InboxService:
    return service(inbox_token=SecretStr(TOKEN))


def test_a_navigation_without_a_session_goes_to_the_sign_in_and_the_rest_is_401(inbox) -> None:
    api = client(inbox)
    page = api.get("/inbox")
    assert page.status_code == 303 and page.headers["location"] == "/inbox/login?next=%2Finbox"
    thread = api.get("/inbox/thread?agent=bot&thread=t1")
    assert thread.status_code == 303
    assert thread.headers["location"] == (
        "/inbox/login?next=%2Finbox%2Fthread%3Fagent%3Dbot%26thread%3Dt1"
    )
    for path in ("/inbox/events", "/inbox/summary", "/interrupts", "/interrupts/summary"):
        assert api.get(path).status_code == 401, path
    assert api.post("/inbox/answer", data={"agent": "bot", "thread": "t1"}).status_code == 401
    form = api.get("/inbox/login?next=%2Finbox")
    assert form.status_code == 200 and 'type="password" name="token"' in form.text
    assert "default-src 'none'" in form.headers["content-security-policy"]


def test_signing_in_sets_a_strict_http_only_cookie_that_is_not_the_token(inbox) -> None:
    api = client(inbox)
    answer = sign_in(api, next_="/inbox/thread?agent=bot&thread=t1")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/inbox/thread?agent=bot&thread=t1"
    header = answer.headers["set-cookie"]
    assert TOKEN not in header
    morsel = cookie_of(answer)[COOKIE]
    assert morsel.value == session_value(TOKEN.encode()) and morsel.value != TOKEN
    assert morsel["httponly"] and morsel["path"] == "/"
    assert morsel["samesite"].lower() == "strict"
    assert not morsel["secure"]  # plain http: a Secure cookie would never come back
    # the browser now sees the page (on the real view), its parts and the API
    page = api.get("/inbox")
    assert page.status_code == 200 and "approve-refund" in page.text and "Sign out" in page.text
    assert api.get("/inbox/thread?agent=bot&thread=t1").status_code == 200
    assert api.get("/inbox/summary").status_code == 200
    assert api.get("/interrupts").json()["total"] == 1


def test_over_https_the_cookie_is_secure(inbox) -> None:
    answer = sign_in(client(inbox, "https://testserver"))
    assert answer.status_code == 303 and cookie_of(answer)[COOKIE]["secure"]


@pytest.mark.parametrize(
    "cookie",
    [TOKEN, session_value(b"another-token"), session_value(TOKEN.encode())[:-1], ""],
)
def test_a_cookie_not_made_under_the_token_is_refused(inbox, cookie) -> None:
    api = client(inbox)
    api.cookies.set(COOKIE, cookie)
    assert api.get("/inbox").status_code == 303
    assert api.get("/interrupts").status_code == 401


def test_changing_the_token_signs_every_browser_out(inbox) -> None:
    api = client(inbox)
    sign_in(api)
    assert api.get("/inbox").status_code == 200
    renewed = client(service(inbox_token=SecretStr("a-new-token-value")))
    renewed.cookies = api.cookies
    assert renewed.get("/inbox").status_code == 303


def test_a_wrong_token_is_refused_and_not_echoed(inbox) -> None:
    api = client(inbox)
    answer = sign_in(api, "wrong-" + TOKEN)
    assert answer.status_code == 401 and "Wrong token" in answer.text
    assert "set-cookie" not in answer.headers and TOKEN not in answer.text
    assert api.get("/inbox").status_code == 303


def test_the_bearer_token_still_opens_the_api_and_the_page(inbox) -> None:
    api = client(inbox)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert api.get("/interrupts", headers=bearer).status_code == 200
    assert api.get("/inbox", headers=bearer).status_code == 200


def test_signing_out_clears_the_cookie(inbox) -> None:
    api = client(inbox)
    sign_in(api)
    out = api.post("/inbox/logout")
    assert out.status_code == 303 and out.headers["location"] == "/inbox/login"
    morsel = cookie_of(out)[COOKIE]
    assert morsel.value == "" and morsel["max-age"] == "0" and morsel["path"] == "/"
    api.cookies.clear()  # what the browser does with a cookie that has expired
    assert api.get("/inbox").status_code == 303


@pytest.mark.parametrize(
    "target", ["//evil.example/inbox", "https://evil.example/", "/metrics", "/inbox\\@evil"]
)
def test_signing_in_never_sends_the_browser_elsewhere(inbox, target) -> None:
    answer = sign_in(client(inbox), next_=target)
    assert answer.status_code == 303 and answer.headers["location"] == "/inbox"


def test_a_sign_in_or_out_from_another_site_is_refused(inbox) -> None:
    api = client(inbox)
    foreign = {"Origin": "https://evil.example"}
    answer = api.post("/inbox/login", data={"token": TOKEN}, headers=foreign)
    assert answer.status_code == 403 and "set-cookie" not in answer.headers
    assert api.post("/inbox/logout", headers=foreign).status_code == 403
    # a browser's form from a no-referrer page says `Origin: null`; its Sec-Fetch-Site decides
    sent_null = {"Origin": "null"}
    cross = {**sent_null, "Sec-Fetch-Site": "cross-site"}
    assert api.post("/inbox/login", data={"token": TOKEN}, headers=cross).status_code == 403
    assert api.post("/inbox/login", data={"token": TOKEN}, headers=sent_null).status_code == 403
    same = {**sent_null, "Sec-Fetch-Site": "same-origin"}
    assert api.post("/inbox/login", data={"token": TOKEN}, headers=same).status_code == 303


def test_with_no_token_set_nobody_signs_in_and_inbox_open_opens_everything() -> None:
    closed = client(service())
    answer = sign_in(closed, "")
    assert answer.status_code == 401 and "inbox_token" in answer.text
    assert "set-cookie" not in answer.headers
    assert closed.get("/inbox").status_code == 303
    opened_ = client(service(inbox_open=True))
    assert opened_.get("/inbox").status_code == 200
    assert opened_.get("/interrupts").status_code == 200
    assert opened_.get("/inbox/login").headers["location"] == "/inbox"


def test_neither_the_token_nor_the_cookie_is_logged(inbox, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    api = client(inbox)
    sign_in(api, "wrong-" + TOKEN)
    sign_in(api)
    api.get("/inbox")
    api.get("/interrupts")
    api.post("/inbox/logout")
    assert {r.getMessage() for r in caplog.records} >= {
        "inbox sign-in",
        "inbox sign-in refused: wrong token",
    }
    logged = "".join(repr(vars(r)) for r in caplog.records)
    assert TOKEN not in logged and session_value(TOKEN.encode()) not in logged


async def test_closing_the_service_stops_the_pages_sender(inbox) -> None:
    closed: list[bool] = []

    class Sender:
        async def send(self, agent: str, run_input: dict[str, Any]) -> Any:
            raise AssertionError("nothing is sent here")

        async def aclose(self) -> None:
            closed.append(True)

    inbox.page.sender = Sender()
    await inbox.aclose()
    assert closed == [True]
