"""Identities attested on request records (gateway.kafka.wire.attestation): what the
signature covers, rotation across several trusted keys, and the pair judging with the
identity it verified (forwarded with the identity on the forward; forged, tampered or
unknown-key headers never trusted)."""

from __future__ import annotations

import json

import orjson
import pytest
from prometheus_client import CollectorRegistry

from gateway.codec.records import HEADER_AGENT, HEADER_CORRELATION_ID, InRecord
from gateway.core import Identity
from gateway.core.values.approvers import ApproverRule
from gateway.kafka.pairs.pair import PairContext, PartitionPair
from gateway.kafka.wire.attestation import (
    HEADER_IDENTITY,
    HEADER_IDENTITY_KEY,
    HEADER_IDENTITY_SIGNATURE,
    AttestationError,
    Signer,
    Unverified,
    Verifier,
    caller_of,
    generate_key,
    identity_json,
    parse_forwarded,
)
from gateway.observe.metrics import Metrics
from gateway.observe.warnings import WarningLimiter
from gateway.state.retention import Retention
from tests.kafka.test_pair import TOPICS, Feed, answer, interrupted, started

ALICE = Identity("alice", ("approvers",), "https://idp.example")
BODY = b'{"threadId":"t1","runId":"r2","messages":[]}'


def signer(key_id: str, tmp_path) -> Signer:
    pem, _ = generate_key()
    path = tmp_path / f"{key_id}.pem"
    path.write_bytes(pem)
    return Signer.from_file(key_id, path)


@pytest.fixture
def edge(tmp_path) -> Signer:
    return signer("edge-2026-01", tmp_path)


def signed(
    s: Signer,
    identity: Identity = ALICE,
    *,
    agent: bytes = b"bot",
    key: bytes = b"t1",
    cid: bytes = b"c-1",
    value: bytes = BODY,
) -> list[tuple[str, bytes]]:
    base = [(HEADER_CORRELATION_ID, cid), (HEADER_AGENT, agent)]
    return base + s.headers(identity, agent, key, cid, value)


def test_a_good_signature_verifies_to_the_identity_and_names_its_key(edge):
    verifier = Verifier({edge.key_id: edge.public_key()})
    found = verifier.verify(signed(edge), b"t1", BODY)
    assert found == Identity("alice", ("approvers",), "https://idp.example", "edge-2026-01")


def test_no_identity_headers_is_unattested_not_an_error(edge):
    verifier = Verifier({edge.key_id: edge.public_key()})
    assert verifier.verify([(HEADER_CORRELATION_ID, b"c-1")], b"t1", BODY) is None


@pytest.mark.parametrize(
    ("what", "key", "value", "change"),
    [
        ("body", b"t1", BODY.replace(b"r2", b"r3"), None),
        ("thread", b"t2", BODY, None),
        ("correlation id", b"t1", BODY, (HEADER_CORRELATION_ID, b"c-2")),
        ("agent", b"t1", BODY, (HEADER_AGENT, b"other")),
        ("identity", b"t1", BODY, (HEADER_IDENTITY, identity_json(Identity("mallory")))),
    ],
)
def test_a_tampered_record_does_not_verify(edge, what, key, value, change):
    verifier = Verifier({edge.key_id: edge.public_key()})
    headers = signed(edge)
    if change is not None:
        headers = [change if name == change[0] else (name, v) for name, v in headers]
    found = verifier.verify(headers, key, value)
    assert isinstance(found, Unverified), what
    assert "does not verify" in found.detail


def test_a_signature_by_an_untrusted_key_is_not_trusted(edge, tmp_path):
    other = signer(edge.key_id, tmp_path / "..")  # the same id, another key
    verifier = Verifier({edge.key_id: edge.public_key()})
    assert isinstance(verifier.verify(signed(other), b"t1", BODY), Unverified)
    unknown = signer("someone-else", tmp_path)
    found = verifier.verify(signed(unknown), b"t1", BODY)
    assert isinstance(found, Unverified)
    assert found.detail == 'its identity is signed with key "someone-else", not trusted'


