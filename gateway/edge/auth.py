"""The edge's door: who is calling, from a bearer token (JWT) verified with a JWKS.

With `edge_jwt_jwks_file` or `edge_jwt_jwks_url` set, every run request must carry
`Authorization: Bearer <JWT>`: its signature (by a key of the JWKS, with one of
`edge_jwt_algorithms`), its `iss` (`edge_jwt_issuer`), its `aud` (`edge_jwt_audience`)
and its `exp` (and `nbf`, `iat` when present, within `edge_jwt_leeway_s`) are checked by
joserfc. The identity is its `sub`, its groups or roles the `edge_jwt_groups_claim`
claim (a dotted path; a list of strings, or one space-separated string). A request that
fails is answered 401 with the reason; the token itself is never logged nor echoed.
The inbox (`gateway.inbox.auth`) verifies its people's tokens with this same verifier.

With `edge_client_certs` on, a TLS client certificate (verified by the handshake against
`edge_ssl_ca_certs`) is the caller's identity where no bearer token is given: its
subject's commonName, its organizationalUnitName values as groups, its issuer's
commonName as issuer (`cert_identity`).

Keys from a URL are fetched at start and again (at most every
`edge_jwks_min_refresh_s`) when a token names a key id the set does not hold, so an
identity provider's key rotation needs no restart of the edge.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from pathlib import Path
from typing import Any, NamedTuple

import httpx
from joserfc import jwt
from joserfc.errors import (
    BadSignatureError,
    ExpiredTokenError,
    InvalidClaimError,
    InvalidKeyIdError,
    JoseError,
    MissingClaimError,
    UnsupportedAlgorithmError,
)
from joserfc.jwk import KeySet

from gateway.core.values.identity import Identity
from gateway.settings import Settings

log = logging.getLogger("gateway.edge")

MAX_TOKEN_BYTES = 16_384
MAX_GROUPS = 256


class Unauthorized(Exception):
    """A request without a token the edge accepts: `detail` says why (no secret)."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class Verified(NamedTuple):
    """A verified token's identity and its expiry (`exp`, epoch seconds)."""

    identity: Identity
    expires_at: int


class JwksError(RuntimeError):
    """Keys that cannot be loaded (at start: the edge does not start)."""


def enabled(settings: Settings) -> bool:
    """Whether the edge verifies callers' tokens."""
    return settings.edge_jwt_jwks_file is not None or settings.edge_jwt_jwks_url is not None


def _key_set(document: Any, where: str) -> KeySet:
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise JwksError(f"{where} is not a JWKS (an object with a list of keys)")
    try:
        return KeySet.import_key_set(document)  # type: ignore[arg-type]
    except (JoseError, ValueError, TypeError) as exc:
        raise JwksError(f"{where} holds a key that cannot be used: {exc}") from None


