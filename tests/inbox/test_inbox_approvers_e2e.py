"""Verified approvers through the inbox page, on the real broker: the real gateway with an
approver policy and the inbox's public key trusted, a separate `agui-gateway inbox`
verifying people's JWTs with the edge's settings (a JWKS file, a token minted here),
and answers sent through the page's own send path (`POST /inbox/answer`):

- a person signed in with a JWT naming the allowed group: forwarded, attested with the
  inbox's key; the audit record and the forward name the subject;
- a verified person not in the group: `approver_not_allowed`, shown in the answer;
- the inbox token only (no identity): `approver_unverified`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from joserfc.jwk import KeySet

from gateway.kafka.wire.attestation import HEADER_IDENTITY, generate_key, parse_forwarded
from tests.edge.test_auth import AUDIENCE, ISSUER, KEY, token
from tests.inbox.test_inbox_e2e import TOKEN, InboxProcess, listed, poll
from tests.integration.inprocess import interrupted
from tests.integration.support import GatewayProcess, Namespace, collect, produce

pytestmark = pytest.mark.integration

AGENT = "payments"
POLICY = [{"agent": AGENT, "reason": "tool", "answer_groups": ["approvers"]}]


def answer_form(thread: str) -> dict[str, str]:
    """The thread's form as the page posts it: interrupt `a` approved."""
    return {"agent": AGENT, "thread": thread, "0.id": "a", "0.status": "resolved", "0:": "approve"}


async def answer_as(base: str, credential: str, thread: str) -> dict[str, Any]:
    """Sign in at the page with `credential` (the inbox token or a JWT), as a browser
    does, then answer `thread`'s interrupt through the page; the page's JSON answer."""
    async with httpx.AsyncClient(base_url=base, timeout=60, follow_redirects=False) as http:
        signed = await http.post("/inbox/login", data={"token": credential, "next": "/inbox"})
        assert signed.status_code == 303, signed.text
        page = await http.get(f"/inbox/thread?agent={AGENT}&thread={thread}")
        assert page.status_code == 200
        answered = await http.post("/inbox/answer", data=answer_form(thread))
        assert answered.status_code == 200, answered.text
        return {"page": page.text, **answered.json()}


async def test_a_person_verified_at_the_inbox_answers_a_governed_interrupt(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    ns = Namespace(kafka_bootstrap)
    await ns.create_agent(AGENT, partitions=1)
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(KeySet([KEY]).as_dict(private=False)))
    pem, public = generate_key()
    signing = tmp_path / "inbox.pem"
    signing.write_bytes(pem)
    gateway = await GatewayProcess(
        ns,
        tmp_path,
        approvers=json.dumps(POLICY),
        attest_trusted_keys=json.dumps({"inbox-1": public}),
    ).start()
    inbox = InboxProcess(ns, tmp_path)
    inbox.env.update(
        ns.env(
            inbox_port=inbox.port,
            inbox_token=TOKEN,
            inbox_page_reply_topic=f"{ns.prefix}.inbox-replies",
            edge_jwt_jwks_file=jwks,
            edge_jwt_issuer=ISSUER,
            edge_jwt_audience=AUDIENCE,
            edge_jwt_groups_claim="realm.roles",
            attest_key_id="inbox-1",
            attest_private_key_file=signing,
        )
    )
    await inbox.start()
    base = f"http://127.0.0.1:{inbox.port}"
    alice = token(sub="alice", realm={"roles": ["approvers", "staff"]})
    bob = token(sub="bob", realm={"roles": ["staff"]})
    threads = {"t-alice": alice, "t-bob": bob, "t-token": TOKEN}
    try:
        for thread in threads:
            await produce(ns.bootstrap, ns.events(AGENT), interrupted(thread))
        await poll(
            f"{base}/interrupts",
            lambda a: listed(a) >= {(AGENT, t, "a") for t in threads},
            timeout=90,
        )
        answers = {t: await answer_as(base, credential, t) for t, credential in threads.items()}
        audit = await collect(ns.bootstrap, ns.audit, count=3, timeout=60)
        [forward] = await collect(ns.bootstrap, ns.run_requests(AGENT), count=1, settle=2.0)
    finally:
        await inbox.stop()
        await gateway.stop()

    # alice, in the group: her answer is attested as her and forwarded
    assert "Signed in as <strong>alice</strong>" in answers["t-alice"]["page"]
    assert answers["t-alice"]["verdict"] == "forward", answers["t-alice"]
    assert answers["t-alice"]["attestedAs"] == "alice"
    # bob, verified but not allowed; the page's answer shows the gateway's reason
    assert answers["t-bob"]["verdict"] == "reject"
    assert [r["code"] for r in answers["t-bob"]["reasons"]] == ["approver_not_allowed"]
    assert "'bob'" in answers["t-bob"]["reasons"][0]["detail"]
    # the token alone carries nobody: unverified
    assert "Signed in with the inbox token" in answers["t-token"]["page"]
    assert answers["t-token"]["verdict"] == "reject" and answers["t-token"]["attestedAs"] is None
    assert [r["code"] for r in answers["t-token"]["reasons"]] == ["approver_unverified"]

    # the audit trail names who answered (and with which key), as for an edge request
    by_thread = {d["threadId"]: d for d in (orjson.loads(r.value) for r in audit)}
    assert by_thread["t-alice"]["verdict"] == "forward"
    assert by_thread["t-alice"]["attestation"] == "verified"
    assert by_thread["t-alice"]["identity"] == {
        "subject": "alice",
        "groups": ["approvers", "staff"],
        "issuer": ISSUER,
        "signer": "inbox-1",
    }
    assert by_thread["t-bob"]["identity"]["subject"] == "bob"
    assert by_thread["t-token"]["attestation"] == "unattested"
    # and so does the forward, for the agent
    assert forward.key == b"t-alice"
    identity = parse_forwarded(dict(forward.headers)[HEADER_IDENTITY])
    assert identity is not None and (identity.subject, identity.signer) == ("alice", "inbox-1")
    # the JWTs reached no log of the inbox
    logged = inbox.log_path.read_text()
    assert alice not in logged and bob not in logged and TOKEN not in logged
