"""Signing in to the inbox from a browser: a credential given once, kept as a cookie.

A browser sends no `Authorization` header when it navigates or opens an EventSource,
so a bearer token alone would leave the page unusable (unless a proxy in front adds
one). `GET /inbox/login` asks for the inbox token or a person's JWT; `POST /inbox/login`
checks it (`gateway.inbox.auth`) and sets the session cookie (`HttpOnly`,
`SameSite=Strict`, `Path=/`, `Secure` over https), then goes on to the page:

- for the inbox token, an HMAC-SHA256 of a fixed label under the token (it opens the
  inbox only while that token is the configured one; a stolen cookie does not reveal
  it), for the browser's session;
- for a JWT verified as the edge verifies it, the identity it proved, sealed under the
  server's key (`gateway.inbox.cookie`), with the token's expiry as the cookie's
  `Max-Age` and as the server's own check. The JWT is never kept.

`POST /inbox/logout` clears it. Neither a credential nor the cookie's value is ever
logged or echoed; a person's sign-in logs their subject.
"""

from __future__ import annotations

import html
import logging
from urllib.parse import parse_qsl, quote

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from gateway.inbox.auth import COOKIE, Authorizer, Principal, Refused, SignedIn, session_value
from gateway.settings import Settings

__all__ = ["COOKIE", "Session", "session_value"]

log = logging.getLogger("gateway.inbox.session")

MAX_BODY = 16_384  # a login form: one field
LOGIN = "/inbox/login"
HOME = "/inbox"
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _local(target: str) -> str:
    """Where to go after signing in: a path of the inbox, else the inbox itself (never
    another site: no `//host` or scheme)."""
    if target.startswith(HOME) and not target.startswith("//") and "\\" not in target:
        return target
    return HOME


def _same_origin(request: Request) -> bool:
    """A form of this site, or no browser at all. A form posted from a page served with
    `Referrer-Policy: no-referrer` (the inbox's) carries `Origin: null`, so the browser's
    `Sec-Fetch-Site` decides where it sends one; the `Origin` otherwise."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site == "same-origin"
    origin = request.headers.get("origin")
    if origin is None:
        return True
    host = request.headers.get("host", "")
    return origin in (f"http://{host}", f"https://{host}")


def _form(root: str, target: str, problem: str = "", people: bool = False) -> str:
    note = f'<p role="alert"><strong>{html.escape(problem)}</strong></p>' if problem else ""
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>Sign in: interrupt inbox</title></head><body>"
        "<h1>Interrupt inbox</h1>"
        f"{note}"
        f'<form method="post" action="{html.escape(root + LOGIN, quote=True)}">'
        f'<input type="hidden" name="next" value="{html.escape(target, quote=True)}">'
        f"<label>{'Inbox token or your identity token (JWT)' if people else 'Inbox token'} "
        '<input type="password" name="token" id="token" '
        'autocomplete="current-password" required autofocus></label> '
        '<button type="submit" id="signin">Sign in</button></form>'
        "</body></html>"
    )


def _secured(response: Response) -> Response:
    for name, value in HEADERS.items():
        response.headers.setdefault(name, value)
    return response


class Session:
    """The settings' authorizer (`gateway.inbox.auth`) and the login routes."""

    def __init__(self, settings: Settings, authorizer: Authorizer | None = None) -> None:
        self.authorizer = authorizer if authorizer is not None else Authorizer(settings)
        self.open = settings.inbox_open

    async def authorize(self, request: Request) -> Principal | Refused:
        """Who the request comes from (a `Principal`), or why not (`Refused`, false)."""
        return await self.authorizer.authorize(request)

    def login_url(self, request: Request) -> str:
        """Where an unauthenticated navigation to this request's page is sent."""
        root = str(request.scope.get("root_path", ""))
        here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return f"{root}{LOGIN}?next={quote(here[len(root) :] if root else here, safe='')}"

    def routes(self) -> list[Route]:
        return [
            Route(LOGIN, self._ask, methods=["GET"]),
            Route(LOGIN, self._login, methods=["POST"]),
            Route("/inbox/logout", self._logout, methods=["POST"]),
        ]

    async def _ask(self, request: Request) -> Response:
        target = _local(request.query_params.get("next", HOME))
        root = str(request.scope.get("root_path", ""))
        if self.open or await self.authorize(request):
            return _secured(RedirectResponse(root + target, status_code=303))
        return _secured(HTMLResponse(_form(root, target, people=self._people)))

    @property
    def _people(self) -> bool:
        return self.authorizer.verifies_people

    async def _login(self, request: Request) -> Response:
        root = str(request.scope.get("root_path", ""))
        if not _same_origin(request):
            return _secured(HTMLResponse("cross-origin sign-in refused", status_code=403))
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY:
                return _secured(HTMLResponse("too large", status_code=413))
        fields = dict(parse_qsl(bytes(body).decode("utf-8", "replace"), max_num_fields=10))
        target = _local(fields.get("next", HOME))
        given = fields.get("token", "").strip()
        signed = await self.authorizer.sign_in(given)
        if not isinstance(signed, SignedIn):
            problem = signed.detail
            if problem == "Wrong token.":
                log.warning("inbox sign-in refused: wrong token")
            elif problem.startswith("No inbox token"):
                log.warning("inbox sign-in refused: neither inbox_token nor a JWKS is set")
            else:  # a JWT not accepted: why (the verifier never echoes the token)
                log.warning("inbox sign-in refused: token not accepted", extra={"error": problem})
                problem = f"Not signed in: {problem}."
            form = _form(root, target, problem, people=self._people)
            return _secured(HTMLResponse(form, status_code=401))
        who = signed.principal.identity
        log.info("inbox sign-in", extra={"subject": who.subject} if who is not None else {})
        response = RedirectResponse(root + target, status_code=303)
        response.set_cookie(
            COOKIE,
            signed.value,
            max_age=signed.max_age,
            path="/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return _secured(response)

    async def _logout(self, request: Request) -> Response:
        root = str(request.scope.get("root_path", ""))
        if not _same_origin(request):
            return _secured(HTMLResponse("cross-origin sign-out refused", status_code=403))
        response = RedirectResponse(root + LOGIN, status_code=303)
        response.delete_cookie(
            COOKIE, path="/", httponly=True, samesite="strict", secure=request.url.scheme == "https"
        )
        return _secured(response)