class TokenVerifier:
    """Verifies bearer tokens against the settings' issuer, audience and keys."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        if not settings.edge_jwt_issuer or not settings.edge_jwt_audience:
            raise JwksError("edge_jwt_issuer and edge_jwt_audience are needed to verify tokens")
        self.issuer: str = settings.edge_jwt_issuer
        self.audience: str = settings.edge_jwt_audience
        self.keys: KeySet | None = None
        self._fetched_at = -1e9
        if settings.edge_jwt_jwks_file is not None:
            self.keys = self._read_file(settings.edge_jwt_jwks_file)

    @staticmethod
    def _read_file(path: Path) -> KeySet:
        try:
            document = json.loads(path.read_bytes())
        except (OSError, ValueError) as exc:
            raise JwksError(f"the JWKS file {str(path)!r} cannot be read: {exc}") from None
        return _key_set(document, f"the JWKS file {str(path)!r}")

    async def start(self) -> None:
        """Fetch the keys of a JWKS URL (a file was read already)."""
        if self.settings.edge_jwt_jwks_url is not None:
            self.keys = await self._fetch()

    async def _fetch(self) -> KeySet:
        url = self.settings.edge_jwt_jwks_url
        assert url is not None
        self._fetched_at = time.monotonic()
        try:
            async with httpx.AsyncClient(timeout=10.0) as http:
                response = await http.get(url)
                response.raise_for_status()
                document = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise JwksError(f"the JWKS at {url!r} cannot be fetched: {exc!r}") from None
        return _key_set(document, f"the JWKS at {url!r}")

    async def _refresh_for(self, kid: Any) -> bool:
        """Fetch the URL's keys again when a token names a key id not held (rate-limited)."""
        s = self.settings
        if s.edge_jwt_jwks_url is None or not isinstance(kid, str) or self.keys is None:
            return False
        if any(key.kid == kid for key in self.keys.keys):
            return False
        if time.monotonic() - self._fetched_at < s.edge_jwks_min_refresh_s:
            return False
        try:
            self.keys = await self._fetch()
        except JwksError as exc:
            log.warning("JWKS refresh failed", extra={"error": str(exc)})
            return False
        return True

    async def identity(self, authorization: str | None) -> Identity:
        """The caller's identity from an Authorization header; Unauthorized if none."""
        return (await self.verify(authorization)).identity

    async def verify(self, authorization: str | None) -> Verified:
        """The caller's identity and its token's expiry from an Authorization header;
        Unauthorized if none (the inbox keeps a browser session no longer than `exp`)."""
        if not authorization:
            raise Unauthorized("no bearer token (Authorization: Bearer <JWT>)")
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthorized("the Authorization header is not a bearer token")
        if len(token) > MAX_TOKEN_BYTES:
            raise Unauthorized(f"the token is over {MAX_TOKEN_BYTES} bytes")
        try:
            return self._verify(token)
        except Unauthorized as exc:
            if exc.detail.startswith("unknown key") and await self._refresh_for(_kid_of(token)):
                return self._verify(token)
            raise

    def _verify(self, token: str) -> Verified:
        s = self.settings
        assert self.keys is not None, "the verifier is not started"
        try:
            decoded = jwt.decode(token, self.keys, algorithms=s.edge_jwt_algorithms)
        except BadSignatureError:
            raise Unauthorized("the token's signature does not verify") from None
        except InvalidKeyIdError:
            raise Unauthorized(
                f"unknown key: the token names key id {_shown(_kid_of(token))}, which the "
                "JWKS does not hold"
            ) from None
        except UnsupportedAlgorithmError:
            raise Unauthorized(
                f"the token's algorithm is not one this edge accepts ({', '.join(s.edge_jwt_algorithms)})"
            ) from None
        except JoseError as exc:
            raise Unauthorized(f"the token cannot be read ({exc.__class__.__name__})") from None
        except ValueError as exc:
            raise Unauthorized(f"the token cannot be read ({exc.__class__.__name__})") from None
        registry = jwt.JWTClaimsRegistry(
            leeway=int(s.edge_jwt_leeway_s),
            iss={"essential": True, "value": self.issuer},
            aud={"essential": True, "value": self.audience},
            exp={"essential": True},
            sub={"essential": True},
        )
        try:
            registry.validate(decoded.claims)
        except ExpiredTokenError:
            raise Unauthorized("the token has expired") from None
        except MissingClaimError as exc:
            raise Unauthorized(f"the token lacks a claim: {exc.description}") from None
        except InvalidClaimError as exc:
            claim = getattr(exc, "claim", "")
            if claim in ("nbf", "iat"):
                raise Unauthorized(f"the token is not valid yet ({exc.description})") from None
            names = {"aud": "audience", "iss": "issuer"}
            raise Unauthorized(
                f"the token's {names.get(claim, claim or 'claims')} is not the one this edge "
                f"accepts ({exc.description})"
            ) from None
        except JoseError as exc:
            raise Unauthorized(f"the token's claims are not accepted: {exc.description}") from None
        claims = decoded.claims
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            raise Unauthorized("the token's sub is not a string")
        identity = Identity(subject, _groups(claims, s.edge_jwt_groups_claim), str(claims["iss"]))
        expires = claims["exp"]
        if not isinstance(expires, int | float) or isinstance(expires, bool):
            raise Unauthorized("the token's exp is not a number")
        return Verified(identity, int(expires))


def cert_identity(peer: Any) -> Identity:
    """The identity a verified client certificate names (ssl's getpeercert() form)."""
    subject = _rdn(peer.get("subject", ()) if isinstance(peer, dict) else ())
    issuer = _rdn(peer.get("issuer", ()) if isinstance(peer, dict) else ())
    names = subject.get("commonName", [])
    if not names:
        raise Unauthorized("the client certificate's subject has no commonName")
    groups = tuple(subject.get("organizationalUnitName", []))[:MAX_GROUPS]
    return Identity(names[0], groups, (issuer.get("commonName") or [""])[0])


def _rdn(name: Any) -> dict[str, list[str]]:
    """A distinguished name's attributes: name -> values, in order."""
    found: dict[str, list[str]] = {}
    for rdn in name or ():
        for pair in rdn:
            if isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[1], str):
                found.setdefault(str(pair[0]), []).append(pair[1])
    return found


def _groups(claims: dict[str, Any], path: str) -> tuple[str, ...]:
    """The groups or roles at `path` (dotted) in the claims; () when absent."""
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, dict):
            return ()
        value = value.get(part)
    if isinstance(value, str):
        value = value.split()
    if not isinstance(value, list):
        return ()
    return tuple(g for g in value if isinstance(g, str))[:MAX_GROUPS]


def _kid_of(token: str) -> Any:
    """The `kid` of a token's (unverified) header, for messages and refreshes only."""
    head = token.split(".", 1)[0]
    try:
        header = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    except (ValueError, UnicodeDecodeError):
        return None
    return header.get("kid") if isinstance(header, dict) else None


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return json.dumps(text if len(text) <= 64 else text[:61] + "...")
