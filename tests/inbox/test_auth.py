"""The inbox's authorizer with the edge's authentication: the inbox token as before, a
person's JWT verified by the edge's own verifier (a real JWT signed here, its JWKS in a
file), the session cookie that carries the identity it proved, and an answer from the
page attested as that person (or said to be unattested)."""

from __future__ import annotations

import json
import logging
import time
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import pytest
from joserfc.jwk import KeySet
from prometheus_client import CollectorRegistry
from pydantic import SecretStr
from starlette.requests import Request
from starlette.testclient import TestClient

from gateway import http
from gateway.client.replies import parse_reply
from gateway.core.values.identity import Identity
from gateway.inbox import cookie
from gateway.inbox.auth import COOKIE, Authorizer, Principal, Refused
from gateway.inbox.service import InboxService
from gateway.kafka.wire.attestation import AttestationError, generate_key
from gateway.settings import Settings
from tests.edge.test_auth import AUDIENCE, ISSUER, KEY, STRANGER, token
from tests.inbox.support import opened

TOKEN = "s3cret-inbox-token-value"
HTTP = "http://testserver"
ALICE = {"sub": "alice", "realm": {"roles": ["approvers", "staff"]}}


@pytest.fixture
def jwks(tmp_path: Path) -> Path:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(KeySet([KEY]).as_dict(private=False)))
    return path


@pytest.fixture
def signing_key(tmp_path: Path) -> Path:
    pem, _public = generate_key()
    path = tmp_path / "inbox.pem"
    path.write_bytes(pem)
    return path


def settings(jwks: Path, key: Path | None = None, **more: Any) -> Settings:
    base: dict[str, Any] = {
        "inbox_token": SecretStr(TOKEN),
        "edge_jwt_jwks_file": jwks,
        "edge_jwt_issuer": ISSUER,
        "edge_jwt_audience": AUDIENCE,
        "edge_jwt_groups_claim": "realm.roles",
    }
    if key is not None:
        base |= {"attest_key_id": "inbox-1", "attest_private_key_file": key}
    return Settings(**(base | more))


