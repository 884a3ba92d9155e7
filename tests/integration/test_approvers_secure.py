"""Verified approvers on the locked-down broker (SASL_SSL, ACLs): the gateway runs as
`agui-gateway` with exactly the ACLs `agui-gateway acls` prints, an approver policy and a
trusted key; an allowed approver is forwarded with the identity on the forward, a
disallowed one rejected, and an identity forged by someone publishing straight to the
requests topic is not trusted."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from gateway.core import Identity
from gateway.kafka.wire.attestation import (
    HEADER_IDENTITY,
    Signer,
    generate_key,
    parse_forwarded,
)
from tests.integration.support import GatewayProcess, collect, produce
from tests.integration.test_secure_kafka import (
    AGENT,
    SecureNamespace,
    interrupted,
    reply_headers,
    resume,
    setup_agent,
    started,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def ns(secure_kafka: tuple[str, Path]) -> SecureNamespace:
    return SecureNamespace(*secure_kafka)


def key(tmp_path: Path, key_id: str, file: str) -> Signer:
    pem, _ = generate_key()
    (tmp_path / file).write_bytes(pem)
    return Signer.from_file(key_id, tmp_path / file)


async def test_approvers_on_the_secure_broker(ns: SecureNamespace, tmp_path: Path) -> None:
    await setup_agent(ns)
    sec = ns.security()
    edge = key(tmp_path, "edge-1", "edge.pem")
    forger = key(tmp_path, "edge-1", "forger.pem")
    alice = Identity("alice", ("approvers",), "https://idp.example")
    threads = ("t-alice", "t-bob", "t-forged")
    for thread in threads:
        events = [
            (thread, started(thread, "run-1")),
            (thread, interrupted(thread, "run-1", "pick")),
        ]
        await produce(ns.bootstrap, ns.events(AGENT), events, **sec)
    policy = [{"agent": AGENT, "reason": "choice", "answer_subjects": ["alice"]}]
    gateway = await GatewayProcess(
        ns,
        tmp_path,
        approvers=json.dumps(policy),
        attest_trusted_keys=json.dumps({"edge-1": edge.public_key()}),
    ).start()
    try:
        for thread, who, signer in (
            ("t-alice", alice, edge),
            ("t-bob", Identity("bob"), edge),
            ("t-forged", alice, forger),
        ):
            body = orjson.dumps(
                resume(thread, "run-2", {"interruptId": "pick", "status": "resolved"})
            )
            headers = reply_headers(ns, f"c-{thread}")
            headers += signer.headers(who, None, thread.encode(), f"c-{thread}".encode(), body)
            await produce(
                ns.bootstrap, ns.requests(AGENT), [(thread, body)], headers=headers, **sec
            )
        [forward] = await collect(ns.bootstrap, ns.run_requests(AGENT), count=1, settle=2.0, **sec)
        rejected = await collect(ns.bootstrap, ns.rejections, count=2, **sec)
    finally:
        assert await gateway.stop() == 0
    assert forward.key == b"t-alice"
    assert parse_forwarded(dict(forward.headers)[HEADER_IDENTITY]) == Identity(
        "alice", ("approvers",), "https://idp.example", "edge-1"
    )
    codes = {
        r.key.decode(): [x["code"] for x in orjson.loads(r.value)["reasons"]] for r in rejected
    }
    assert codes == {"t-bob": ["approver_not_allowed"], "t-forged": ["approver_unverified"]}
