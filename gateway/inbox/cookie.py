"""A person's browser session: who signed in with a verified token, until when, sealed.

A person who signs in to the inbox with a JWT (`gateway.inbox.auth`) gets a cookie that
carries the identity the token proved (subject, groups, issuer) and the token's expiry,
as `v2.<payload>.<mac>`: the payload is base64url JSON, the mac an HMAC-SHA256 of a
label and the payload under a key the server keeps (`session_key`). A cookie whose
identity or expiry was changed does not verify; one past its expiry is refused. The
token itself is never kept: the cookie holds no secret (its subject and groups are
readable by whoever holds it, as they are in the token).

The key (`session_key`):

- with a signing key (`attest_private_key_file`), derived from it (HKDF-SHA256 under a
  label of its own): whoever holds that key can already sign any identity onto a
  request, so deriving from it gives nobody more; sessions survive a restart and are
  good at every inbox that shares the key (behind a load balancer), and rotating the
  key signs every person out;
- without one, a random key made at start: sessions end when the process does (and are
  good at that process only). Such an inbox cannot attest answers anyway.

Never from `inbox_token`: the token is a credential without a person's identity, and
whoever holds it could otherwise mint a session claiming anyone.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from pathlib import Path

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from gateway.core.values.identity import Identity
from gateway.kafka.wire.attestation import private_key, read_identity

PREFIX = "v2."
LABEL = b"agui-gateway inbox identity session v2\x00"
KEY_INFO = b"agui-gateway inbox session key v1"
# A browser keeps cookies up to 4,096 bytes (name and attributes included): a session
# whose identity does not fit is refused at sign-in, never cut (fewer groups would be
# another identity).
MAX_VALUE = 3_800


class TooLarge(ValueError):
    """An identity too large to keep in a cookie."""


def session_key(private_key_file: Path | None) -> tuple[bytes, str]:
    """The key that seals sessions, and where it comes from (for the start's log)."""
    if private_key_file is None:
        return secrets.token_bytes(32), "a random key made at start (sessions end with it)"
    raw = private_key(private_key_file).private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=KEY_INFO).derive(raw)
    return derived, "derived from the signing key (attest_private_key_file)"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)


def _mac(key: bytes, payload: str) -> bytes:
    return hmac.new(key, LABEL + payload.encode(), hashlib.sha256).digest()


def seal(key: bytes, identity: Identity, expires_at: int) -> str:
    """The cookie's value for `identity` until `expires_at` (epoch seconds); TooLarge
    when it would not fit in a cookie."""
    doc = {
        "exp": expires_at,
        "groups": list(identity.groups),
        "issuer": identity.issuer,
        "subject": identity.subject,
    }
    payload = _b64(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())
    value = f"{PREFIX}{payload}.{_b64(_mac(key, payload))}"
    if len(value) > MAX_VALUE:
        raise TooLarge(
            f"the identity (its subject and {len(identity.groups)} groups) is too large to "
            "keep in a browser session; use the bearer header instead"
        )
    return value


def unseal(key: bytes, value: str, now: float) -> tuple[Identity, int]:
    """The identity and expiry a cookie's value holds; ValueError (why) when it was not
    sealed with `key`, was changed, or has expired."""
    if not value.startswith(PREFIX) or len(value) > MAX_VALUE:
        raise ValueError("not a session of this inbox")
    payload, _, mac = value[len(PREFIX) :].partition(".")
    try:
        given = _unb64(mac)
    except (binascii.Error, ValueError):
        raise ValueError("the session's seal is not base64url") from None
    if not hmac.compare_digest(given, _mac(key, payload)):
        raise ValueError("the session's seal does not verify (changed, or sealed elsewhere)")
    try:
        doc = json.loads(_unb64(payload))
    except (binascii.Error, ValueError):
        raise ValueError("the session cannot be read") from None
    expires = doc.get("exp") if isinstance(doc, dict) else None
    if not isinstance(expires, int) or isinstance(expires, bool):
        raise ValueError("the session has no expiry")
    if now >= expires:
        raise ValueError("the session has expired (its token's exp): sign in again")
    identity = read_identity(json.dumps({k: v for k, v in doc.items() if k != "exp"}).encode())
    return identity, expires