class Recorder:
    """An AnswerSender that keeps what it was asked to send, and with which identity."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any], Identity | None]] = []

    async def send(
        self, agent: str, run_input: dict[str, Any], identity: Identity | None = None
    ) -> Any:
        self.sent.append((agent, run_input, identity))
        return parse_reply(
            {
                "verdict": "forward",
                "agent": agent,
                "threadId": run_input["threadId"],
                "runId": run_input["runId"],
                "correlationId": "c-1",
                "at": "2026-12-03T13:00:00Z",
            }
        )

    async def aclose(self) -> None:
        pass


def service(s: Settings) -> tuple[InboxService, Recorder]:
    inbox = InboxService(s, CollectorRegistry())
    inbox.view.apply(*opened("bot", "t1", "approve-refund", 10_000), {})
    recorder = Recorder()
    inbox.page.sender = recorder
    return inbox, recorder


def client(inbox: InboxService, base_url: str = HTTP) -> TestClient:
    app = http.app(CollectorRegistry(), inbox.ready, inbox.routes)
    return TestClient(app, base_url=base_url, follow_redirects=False)


def request(headers: dict[str, str] | None = None, cookies: dict[str, str] | None = None):
    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    if cookies:
        raw.append((b"cookie", "; ".join(f"{k}={v}" for k, v in cookies.items()).encode()))
    return Request({"type": "http", "method": "GET", "path": "/", "headers": raw})


def bearer(value: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {value}"}


def sign_in(api: TestClient, given: str) -> Any:
    return api.post("/inbox/login", data={"token": given, "next": "/inbox"})


def abandon(api: TestClient) -> Any:
    form = {"agent": "bot", "thread": "t1", "0.id": "approve-refund", "0.status": "cancelled"}
    return api.post("/inbox/answer", data=form)


# --- the authorizer ------------------------------------------------------------------------


async def test_the_inbox_token_is_a_principal_without_an_identity(jwks) -> None:
    auth = Authorizer(settings(jwks))
    assert await auth.authorize(request(bearer(TOKEN))) == Principal(None, "token")
    refused = await auth.authorize(request(bearer("not-the-token")))
    assert isinstance(refused, Refused) and not refused and TOKEN not in refused.detail


async def test_a_valid_jwt_is_a_person_with_the_identity_the_edge_would_see(jwks) -> None:
    auth = Authorizer(settings(jwks))
    jwt = token(**ALICE)
    found = await auth.authorize(request(bearer(jwt)))
    assert isinstance(found, Principal) and found.via == "jwt"
    assert found.identity == Identity("alice", ("approvers", "staff"), ISSUER)
    assert found.expires_at is not None and found.expires_at > time.time()


@pytest.mark.parametrize(
    ("claims", "key", "says"),
    [
        ({"aud": "someone-else"}, KEY, "audience"),
        ({"iss": "https://other.example"}, KEY, "issuer"),
        ({"exp": int(time.time()) - 3600}, KEY, "expired"),
        ({}, STRANGER, 'unknown key: the token names key id "idp-9"'),
    ],
)
async def test_a_jwt_the_edge_would_refuse_is_refused_saying_why(jwks, claims, key, says) -> None:
    auth = Authorizer(settings(jwks))
    jwt = token(key, **claims)
    refused = await auth.authorize(request(bearer(jwt)))
    assert isinstance(refused, Refused) and says in refused.detail
    assert jwt not in refused.detail
    # nor does the sign-in form take it
    assert isinstance(await auth.sign_in(jwt), Refused)


async def test_without_the_edge_settings_a_jwt_is_only_a_wrong_token(tmp_path) -> None:
    auth = Authorizer(Settings(inbox_token=SecretStr(TOKEN)))
    assert not auth.verifies_people
    refused = await auth.authorize(request(bearer(token(**ALICE))))
    assert isinstance(refused, Refused) and "not the inbox token" in refused.detail


async def test_a_session_carries_the_identity_until_the_token_expires(jwks) -> None:
    now = [time.time()]
    auth = Authorizer(settings(jwks), clock=lambda: now[0])
    jwt = token(exp=int(now[0]) + 120, **ALICE)
    signed = await auth.sign_in(jwt)
    assert not isinstance(signed, Refused)
    assert 100 <= (signed.max_age or 0) <= 120  # the cookie lasts no longer than the token
    assert jwt not in signed.value and jwt.split(".")[1] not in signed.value
    found = await auth.authorize(request(cookies={COOKIE: signed.value}))
    assert isinstance(found, Principal) and found.via == "session"
    assert found.identity == Identity("alice", ("approvers", "staff"), ISSUER)
    now[0] += 121  # past the token's exp: the server refuses it, whatever the browser kept
    expired = await auth.authorize(request(cookies={COOKIE: signed.value}))
    assert isinstance(expired, Refused) and "expired" in expired.detail


async def test_a_tampered_session_is_refused(jwks) -> None:
    auth = Authorizer(settings(jwks))
    signed = await auth.sign_in(token(sub="bob", realm={"roles": ["staff"]}))
    assert not isinstance(signed, Refused)
    prefix, payload, mac = signed.value.split(".")
    doc = json.loads(cookie._unb64(payload))
    doc["groups"] = ["approvers"]  # bob grants himself the approvers' group
    forged = f"{prefix}.{cookie._b64(json.dumps(doc).encode())}.{mac}"
    for value in (forged, signed.value[:-2], f"{prefix}.{payload}.", "v2.garbage"):
        refused = await auth.authorize(request(cookies={COOKIE: value}))
        assert isinstance(refused, Refused), value


async def test_the_session_key_is_derived_from_the_signing_key_else_random(
    jwks, signing_key
) -> None:
    alice = token(**ALICE)
    with_key = await Authorizer(settings(jwks, signing_key)).sign_in(alice)
    assert not isinstance(with_key, Refused)
    # another process with the same signing key (a restart, a second inbox) takes it
    again = Authorizer(settings(jwks, signing_key))
    assert isinstance(await again.authorize(request(cookies={COOKIE: with_key.value})), Principal)
    # without a signing key each process seals with a key of its own
    alone = await Authorizer(settings(jwks)).sign_in(alice)
    assert not isinstance(alone, Refused)
    other = Authorizer(settings(jwks))
    assert isinstance(await other.authorize(request(cookies={COOKIE: alone.value})), Refused)
    # and the inbox token never seals a person's session: it is no key of theirs
    token_key = Authorizer(Settings(inbox_token=SecretStr(TOKEN)))
    assert isinstance(await token_key.authorize(request(cookies={COOKIE: alone.value})), Refused)


def test_a_signing_key_that_cannot_be_read_stops_the_start(jwks, tmp_path) -> None:
    broken = tmp_path / "broken.pem"
    broken.write_text("not a key")
    with pytest.raises(AttestationError, match="cannot be read"):
        Authorizer(settings(jwks, broken))


def test_an_identity_too_large_for_a_cookie_is_refused_not_cut() -> None:
    many = Identity("alice", tuple(f"group-{n:04d}" for n in range(256)), ISSUER)
    with pytest.raises(cookie.TooLarge):
        cookie.seal(b"k" * 32, many, int(time.time()) + 60)


# --- the routes ----------------------------------------------------------------------------


def test_the_api_takes_the_token_or_a_jwt_and_says_why_it_refuses(jwks) -> None:
    api = client(service(settings(jwks))[0])
    assert api.get("/interrupts", headers=bearer(TOKEN)).status_code == 200
    assert api.get("/interrupts", headers=bearer(token(**ALICE))).json()["total"] == 1
    wrong = token(aud="someone-else")
    refused = api.get("/interrupts", headers=bearer(wrong))
    assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Bearer")
    assert "audience" in refused.json()["detail"] and wrong not in refused.text
    assert api.get("/interrupts").status_code == 401


def test_a_proxy_adding_the_persons_jwt_needs_no_sign_in(jwks, signing_key) -> None:
    inbox, sender = service(settings(jwks, signing_key))
    api = client(inbox)
    jwt = bearer(token(**ALICE))
    page = api.get("/inbox", headers=jwt)
    assert page.status_code == 200 and "Signed in as <strong>alice</strong>" in page.text
    form = {"agent": "bot", "thread": "t1", "0.id": "approve-refund", "0.status": "cancelled"}
    assert api.post("/inbox/answer", data=form, headers=jwt).json()["attestedAs"] == "alice"
    assert sender.sent[0][2] == Identity("alice", ("approvers", "staff"), ISSUER)
    # a bearer header decides: a wrong one is refused, whatever session comes with it
    sign_in(api, TOKEN)
    assert api.get("/inbox", headers=bearer(token(aud="someone-else"))).status_code == 303


def test_signing_in_with_a_jwt_shows_who_and_the_cookie_holds_no_token(jwks, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    api = client(service(settings(jwks))[0])
    form = api.get("/inbox/login")
    assert "JWT" in form.text
    jwt = token(**ALICE)
    answer = sign_in(api, jwt)
    assert answer.status_code == 303
    header = answer.headers["set-cookie"]
    assert jwt not in header and TOKEN not in header
    jar: SimpleCookie = SimpleCookie()
    jar.load(header)
    morsel = jar[COOKIE]
    assert morsel["httponly"] and morsel["samesite"].lower() == "strict"
    assert 0 < int(morsel["max-age"]) <= 300
    page = api.get("/inbox")
    assert page.status_code == 200 and "Signed in as <strong>alice</strong>" in page.text
    assert "approvers, staff" in page.text and jwt not in page.text
    # a refused one says why, and sets nothing
    late = token(exp=int(time.time()) - 3600)
    refused = sign_in(client(service(settings(jwks))[0]), late)
    assert refused.status_code == 401 and "expired" in refused.text
    assert "set-cookie" not in refused.headers and late not in refused.text
    logged = "".join(repr(vars(r)) for r in caplog.records)
    assert jwt not in logged and late not in logged and morsel.value not in logged
    assert "alice" in logged  # the sign-in names who


def test_a_persons_answer_is_attested_with_the_inbox_key(jwks, signing_key) -> None:
    inbox, sender = service(settings(jwks, signing_key))
    api = client(inbox)
    sign_in(api, token(**ALICE))
    thread = api.get("/inbox/thread?agent=bot&thread=t1")
    assert "answers are attested as you" in thread.text and "unattested" not in thread.text
    answer = abandon(api)
    assert answer.status_code == 200, answer.text
    assert answer.json()["attestedAs"] == "alice" and "unattested" not in answer.json()
    [(_agent, _input, identity)] = sender.sent
    assert identity == Identity("alice", ("approvers", "staff"), ISSUER)


def test_without_a_signing_key_a_persons_answer_is_said_to_be_unattested(jwks) -> None:
    inbox, sender = service(settings(jwks))
    api = client(inbox)
    sign_in(api, token(**ALICE))
    thread = api.get("/inbox/thread?agent=bot&thread=t1")
    assert 'id="unattested"' in thread.text and "no signing key" in thread.text
    answer = abandon(api).json()
    assert answer["sent"] is True and answer["attestedAs"] is None
    assert "no signing key" in answer["unattested"]
    assert [identity for *_rest, identity in sender.sent] == [None]


def test_with_the_token_only_the_answer_stays_unattested(jwks, signing_key) -> None:
    inbox, sender = service(settings(jwks, signing_key))
    api = client(inbox)
    sign_in(api, TOKEN)
    page = api.get("/inbox")
    assert "Signed in with the inbox token" in page.text
    answer = abandon(api).json()
    assert answer["sent"] is True and answer["attestedAs"] is None
    assert "unattested" not in answer  # nobody's identity was there to lose
    assert [identity for *_rest, identity in sender.sent] == [None]


async def test_while_a_jwks_url_gives_no_keys_a_jwt_is_refused_saying_so() -> None:
    s = Settings(
        edge_jwt_jwks_url="http://127.0.0.1:1/jwks.json",  # nothing listens there
        edge_jwt_issuer=ISSUER,
        edge_jwt_audience=AUDIENCE,
        edge_jwks_min_refresh_s=0,
    )
    auth = Authorizer(s)
    await auth.start()  # logged, not raised: the inbox serves the token meanwhile
    refused = await auth.authorize(request(bearer(token(**ALICE))))
    assert isinstance(refused, Refused) and "could not be fetched" in refused.detail
    # once the keys are there (the identity provider is back), the same token is taken
    assert auth.tokens is not None
    auth.tokens.keys = KeySet([KEY])
    assert isinstance(await auth.authorize(request(bearer(token(**ALICE)))), Principal)


def test_an_inbox_verifying_people_without_a_signing_key_warns_at_start(
    jwks, signing_key, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.inbox")
    InboxService(settings(jwks), CollectorRegistry())
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("no signing key" in m and "unattested" in m for m in warned), warned
    caplog.clear()
    InboxService(settings(jwks, signing_key), CollectorRegistry())
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
