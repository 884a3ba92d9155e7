"""Who is asking the inbox: the inbox token, a person's JWT, or a browser session.

One authorizer for the page and the JSON API (`Authorizer.authorize`):

- `Authorization: Bearer <inbox_token>` (constant time): an operator's or a service's
  credential, with no person's identity (`Principal.identity` None);
- `Authorization: Bearer <JWT>`, where the edge's token settings are set
  (`edge_jwt_jwks_file` or `edge_jwt_jwks_url`, `edge_jwt_issuer`, `edge_jwt_audience`,
  ...): verified by the edge's own verifier (`gateway.edge.auth.TokenVerifier`: its
  signature, issuer, audience, expiry, the groups claim), a person's identity;
- the session cookie the sign-in sets (`gateway.inbox.session`): the token's (an HMAC
  under the token, as before) or a person's (`gateway.inbox.cookie`: the identity the
  JWT proved, sealed, until the token's `exp`);
- anything, with `inbox_open` (no identity).

A bearer header, when given, decides (a wrong one is refused, whatever cookie comes
with it). A refusal says why (`Refused.detail`), never echoing a credential.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from starlette.requests import Request

from gateway.core.values.identity import Identity
from gateway.edge import auth as edge_auth
from gateway.edge.auth import TokenVerifier, Unauthorized
from gateway.inbox import cookie
from gateway.settings import Settings

log = logging.getLogger("gateway.inbox.auth")

COOKIE = "agui-inbox-session"
TOKEN_LABEL = b"agui-gateway inbox session v1"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who was let in: a verified `identity` (a person's JWT, or their session), or None
    (the inbox token, or `inbox_open`); `via` says how ("token", "jwt", "session",
    "open"); `expires_at` a session's end (epoch seconds), when it has one."""

    identity: Identity | None
    via: str
    expires_at: int | None = None


@dataclass(frozen=True, slots=True)
class Refused:
    """Not let in, and why (no secret in it). False, so that `if not await authorize(r)`
    reads as it says."""

    detail: str

    def __bool__(self) -> bool:
        return False


@dataclass(frozen=True, slots=True)
class SignedIn:
    """A sign-in that succeeded: who, and the cookie to set (its value, its Max-Age:
    None for the browser's session)."""

    principal: Principal
    value: str
    max_age: int | None


def session_value(token: bytes) -> str:
    """The token session's cookie value: an HMAC of a fixed label under the token, never
    the token (changing `inbox_token` ends these sessions)."""
    return hmac.new(token, TOKEN_LABEL, hashlib.sha256).hexdigest()


class Authorizer:
    """The settings' authorizer: the inbox token, a JWT verified as the edge verifies it,
    or a session cookie."""

    def __init__(self, settings: Settings, clock: Callable[[], float] = time.time) -> None:
        secret = settings.inbox_token
        self._token = secret.get_secret_value().encode() if secret is not None else b""
        self._token_cookie = session_value(self._token).encode() if self._token else b""
        self.open = settings.inbox_open
        self.clock = clock
        self.settings = settings
        # a JWKS file is read here (a broken one stops the start, as at the edge)
        self.tokens = TokenVerifier(settings) if edge_auth.enabled(settings) else None
        self._key, self.key_source = cookie.session_key(settings.attest_private_key_file)
        self._keys_lock = asyncio.Lock()
        self._keys_tried = -1e9

    @property
    def has_token(self) -> bool:
        return bool(self._token)

    @property
    def verifies_people(self) -> bool:
        """Whether people sign in with a JWT (the edge's token settings are set)."""
        return self.tokens is not None

    async def start(self) -> None:
        """Fetch the keys of a JWKS URL now (a failure is logged: tried again when a
        token comes, at most every `edge_jwks_min_refresh_s`)."""
        await self._keys_ready()

    async def _keys_ready(self) -> str | None:
        """None when the verifier holds keys; else why not (after trying to fetch them)."""
        if self.tokens is None or self.tokens.keys is not None:
            return None
        async with self._keys_lock:
            if self.tokens.keys is not None:
                return None
            now = time.monotonic()
            if now - self._keys_tried >= self.settings.edge_jwks_min_refresh_s:
                self._keys_tried = now
                try:
                    await self.tokens.start()
                except edge_auth.JwksError as exc:
                    log.error("the inbox cannot fetch the JWKS", extra={"error": str(exc)})
            if self.tokens.keys is None:
                return "the identity provider's keys (edge_jwt_jwks_url) could not be fetched"
        return None

    async def _jwt(self, token: str) -> edge_auth.Verified | Refused:
        assert self.tokens is not None
        problem = await self._keys_ready()
        if problem is not None:
            return Refused(problem)
        try:
            return await self.tokens.verify(f"Bearer {token}")
        except Unauthorized as exc:
            return Refused(exc.detail)

    def _is_token(self, given: str) -> bool:
        return bool(self._token) and hmac.compare_digest(given.encode(), self._token)

    async def authorize(self, request: Request) -> Principal | Refused:
        """Who the request comes from, or why it is refused."""
        if self.open:
            return Principal(None, "open")
        authorization = request.headers.get("authorization")
        if authorization is not None:
            scheme, _, given = authorization.strip().partition(" ")
            given = given.strip()
            if scheme.lower() != "bearer" or not given:
                return Refused("the Authorization header is not a bearer token")
            if self._is_token(given):
                return Principal(None, "token")
            if self.tokens is None:
                return Refused("the bearer token is not the inbox token")
            verified = await self._jwt(given)
            if isinstance(verified, Refused):
                return verified
            return Principal(verified.identity, "jwt", verified.expires_at)
        value = request.cookies.get(COOKIE)
        if value is not None:
            return self._session(value)
        if not self._token and self.tokens is None:
            return Refused("no inbox_token nor identity provider is configured: nobody may in")
        return Refused("a bearer token or a session (sign in at /inbox/login) is required")

    def _session(self, value: str) -> Principal | Refused:
        if self._token_cookie and hmac.compare_digest(value.encode(), self._token_cookie):
            return Principal(None, "token")
        if not value.startswith(cookie.PREFIX):
            return Refused("the session is no longer valid: sign in again")
        try:
            identity, expires = cookie.unseal(self._key, value, self.clock())
        except ValueError as exc:
            return Refused(str(exc))
        return Principal(identity, "session", expires)

    async def sign_in(self, given: str) -> SignedIn | Refused:
        """What a browser gets for the credential it typed: the inbox token's session, or
        a person's for a JWT (sealed, until the token's exp); or why not."""
        if not self._token and self.tokens is None:
            return Refused(
                "No inbox token (inbox_token) nor identity provider (edge_jwt_jwks_file or "
                "edge_jwt_jwks_url) is configured: nobody can sign in."
            )
        if self._is_token(given):
            return SignedIn(Principal(None, "token"), self._token_cookie.decode(), None)
        if self.tokens is None or given.count(".") != 2:
            return Refused("Wrong token.")
        verified = await self._jwt(given)
        if isinstance(verified, Refused):
            return verified
        now = self.clock()
        left = int(verified.expires_at - now)
        if left <= 0:
            return Refused("the token has expired")
        try:
            value = cookie.seal(self._key, verified.identity, verified.expires_at)
        except cookie.TooLarge as exc:
            return Refused(str(exc))
        principal = Principal(verified.identity, "session", verified.expires_at)
        return SignedIn(principal, value, left)