def test_keys_rotate_with_both_trusted_at_once(edge, tmp_path):
    new = signer("edge-2026-02", tmp_path)
    before = Verifier({edge.key_id: edge.public_key()})
    during = Verifier({edge.key_id: edge.public_key(), new.key_id: new.public_key()})
    after = Verifier({new.key_id: new.public_key()})
    old_record, new_record = signed(edge), signed(new)
    assert isinstance(before.verify(new_record, b"t1", BODY), Unverified)
    # while both are trusted, a record signed before the switch and one after both verify
    from_old = during.verify(old_record, b"t1", BODY)
    from_new = during.verify(new_record, b"t1", BODY)
    assert isinstance(from_old, Identity) and from_old.signer == "edge-2026-01"
    assert isinstance(from_new, Identity) and from_new.signer == "edge-2026-02"
    assert isinstance(after.verify(old_record, b"t1", BODY), Unverified)
    assert isinstance(after.verify(new_record, b"t1", BODY), Identity)


@pytest.mark.parametrize(
    ("mangle", "says"),
    [
        (lambda h: [x for x in h if x[0] != HEADER_IDENTITY_SIGNATURE], "lack"),
        (lambda h: [*h, (HEADER_IDENTITY, b'{"subject":"x"}')], "twice"),
        # another agent (or correlation id) put first, where the gateway reads it
        (lambda h: [(HEADER_AGENT, b"other"), *h], "agui-agent twice"),
        (lambda h: [(HEADER_CORRELATION_ID, b"c-9"), *h], "agui-correlation-id twice"),
        (
            lambda h: [(n, b"!!" if n == HEADER_IDENTITY_SIGNATURE else v) for n, v in h],
            "base64url",
        ),
        (lambda h: [(n, b"\xff" if n == HEADER_IDENTITY_KEY else v) for n, v in h], "UTF-8"),
        (lambda h: [(HEADER_IDENTITY, b"{}")], "lack"),
    ],
)
def test_malformed_identity_headers_are_unverified_with_a_reason(edge, mangle, says):
    verifier = Verifier({edge.key_id: edge.public_key()})
    found = verifier.verify(mangle(signed(edge)), b"t1", BODY)
    assert isinstance(found, Unverified)
    assert says in found.detail


def test_keys_that_cannot_be_read_are_said_at_start(tmp_path):
    with pytest.raises(AttestationError, match="'k1': an Ed25519 public key is 32 bytes"):
        Verifier({"k1": "AAAA"})
    path = tmp_path / "not-a-key.pem"
    path.write_text("hello")
    with pytest.raises(AttestationError, match="cannot be read as a PEM private key"):
        Signer.from_file("k", path)


def test_a_pem_public_key_is_trusted_too(edge):
    from cryptography.hazmat.primitives import serialization

    pem = edge._key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    verifier = Verifier({edge.key_id: pem.decode()})
    assert isinstance(verifier.verify(signed(edge), b"t1", BODY), Identity)


# --- the pair judging with what it verified ---------------------------------------------------


REGISTRY: dict[int, CollectorRegistry] = {}  # each pair's registry, by the pair's id


def make_pair(verifier: Verifier | None, rules: tuple[ApproverRule, ...]) -> PartitionPair:
    registry = CollectorRegistry()
    ctx = PairContext(
        False,
        5.0,
        Retention(10**9, 10**9, 10**9),
        Metrics(registry),
        WarningLimiter(5, 60_000),
        {"replies"}.__contains__,
        approvers=rules,
        verifier=verifier,
    )
    pair = PartitionPair(TOPICS, 0, ctx)
    REGISTRY[id(pair)] = registry
    return pair


def identities(pair: PartitionPair, result: str) -> float:
    """The pair's identities counter for `result`, once its round committed."""
    pair.committed_round(pair.seal(), 0.0)
    sample = REGISTRY[id(pair)].get_sample_value(
        "agui_gateway_identities_total", {"agent": "bot", "result": result}
    )
    return sample or 0.0


