"""The edge verifying callers' bearer tokens (a real JWT signed here, its JWKS in a file)
and attesting who they are to a real gateway with an approver policy, end to end over
HTTP and the real broker."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import orjson
import pytest
from joserfc import jwt
from joserfc.jwk import ECKey, KeySet

from gateway.kafka.wire.attestation import HEADER_IDENTITY, generate_key, parse_forwarded
from gateway.settings import Settings
from tests.client.simulated_agent import SimulatedAgent
from tests.edge.support import EdgeProcess, sse_events
from tests.integration.support import GatewayProcess, Namespace, collect

AGENT = "desk"
ISSUER = "https://idp.example"
AUDIENCE = "agui-edge"
KEY = ECKey.generate_key("P-256", parameters={"kid": "idp-1"})
STRANGER = ECKey.generate_key("P-256", parameters={"kid": "idp-9"})


def token(key: ECKey = KEY, **claims: object) -> str:
    now = int(time.time())
    body = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "exp": now + 300, "iat": now}
    body.update(claims)
    return jwt.encode({"alg": "ES256", "kid": key.kid}, body, key)


def bearer(value: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {value}"}


@pytest.fixture
async def ns(kafka_bootstrap: str) -> Namespace:
    namespace = Namespace(kafka_bootstrap)
    await namespace.create_agent(AGENT, partitions=1)
    return namespace


async def test_tokens_are_verified_and_the_identity_reaches_the_policy_and_the_agent(
    ns: Namespace, tmp_path: Path
) -> None:
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(KeySet([KEY]).as_dict(private=False)))
    pem, public = generate_key()
    signing = tmp_path / "edge.pem"
    signing.write_bytes(pem)
    policy = [{"agent": AGENT, "reason": "approval_required", "answer_groups": ["approvers"]}]
    gateway = await GatewayProcess(
        ns,
        tmp_path,
        approvers=json.dumps(policy),
        attest_trusted_keys=json.dumps({"edge-1": public}),
    ).start()
    edge = await EdgeProcess(
        ns,
        tmp_path,
        edge_jwt_jwks_file=str(jwks),
        edge_jwt_issuer=ISSUER,
        edge_jwt_audience=AUDIENCE,
        edge_jwt_groups_claim="realm.roles",
        attest_key_id="edge-1",
        attest_private_key_file=str(signing),
    ).start()
    agent = SimulatedAgent(ns.bootstrap, ns.run_requests(AGENT), ns.events(AGENT))
    url = f"{edge.url}/agents/{AGENT}"
    alice = bearer(token(realm={"roles": ["approvers", "staff"]}))
    bob = bearer(token(sub="bob", realm={"roles": ["staff"]}))
    try:
        async with agent, httpx.AsyncClient(timeout=60) as http:
            # refused at the door, each with its reason (the token never echoed)
            refused = {
                "none": {},
                "audience": bearer(token(aud="someone-else")),
                "expired": bearer(token(exp=int(time.time()) - 3600)),
                "unknown key": bearer(token(STRANGER)),
                "signature": bearer(token()[:-8] + "AAAAAAAA"),
            }
            for what, headers in refused.items():
                response = await http.post(url, json=run_input("t-x", "r-x"), headers=headers)
                assert response.status_code == 401, what
                assert response.headers["www-authenticate"].startswith("Bearer")
                body = response.json()
                assert body["error"] == "unauthorized"
                if headers:
                    assert headers["Authorization"][7:] not in body["detail"]
                assert what.split()[0] in body["detail"] or what == "none", body
            # alice starts a run (it asks for approval) and approves: forwarded
            for who, thread in ((alice, "t-a"), (bob, "t-b")):
                status, _, raw = await post(http, url, run_input(thread, "r-1"), who)
                assert status == 200
                events, _ = sse_events(raw)
                assert events[-1]["outcome"]["type"] == "interrupt"
            approve = resume("t-a", "r-2", "approve-r-1")
            status, _, raw = await post(http, url, approve, alice)
            assert status == 200, raw
            assert sse_events(raw)[0][-1]["outcome"]["type"] == "success"
            # bob may start runs but not approve: 422 approver_not_allowed
            status, _, raw = await post(http, url, resume("t-b", "r-2", "approve-r-1"), bob)
            assert status == 422
            assert [r["code"] for r in orjson.loads(raw)["reasons"]] == ["approver_not_allowed"]
        forwards = await collect(ns.bootstrap, ns.run_requests(AGENT), count=3, settle=1.0)
    finally:
        await edge.stop()
        await gateway.stop()
    by_run = {(r.key, orjson.loads(r.value)["runId"]): r for r in forwards}
    approved = by_run[(b"t-a", "r-2")]
    identity = parse_forwarded(dict(approved.headers)[HEADER_IDENTITY])
    assert identity is not None
    assert (identity.subject, identity.groups, identity.issuer, identity.signer) == (
        "alice",
        ("approvers", "staff"),
        ISSUER,
        "edge-1",
    )
    assert "eyJ" not in edge.log_tail(400)  # no token in the edge's log


def run_input(thread: str, run: str) -> dict:
    return {"threadId": thread, "runId": run, "messages": []}


def resume(thread: str, run: str, interrupt_id: str) -> dict:
    return {
        **run_input(thread, run),
        "resume": [
            {"interruptId": interrupt_id, "status": "resolved", "payload": {"approved": True}}
        ],
    }


async def post(http: httpx.AsyncClient, url: str, body: dict, headers: dict) -> tuple:
    async with http.stream(
        "POST",
        url,
        content=orjson.dumps(body),
        headers={"Content-Type": "application/json", **headers},
    ) as response:
        raw = b"".join([chunk async for chunk in response.aiter_raw()])
        return response.status_code, response.headers.get("content-type", ""), raw


def test_the_edge_will_not_verify_tokens_without_a_key_to_attest_with(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry

    from gateway.edge.app import Edge
    from gateway.edge.auth import JwksError

    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(KeySet([KEY]).as_dict(private=False)))
    settings = Settings(edge_jwt_jwks_file=jwks, edge_jwt_issuer=ISSUER, edge_jwt_audience=AUDIENCE)
    with pytest.raises(JwksError, match="attest_key_id and attest_private_key_file"):
        Edge(settings, CollectorRegistry())
