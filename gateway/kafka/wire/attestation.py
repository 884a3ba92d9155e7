"""An identity attested on a request record: Ed25519 signatures in three headers.

The edge (and any service through `GatewayClient`) writes, beside the request's bytes:

- `agui-identity`: the identity as compact JSON, keys sorted: `{"groups": [...],
  "issuer": "...", "subject": "..."}`;
- `agui-identity-key`: the id of the key that signed it;
- `agui-identity-signature`: the Ed25519 signature (base64url, no padding) over
  `signed_bytes`: a version tag, the key id, the identity's JSON, the record's agent
  header, key (threadId) and correlation id, and the SHA-256 of its value, each
  length-prefixed. A signature lifted onto another request, thread, agent or
  correlation id, or kept beside an edited body, does not verify.

The gateway's shell verifies against its trusted public keys (`trustedkeys.py`: several
at once, so a key is rotated by trusting the new one before signing with it): a verified identity
is handed to the core; headers that do not verify are never trusted, and why is
said (`Unverified`). Asymmetric keys let a service sign as itself without holding a
secret that would let it sign as the edge, and the gateway holds no secret at all.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import struct
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gateway.codec.records import HEADER_AGENT, HEADER_CORRELATION_ID, InRecord
from gateway.core.values.decision import Caller
from gateway.core.values.identity import Identity
from gateway.kafka.wire.trustedkeys import AttestationError, TrustedKeys, public_key

__all__ = ["AttestationError", "Signer", "Unverified", "Verifier", "caller_of", "public_key"]

HEADER_IDENTITY = "agui-identity"
HEADER_IDENTITY_KEY = "agui-identity-key"
HEADER_IDENTITY_SIGNATURE = "agui-identity-signature"
ATTESTATION_HEADERS = (HEADER_IDENTITY, HEADER_IDENTITY_KEY, HEADER_IDENTITY_SIGNATURE)
_VERSION = b"agui-identity/1"
# Headers a signature covers, or that carry it: each must be there at most once.
_SIGNED_HEADERS = frozenset((*ATTESTATION_HEADERS, HEADER_AGENT, HEADER_CORRELATION_ID))
# An identity header beyond this is not read (a subject and its groups fit well within).
MAX_IDENTITY_BYTES = 16_384
MAX_GROUPS = 256


@dataclass(frozen=True, slots=True)
class Unverified:
    """Identity headers the gateway does not trust, and why (no secret in it)."""

    detail: str


def identity_json(identity: Identity) -> bytes:
    """The identity's header value: compact JSON, keys sorted (what is signed)."""
    doc = {"groups": list(identity.groups), "issuer": identity.issuer, "subject": identity.subject}
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def read_identity(data: bytes, signer: str = "") -> Identity:
    """An identity from its header value; ValueError when it is not one."""
    if len(data) > MAX_IDENTITY_BYTES:
        raise ValueError(f"the identity header is over {MAX_IDENTITY_BYTES} bytes")
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"the identity header is not JSON ({exc.__class__.__name__})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("subject"), str) or not doc["subject"]:
        raise ValueError("the identity header has no subject")
    groups = doc.get("groups", [])
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise ValueError("the identity header's groups are not a list of strings")
    if len(groups) > MAX_GROUPS:
        raise ValueError(f"the identity header names over {MAX_GROUPS} groups")
    issuer = doc.get("issuer", "")
    if not isinstance(issuer, str):
        raise ValueError("the identity header's issuer is not a string")
    return Identity(doc["subject"], tuple(groups), issuer, signer)


def signed_bytes(
    key_id: bytes,
    identity: bytes,
    agent: bytes | None,
    key: bytes | None,
    correlation_id: bytes | None,
    value: bytes | None,
) -> bytes:
    """What a signature covers: every part length-prefixed, so none can be moved into
    another; the value by its SHA-256."""
    parts = [_VERSION, key_id, identity, agent, key, correlation_id]
    out = bytearray()
    for part in parts:
        if part is None:
            out += b"\xff\xff\xff\xff"  # absent, told apart from empty
        else:
            out += struct.pack(">I", len(part)) + part
    out += hashlib.sha256(value or b"").digest()
    return bytes(out)


def _b64(data: bytes) -> bytes:
    return base64.urlsafe_b64encode(data).rstrip(b"=")


def _unb64(data: bytes) -> bytes:
    return base64.b64decode(data + b"=" * (-len(data) % 4), altchars=b"-_", validate=True)


