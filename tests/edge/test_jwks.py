"""Bearer tokens verified with keys from a JWKS URL (served here over real HTTP): fetched
at start, fetched again when a token names a key id the set does not hold (the identity
provider rotated), never more often than edge_jwks_min_refresh_s; every refusal says why."""

from __future__ import annotations

import json
import time

import pytest
from joserfc import jwt
from joserfc.jwk import ECKey, KeySet
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.edge.auth import JwksError, TokenVerifier, Unauthorized
from gateway.settings import Settings
from tests.bridge.agents import Served

ISSUER = "https://idp.example"
AUDIENCE = "agui-edge"


def token(key: ECKey, **claims: object) -> str:
    now = int(time.time())
    body = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "exp": now + 300}
    body.update(claims)
    return jwt.encode({"alg": "ES256", "kid": key.kid}, body, key)


class Idp:
    """An identity provider's JWKS endpoint whose keys the test changes."""

    def __init__(self, *keys: ECKey) -> None:
        self.keys = list(keys)
        self.fetches = 0

    def app(self) -> Starlette:
        async def jwks(request: Request) -> JSONResponse:
            self.fetches += 1
            return JSONResponse(KeySet(self.keys).as_dict(private=False))

        return Starlette(routes=[Route("/jwks", jwks)])


def verifier(url: str, refresh_s: float = 0.0) -> TokenVerifier:
    return TokenVerifier(
        Settings(
            edge_jwt_jwks_url=url,
            edge_jwt_issuer=ISSUER,
            edge_jwt_audience=AUDIENCE,
            edge_jwks_min_refresh_s=refresh_s,
        )
    )


async def test_keys_from_a_url_follow_the_providers_rotation() -> None:
    first = ECKey.generate_key("P-256", parameters={"kid": "k1"})
    second = ECKey.generate_key("P-256", parameters={"kid": "k2"})
    idp = Idp(first)
    async with Served(idp.app()) as served:
        tokens = verifier(served.url + "jwks")
        await tokens.start()
        assert idp.fetches == 1
        alice = await tokens.identity("Bearer " + token(first, groups=["approvers"]))
        assert (alice.subject, alice.groups, alice.issuer) == ("alice", ("approvers",), ISSUER)
        assert idp.fetches == 1  # a known key: no fetch
        idp.keys = [first, second]  # the provider rotates
        bob = await tokens.identity("Bearer " + token(second, sub="bob"))
        assert bob.subject == "bob"
        assert idp.fetches == 2
        stranger = ECKey.generate_key("P-256", parameters={"kid": "k9"})
        with pytest.raises(Unauthorized, match='unknown key: the token names key id "k9"'):
            await tokens.identity("Bearer " + token(stranger))
        assert idp.fetches == 3


async def test_a_refresh_is_not_made_more_often_than_the_floor() -> None:
    first = ECKey.generate_key("P-256", parameters={"kid": "k1"})
    idp = Idp(first)
    async with Served(idp.app()) as served:
        tokens = verifier(served.url + "jwks", refresh_s=3600)
        await tokens.start()
        stranger = ECKey.generate_key("P-256", parameters={"kid": "k9"})
        for _ in range(5):  # a caller sending tokens of unknown keys cannot make it fetch
            with pytest.raises(Unauthorized, match="unknown key"):
                await tokens.identity("Bearer " + token(stranger))
        assert idp.fetches == 1


async def test_a_jwks_url_that_cannot_be_fetched_stops_the_start() -> None:
    idp = Idp()
    async with Served(idp.app()) as served:
        with pytest.raises(JwksError, match="cannot be fetched"):
            await verifier(served.url + "missing").start()


@pytest.mark.parametrize(
    ("header", "says"),
    [
        (None, "no bearer token"),
        ("Basic abc", "not a bearer token"),
        ("Bearer not-a-jwt", "cannot be read"),
        ("Bearer " + "a" * 20_000, "over 16384 bytes"),
    ],
)
async def test_what_is_not_a_token_is_refused_with_its_reason(tmp_path, header, says) -> None:
    key = ECKey.generate_key("P-256", parameters={"kid": "k1"})
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(KeySet([key]).as_dict(private=False)))
    tokens = TokenVerifier(
        Settings(edge_jwt_jwks_file=jwks, edge_jwt_issuer=ISSUER, edge_jwt_audience=AUDIENCE)
    )
    with pytest.raises(Unauthorized, match=says):
        await tokens.identity(header)


@pytest.mark.parametrize(
    ("claims", "says"),
    [
        ({"nbf": int(time.time()) + 3600}, "not valid yet"),
        ({"iat": int(time.time()) + 3600}, "not valid yet"),
        ({"aud": ["another", "other"]}, "audience is not the one"),
        ({"iss": "https://elsewhere"}, "issuer is not the one"),
        ({"exp": int(time.time()) - 3600}, "has expired"),
        ({"sub": None}, "lacks a claim"),
    ],
)
async def test_claims_are_checked_each_with_its_reason(tmp_path, claims, says) -> None:
    key = ECKey.generate_key("P-256", parameters={"kid": "k1"})
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(KeySet([key]).as_dict(private=False)))
    tokens = TokenVerifier(
        Settings(edge_jwt_jwks_file=jwks, edge_jwt_issuer=ISSUER, edge_jwt_audience=AUDIENCE)
    )
    body = {k: v for k, v in claims.items() if v is not None}
    signed = token(key, **body)
    if claims.get("sub", "") is None:
        now = int(time.time())
        signed = jwt.encode(
            {"alg": "ES256", "kid": "k1"}, {"iss": ISSUER, "aud": AUDIENCE, "exp": now + 60}, key
        )
    with pytest.raises(Unauthorized, match=says):
        await tokens.identity("Bearer " + signed)
    # an audience list naming this edge is accepted
    ok = await tokens.identity("Bearer " + token(key, aud=["another", AUDIENCE]))
    assert ok.subject == "alice"


async def test_a_token_of_an_algorithm_not_accepted_is_refused_as_such(tmp_path) -> None:
    key = ECKey.generate_key("P-256", parameters={"kid": "k1"})
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(KeySet([key]).as_dict(private=False)))
    tokens = TokenVerifier(
        Settings(
            edge_jwt_jwks_file=jwks,
            edge_jwt_issuer=ISSUER,
            edge_jwt_audience=AUDIENCE,
            edge_jwt_algorithms=["RS256"],
        )
    )
    with pytest.raises(Unauthorized, match="algorithm is not one this edge accepts"):
        await tokens.identity("Bearer " + token(key))
