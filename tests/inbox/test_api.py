"""The inbox's JSON API over a view: answers valid by their schemas, a bearer token asked."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry
from pydantic import SecretStr
from starlette.testclient import TestClient

from gateway import http
from gateway.inbox.api import bearer, routes
from gateway.inbox.view import InboxView
from gateway.settings import Settings
from tests.inbox.support import audit, check, closed, opened

TOKEN = "s3cret-token-value"
GOOD = {"Authorization": f"Bearer {TOKEN}"}
PATHS = ["/interrupts", "/interrupts/summary", "/threads/bot/t1", "/interrupts/events"]


def client(view: InboxView, **settings) -> TestClient:
    """The gateway's own HTTP app with the inbox's routes, as `run` serves it."""
    authorize = bearer(Settings(**settings))
    app = http.app(CollectorRegistry(), lambda: (True, {}), routes(view, authorize))
    return TestClient(app)


@pytest.fixture
def view() -> InboxView:
    view = InboxView(100, lambda: 100.0)
    view.apply(*opened("bot", "t1", "a", 10_000, group="team"), {})
    view.apply(*opened("bot", "t1", "b", 20_000), {})
    view.apply(*opened("cat", "t2", "c", 30_000, reason="input", expires_at_ms=50_000), {})
    key, headers = closed("cat", "t3", "d", at_ms=90_000, opened_at_ms=60_000)
    view.apply(key, None, headers)
    view.trail.reading(frozenset({"agui.audit"}), lambda agent: "agui.audit", 0)
    view.verdict(audit("bot", "t1", "reject", codes=("uncovered_interrupt",)), ("agui.audit", 0, 0))
    return view


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}, {"Authorization": "Basic x"}],
)
def test_without_the_token_every_route_is_401(view, path, headers) -> None:
    answer = client(view, inbox_token=SecretStr(TOKEN)).get(path, headers=headers)
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"].startswith("Bearer")
    assert TOKEN not in answer.text


@pytest.mark.parametrize("path", PATHS[:3])
def test_with_no_token_set_everything_is_refused_unless_open(view, path) -> None:
    assert client(view).get(path, headers=GOOD).status_code == 401
    assert client(view, inbox_open=True).get(path).status_code == 200


def test_the_answers_follow_their_schemas(view) -> None:
    api = client(view, inbox_token=SecretStr(TOKEN))
    listed = api.get("/interrupts", headers=GOOD)
    assert listed.status_code == 200
    check("interrupts", listed.json())
    assert [i["interrupt"] for i in listed.json()["items"]] == ["a", "b", "c"]
    thread = api.get("/threads/bot/t1", headers=GOOD)
    check("thread", thread.json())
    assert [i["interrupt"] for i in thread.json()["open"]] == ["a", "b"]
    [verdict] = thread.json()["verdicts"]
    assert (verdict["verdict"], verdict["reasons"]) == ("reject", ["uncovered_interrupt"])
    closed_only = api.get("/threads/cat/t3", headers=GOOD)  # nothing open: its history
    assert closed_only.status_code == 200
    check("thread", closed_only.json())
    assert closed_only.json()["open"] == [] and closed_only.json()["verdicts"] == []
    assert closed_only.json()["closesWithoutRun"][0]["interrupt"] == "d"
    summary = api.get("/interrupts/summary", headers=GOOD).json()
    check("summary", summary)
    by_agent = {a["agent"]: a for a in summary["agents"]}
    assert by_agent["bot"]["open"] == 2 and by_agent["cat"]["byReason"] == {"input": 1}
    assert by_agent["cat"]["latency"]["p50Seconds"] == 30.0


def test_filters_and_paging_through_the_api(view) -> None:
    api = client(view, inbox_token=SecretStr(TOKEN))
    first = api.get("/interrupts", params={"limit": 2}, headers=GOOD).json()
    assert [i["interrupt"] for i in first["items"]] == ["a", "b"] and first["total"] == 3
    rest = api.get("/interrupts", params={"limit": 2, "cursor": first["next"]}, headers=GOOD)
    assert [i["interrupt"] for i in rest.json()["items"]] == ["c"] and rest.json()["next"] is None
    params = [("agent", "cat"), ("agent", "bot"), ("group", "team")]
    grouped = api.get("/interrupts", params=params, headers=GOOD).json()
    assert [i["interrupt"] for i in grouped["items"]] == ["a"]


def test_a_bad_query_is_400_naming_the_parameter_and_an_unknown_thread_404(view) -> None:
    api = client(view, inbox_token=SecretStr(TOKEN))
    bad = api.get("/interrupts", params={"limit": 9999}, headers=GOOD)
    assert bad.status_code == 400 and bad.json()["error"] == "bad_query"
    assert "limit" in bad.json()["detail"]
    assert api.get("/threads/bot/nope", headers=GOOD).status_code == 404


def test_the_token_is_never_logged_nor_shown(view, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    settings = Settings(inbox_token=SecretStr(TOKEN))
    api = client(view, inbox_token=SecretStr(TOKEN))
    api.get("/interrupts", headers={"Authorization": "Bearer nope"})
    api.get("/interrupts", headers=GOOD)
    assert TOKEN not in caplog.text and TOKEN not in repr(settings) and TOKEN not in str(settings)