def judged(pair: PartitionPair, headers) -> tuple[str, list]:
    f = Feed()
    pair.take("events", [f.rec("events", started(), 10), f.rec("events", interrupted(), 20)])
    pair.take("requests", [f.rec("requests", orjson.dumps(answer()), 30, headers=headers)])
    pair.set_fence(events_end=2)
    pair.process(events_position=2, mono_now=0.0, wall_ms=0)
    [out] = [o for o in pair.round.out if o.topic != "agui.warnings"]
    return out.topic, out.headers


def rejected(pair: PartitionPair) -> dict:
    """The round's rejection record."""
    [out] = [o for o in pair.round.out if o.topic == "agui.rejections"]
    return orjson.loads(out.value)


def warned(pair: PartitionPair) -> list[str]:
    """The codes of the round's warnings topic records."""
    out = [o for o in pair.round.out if o.topic == "agui.warnings"]
    return [orjson.loads(o.value)["code"] for o in out]


RULE = ApproverRule(agent="bot", answer_groups=("approvers",))


def request_headers(s: Signer, identity: Identity = ALICE) -> list[tuple[str, bytes]]:
    return signed(s, identity, value=orjson.dumps(answer()))


def test_the_pair_forwards_a_verified_approver_with_the_identity_for_the_agent(edge):
    pair = make_pair(Verifier({edge.key_id: edge.public_key()}), (RULE,))
    topic, headers = judged(pair, request_headers(edge))
    assert topic == "agui.bot.run-requests"
    forwarded = parse_forwarded(dict(headers)[HEADER_IDENTITY])
    assert forwarded == Identity("alice", ("approvers",), "https://idp.example", "edge-2026-01")
    # the request's signature headers are not copied onto the forward
    assert HEADER_IDENTITY_SIGNATURE not in dict(headers)
    assert identities(pair, "verified") == 1
    assert warned(pair) == []


def test_the_pair_forwards_a_forged_identity_no_rule_governs_with_a_warning(edge, tmp_path):
    pair = make_pair(Verifier({edge.key_id: edge.public_key()}), ())
    forger = signer(edge.key_id, tmp_path / "..")
    topic, headers = judged(pair, request_headers(forger))
    assert topic == "agui.bot.run-requests"
    assert HEADER_IDENTITY not in dict(headers)  # judged, and forwarded, as unattested
    assert warned(pair) == ["identity_unverified"]


def test_the_pair_rejects_a_forged_identity_as_unverified(edge, tmp_path):
    pair = make_pair(Verifier({edge.key_id: edge.public_key()}), (RULE,))
    forger = signer(edge.key_id, tmp_path / "..")
    topic, _ = judged(pair, request_headers(forger))
    assert topic == "agui.rejections"
    [reason] = rejected(pair)["reasons"]
    assert reason["code"] == "approver_unverified"
    assert "does not verify" in reason["detail"]
    assert warned(pair) == ["identity_unverified"]
    assert identities(pair, "unverified") == 1
    assert identities(pair, "verified") == 0


def test_the_pair_rejects_a_verified_identity_the_policy_does_not_name(edge):
    pair = make_pair(Verifier({edge.key_id: edge.public_key()}), (RULE,))
    topic, _ = judged(pair, request_headers(edge, Identity("bob", ("support",))))
    assert topic == "agui.rejections"
    [reason] = rejected(pair)["reasons"]
    assert reason["code"] == "approver_not_allowed"


def test_without_trusted_keys_identity_headers_are_not_believed(edge):
    record = InRecord("agui.bot.requests", 0, 0, 0, 1, b"t1", BODY, tuple(signed(edge)))
    caller = caller_of(record, None, "bot", None)
    assert caller.identity is None
    assert caller.unverified == "the gateway trusts no signing key"


# --- trusted keys from a file, reloaded when it changes ---------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def write_keys(path, keys: dict[str, str], toml: bool = False) -> None:
    import os

    if toml:
        path.write_text("".join(f'"{k}" = "{v}"\n' for k, v in keys.items()))
    else:
        path.write_text(json.dumps(keys))
    stamp = path.stat().st_mtime_ns + 1_000_000_000  # a change the file system can see
    os.utime(path, ns=(stamp, stamp))