def private_key(path: Path | str) -> Ed25519PrivateKey:
    """The Ed25519 private key of a PEM (PKCS#8) file; AttestationError saying why not
    (never the key)."""
    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise AttestationError(
            f"the signing key file {str(path)!r} cannot be read as a PEM private key "
            f"({exc.__class__.__name__})"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise AttestationError(f"the signing key in {str(path)!r} is not an Ed25519 key")
    return key


class Signer:
    """Signs identities onto request records with one private key, under its key id."""

    def __init__(self, key_id: str, private_key: Ed25519PrivateKey) -> None:
        if not key_id:
            raise AttestationError("a signing key needs a key id")
        self.key_id = key_id
        self._key = private_key

    @classmethod
    def from_file(cls, key_id: str, path: Path | str) -> Signer:
        """A signer from a PEM (PKCS#8) Ed25519 private key file."""
        return cls(key_id, private_key(path))

    def public_key(self) -> str:
        """The public key to give the gateway (`attest_trusted_keys`): base64 of its 32 bytes."""
        raw = self._key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        return base64.b64encode(raw).decode()

    def headers(
        self,
        identity: Identity,
        agent: bytes | None,
        key: bytes | None,
        correlation_id: bytes | None,
        value: bytes | None,
    ) -> list[tuple[str, bytes]]:
        """The three headers that attest `identity` on a record of these parts."""
        ident = identity_json(identity)
        if len(ident) > MAX_IDENTITY_BYTES:
            raise AttestationError(f"the identity is over {MAX_IDENTITY_BYTES} bytes as JSON")
        kid = self.key_id.encode()
        signature = self._key.sign(signed_bytes(kid, ident, agent, key, correlation_id, value))
        return [
            (HEADER_IDENTITY, ident),
            (HEADER_IDENTITY_KEY, kid),
            (HEADER_IDENTITY_SIGNATURE, _b64(signature)),
        ]


class Verifier:
    """Verifies attested identities against the trusted public keys, by key id
    (`TrustedKeys`: the settings' and, optionally, a file's, read again as it changes)."""

    def __init__(
        self,
        trusted: Mapping[str, str],
        key_file: Path | None = None,
        reload_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.keys = TrustedKeys(trusted, key_file, reload_s, clock)

    def verify(
        self,
        headers: Iterable[tuple[str, bytes | None]],
        key: bytes | None,
        value: bytes | None,
    ) -> Identity | Unverified | None:
        """The identity a record's headers attest: an `Identity` when its signature
        verifies with a trusted key, `Unverified` (why) when identity headers are there
        but do not verify, None when the record carries none."""
        found: dict[str, bytes | None] = {}
        for name, data in headers:
            if name in found and name in _SIGNED_HEADERS:
                # which one the gateway acts on and which one was signed could differ
                return Unverified(f"the record carries header {name} twice")
            found[name] = bytes(data) if data is not None else None
        present = [h for h in ATTESTATION_HEADERS if found.get(h) is not None]
        if not present:
            return None
        missing = [h for h in ATTESTATION_HEADERS if found.get(h) is None]
        if missing:
            return Unverified(f"its identity headers lack {', '.join(missing)}")
        ident, kid, sig = (found[h] for h in ATTESTATION_HEADERS)
        assert ident is not None and kid is not None and sig is not None
        try:
            key_id = kid.decode()
        except UnicodeDecodeError:
            return Unverified("its identity key id is not UTF-8")
        public = self.keys.get(key_id)
        if public is None:
            return Unverified(f"its identity is signed with key {_shown(key_id)}, not trusted")
        try:
            signature = _unb64(sig)
        except (binascii.Error, ValueError):
            return Unverified("its identity signature is not base64url")
        message = signed_bytes(
            kid, ident, found.get(HEADER_AGENT), key, found.get(HEADER_CORRELATION_ID), value
        )
        try:
            public.verify(signature, message)
        except InvalidSignature:
            return Unverified(
                f"its identity's signature (key {_shown(key_id)}) does not verify over this "
                "request, thread, agent and correlation id"
            )
        try:
            return read_identity(ident, key_id)
        except ValueError as exc:
            return Unverified(f"its signed identity cannot be read: {exc}")


def _shown(text: str) -> str:
    """A key id for a message: quoted, at most 64 characters."""
    clipped = text if len(text) <= 64 else text[:61] + "..."
    return json.dumps(clipped)


def generate_key() -> tuple[bytes, str]:
    """A new Ed25519 key: (the private key as PEM PKCS#8, the public key as base64)."""
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return pem, Signer("new", private).public_key()


def forwarded_json(identity: Identity) -> bytes:
    """The `agui-identity` header the gateway writes on a forward (its own topic, so not
    signed): the identity's JSON and the key id it was verified with (`signer`)."""
    doc = {
        "groups": list(identity.groups),
        "issuer": identity.issuer,
        "signer": identity.signer,
        "subject": identity.subject,
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def parse_forwarded(data: Any) -> Identity | None:
    """The identity on a forward's `agui-identity` header, or None when absent or
    unreadable."""
    if not isinstance(data, bytes | bytearray):
        return None
    try:
        identity = read_identity(bytes(data))
        signer = json.loads(data).get("signer", "")
    except ValueError:
        return None
    return Identity(
        identity.subject,
        identity.groups,
        identity.issuer,
        signer if isinstance(signer, str) else "",
    )


def caller_of(record: InRecord, verifier: Verifier | None, agent: str, group: str | None) -> Caller:
    """Who sent `record`, for `agent` (of `group`'s topics): the identity its headers
    attest when a trusted key signed them; else unattested, saying why headers that were
    there are not trusted."""
    if verifier is None:
        if record.header_bytes(HEADER_IDENTITY) is not None:
            return Caller(None, "the gateway trusts no signing key", agent, group)
        return Caller(None, None, agent, group)
    found = verifier.verify(record.headers, record.key, record.value)
    if isinstance(found, Unverified):
        return Caller(None, found.detail, agent, group)
    return Caller(found, None, agent, group)
