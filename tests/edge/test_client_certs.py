"""The edge verifying callers by TLS client certificate (a CA, the edge's certificate and
a client's, made here), attesting the certificate's identity to a real gateway with an
approver policy, over real HTTPS and the real broker."""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
from pathlib import Path

import httpx
import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gateway.edge.auth import Unauthorized, cert_identity
from gateway.kafka.wire.attestation import HEADER_IDENTITY, generate_key, parse_forwarded
from tests.client.simulated_agent import SimulatedAgent
from tests.edge.support import EdgeProcess, sse_events
from tests.integration.support import GatewayProcess, Namespace, collect

AGENT = "desk"


def _name(cn: str, *ous: str) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    parts += [x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou) for ou in ous]
    return x509.Name(parts)


def _issue(subject: x509.Name, issuer: x509.Name, key, signer, *, ca=False, ip=None):
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ip is not None:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]),
            critical=False,
        )
    return builder.sign(signer, hashes.SHA256())


def _write(path: Path, cert, key) -> tuple[Path, Path]:
    crt, pem = path.with_suffix(".crt"), path.with_suffix(".key")
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return crt, pem


def pki(tmp_path: Path) -> dict[str, tuple[Path, Path]]:
    """A CA; the edge's certificate (for 127.0.0.1); alice's and bob's client certificates."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("agui test CA")
    ca = _issue(ca_name, ca_name, ca_key, ca_key, ca=True)
    out = {"ca": _write(tmp_path / "ca", ca, ca_key)}
    for who, name, ip in (
        ("edge", _name("edge"), "127.0.0.1"),
        ("alice", _name("alice", "approvers", "staff"), None),
        ("bob", _name("bob", "staff"), None),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        out[who] = _write(tmp_path / who, _issue(name, ca_name, key, ca_key, ip=ip), key)
    return out


def client(ca: Path, cert: tuple[Path, Path] | None) -> httpx.AsyncClient:
    context = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    return httpx.AsyncClient(verify=context, timeout=60)


def test_a_certificate_names_its_subject_groups_and_issuer():
    peer = {
        "subject": ((("commonName", "alice"),), (("organizationalUnitName", "approvers"),)),
        "issuer": ((("commonName", "agui test CA"),),),
    }
    identity = cert_identity(peer)
    assert (identity.subject, identity.groups, identity.issuer) == (
        "alice",
        ("approvers",),
        "agui test CA",
    )
    with pytest.raises(Unauthorized, match="no commonName"):
        cert_identity({"subject": ((("organizationName", "x"),),)})


@pytest.fixture
async def ns(kafka_bootstrap: str) -> Namespace:
    namespace = Namespace(kafka_bootstrap)
    await namespace.create_agent(AGENT, partitions=1)
    return namespace


async def test_client_certificates_are_callers_the_policy_judges(
    ns: Namespace, tmp_path: Path
) -> None:
    certs = pki(tmp_path)
    ca = certs["ca"][0]
    pem, public = generate_key()
    (tmp_path / "attest.pem").write_bytes(pem)
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
        tls_ca=ca,
        edge_ssl_certfile=str(certs["edge"][0]),
        edge_ssl_keyfile=str(certs["edge"][1]),
        edge_ssl_ca_certs=str(ca),
        edge_client_certs="optional",
        attest_key_id="edge-1",
        attest_private_key_file=str(tmp_path / "attest.pem"),
    ).start()
    agent = SimulatedAgent(ns.bootstrap, ns.run_requests(AGENT), ns.events(AGENT))
    url = f"{edge.url}/agents/{AGENT}"
    try:
        async with (
            agent,
            client(ca, None) as nobody,
            client(ca, certs["alice"]) as alice,
            client(ca, certs["bob"]) as bob,
        ):
            refused = await nobody.post(url, json=run_input("t-x", "r-x"))
            assert refused.status_code == 401
            assert refused.json()["detail"] == "no client certificate (and no bearer token)"
            for who, thread in ((alice, "t-a"), (bob, "t-b")):
                status, raw = await post(who, url, run_input(thread, "r-1"))
                assert status == 200, raw
                assert sse_events(raw)[0][-1]["outcome"]["type"] == "interrupt"
            status, raw = await post(alice, url, resume("t-a"))
            assert status == 200, raw
            status, raw = await post(bob, url, resume("t-b"))
            assert status == 422
            assert [r["code"] for r in orjson.loads(raw)["reasons"]] == ["approver_not_allowed"]
        forwards = await collect(ns.bootstrap, ns.run_requests(AGENT), count=3, settle=1.0)
    finally:
        await edge.stop()
        await gateway.stop()
    [approved] = [r for r in forwards if r.key == b"t-a" and b'"r-2"' in r.value]
    identity = parse_forwarded(dict(approved.headers)[HEADER_IDENTITY])
    assert identity is not None
    assert (identity.subject, identity.groups, identity.issuer, identity.signer) == (
        "alice",
        ("approvers", "staff"),
        "agui test CA",
        "edge-1",
    )


def run_input(thread: str, run: str) -> dict:
    return {"threadId": thread, "runId": run, "messages": []}


def resume(thread: str) -> dict:
    entry = {"interruptId": "approve-r-1", "status": "resolved", "payload": {"approved": True}}
    return {**run_input(thread, "r-2"), "resume": [entry]}


async def post(http: httpx.AsyncClient, url: str, body: dict) -> tuple[int, bytes]:
    async with http.stream("POST", url, content=orjson.dumps(body)) as response:
        return response.status_code, b"".join([c async for c in response.aiter_raw()])