def test_a_trusted_keys_file_rotates_keys_without_a_restart(edge, tmp_path, caplog):
    new = signer("edge-2026-02", tmp_path)
    keys = tmp_path / "trusted.json"
    write_keys(keys, {edge.key_id: edge.public_key()})
    clock = Clock()
    verifier = Verifier({}, keys, reload_s=5.0, clock=clock)
    old_record, new_record = signed(edge), signed(new)
    assert isinstance(verifier.verify(old_record, b"t1", BODY), Identity)
    assert isinstance(verifier.verify(new_record, b"t1", BODY), Unverified)
    # both trusted (TOML this time): seen at the next look, not before
    write_keys(keys, {edge.key_id: edge.public_key(), new.key_id: new.public_key()}, toml=True)
    clock.now = 4.0
    assert isinstance(verifier.verify(new_record, b"t1", BODY), Unverified)
    clock.now = 5.0
    assert isinstance(verifier.verify(new_record, b"t1", BODY), Identity)
    assert isinstance(verifier.verify(old_record, b"t1", BODY), Identity)
    # the old one dropped
    write_keys(keys, {new.key_id: new.public_key()})
    clock.now = 10.0
    assert isinstance(verifier.verify(old_record, b"t1", BODY), Unverified)
    # a broken file keeps the keys read before, and says so once per change
    write_keys(keys, {"k": "not a key"})
    with caplog.at_level("ERROR", logger="gateway.attestation"):
        clock.now = 15.0
        assert isinstance(verifier.verify(new_record, b"t1", BODY), Identity)
        clock.now = 20.0
        assert isinstance(verifier.verify(new_record, b"t1", BODY), Identity)
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert [r.getMessage() for r in errors] == [
        "trusted keys file not reloaded; keeping the keys read before"
    ]


def test_a_trusted_keys_file_that_cannot_be_read_at_start_is_an_error(tmp_path):
    with pytest.raises(AttestationError, match="trusted keys file"):
        Verifier({}, tmp_path / "absent.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(AttestationError, match="neither a JSON object nor TOML"):
        Verifier({}, bad)


# --- what the gateway says at start -------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "level", "says"),
    [
        ({}, "WARNING", "no approver policy (approvers): anyone who can publish"),
        ({"approvers": [{"agent": "bot"}]}, "WARNING", "no trusted keys"),
        (
            {"approvers": [{"agent": "bot"}], "attest_trusted_keys": {"k": "A" * 43 + "="}},
            "INFO",
            "approver policy",
        ),
    ],
)
def test_the_gateway_says_at_start_what_the_policy_leaves_open(caplog, settings, level, says):
    from gateway.kafka.runner import approver_warnings
    from gateway.settings import Settings

    with caplog.at_level("INFO", logger="gateway"):
        approver_warnings(Settings(**settings))
    [record] = [r for r in caplog.records if r.name.startswith("gateway")]
    assert record.levelname == level
    assert says in record.getMessage()


def test_a_request_rejected_unjudged_still_names_who_sent_it(edge):
    """agent_not_allowed (and events_lagging) are decided without judging; the decision
    names the verified sender all the same."""
    pair = make_pair(Verifier({edge.key_id: edge.public_key()}), (RULE,))
    decided = []
    original = pair.effects.decision

    def keep(r, record, decision, *rest, **named):
        decided.append(decision)
        return original(r, record, decision, *rest, **named)

    pair.effects.decision = keep  # type: ignore[method-assign]
    value = orjson.dumps(answer())
    headers = [
        (HEADER_CORRELATION_ID, b"c-1"),
        (HEADER_AGENT, b"someone-else"),
        *edge.headers(ALICE, b"someone-else", b"t1", b"c-1", value),
    ]
    f = Feed()
    pair.take("requests", [f.rec("requests", value, 30, headers=headers)])
    pair.set_fence(events_end=0)
    pair.process(events_position=0, mono_now=0.0, wall_ms=0)
    [decision] = decided
    assert [r.code for r in decision.reasons] == ["agent_not_allowed"]
    assert decision.identity is not None and decision.identity.subject == "alice"
