"""Signing in to the inbox from a browser: the inbox token, asked once, kept as a cookie.

A browser sends no `Authorization` header when it navigates or opens an EventSource,
so the bearer token alone would leave the page unusable. `GET /inbox/login` asks for
the token; `POST /inbox/login` checks it (constant time) and sets the session cookie
(`HttpOnly`, `SameSite=Strict`, `Path=/`, `Secure` over https), then goes on to the
page. The cookie's value is not the token: it is an HMAC-SHA256 of a fixed label under
the token, so it opens the inbox only while that token is the configured one (changing
`inbox_token` signs every browser out) and a stolen cookie does not reveal the token.
`POST /inbox/logout` clears it.

`Session.authorize` accepts the bearer token or the cookie (`inbox_open`: anything);
it is the authorizer of both the page and the JSON API. Neither the token nor the
cookie's value is ever logged or echoed.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import logging
from urllib.parse import parse_qsl, quote

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from gateway.settings import Settings

log = logging.getLogger("gateway.inbox.session")

COOKIE = "agui-inbox-session"
LABEL = b"agui-gateway inbox session v1"
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


def session_value(token: bytes) -> str:
    """The cookie's value for `token`: an HMAC of a fixed label, never the token."""
    return hmac.new(token, LABEL, hashlib.sha256).hexdigest()


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


def _form(root: str, target: str, problem: str = "") -> str:
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
        '<label>Inbox token <input type="password" name="token" id="token" '
        'autocomplete="current-password" required autofocus></label> '
        '<button type="submit" id="signin">Sign in</button></form>'
        "</body></html>"
    )


def _secured(response: Response) -> Response:
    for name, value in HEADERS.items():
        response.headers.setdefault(name, value)
    return response


class Session:
    """The settings' authorizer (bearer token or session cookie) and the login routes."""

    def __init__(self, settings: Settings) -> None:
        secret = settings.inbox_token
        self._token = secret.get_secret_value().encode() if secret is not None else b""
        self._cookie = session_value(self._token).encode() if self._token else b""
        self.open = settings.inbox_open

    async def authorize(self, request: Request) -> bool:
        if self.open:
            return True
        if not self._token:
            return False
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self._token):
            return True
        cookie = request.cookies.get(COOKIE)
        return cookie is not None and hmac.compare_digest(cookie.encode(), self._cookie)

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
        return _secured(HTMLResponse(_form(root, target)))

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
        given = fields.get("token", "").strip().encode()
        if not self._token:
            log.warning("inbox sign-in refused: inbox_token is not set")
            problem = "No inbox token is configured (inbox_token): nobody can sign in."
            return _secured(HTMLResponse(_form(root, target, problem), status_code=401))
        if not hmac.compare_digest(given, self._token):
            log.warning("inbox sign-in refused: wrong token")
            return _secured(HTMLResponse(_form(root, target, "Wrong token."), status_code=401))
        log.info("inbox sign-in")
        response = RedirectResponse(root + target, status_code=303)
        response.set_cookie(
            COOKIE,
            self._cookie.decode(),
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
