"""A shared bearer token, checked in constant time on every route but the probes and the page's shell.

HTTP takes the token the ways Ray 2.60's dashboard does, in its order: `Authorization: Bearer
<token>` (API clients, `ray list ... --address`), `X-Ray-Authorization: Bearer <token>` (proxies,
KubeRay), then the `ray-authentication-token` cookie (a browser, once `/api/authenticate` set it).
Missing: 401 with `WWW-Authenticate: Bearer`; wrong: 403, as Ray answers (Ray's CLI words its
message by that code). gRPC: the `authorization` metadata, as Ray's core workers send it, else
UNAUTHENTICATED. Open without a token: what a kubelet calls (`/healthz`, `/readyz`, the gRPC
health service; they reveal liveness and readiness only) and what a browser needs before it has
the cookie (the page's shell, its static files, and Ray's two authentication endpoints).
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import grpc
from aiohttp import web

OPEN_HTTP_PATHS = frozenset(
    {"/healthz", "/readyz", "/favicon.ico", "/api/authentication_mode", "/api/authenticate"}
)
# The health service's methods by their whole names: a prefix would let any name under it (CR/LF
# included) through to the server's other handlers and their logs.
OPEN_GRPC_METHODS = frozenset(
    {"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch", "/grpc.health.v1.Health/List"}
)
RAY_AUTHORIZATION_HEADER = "X-Ray-Authorization"
RAY_TOKEN_COOKIE = "ray-authentication-token"
COOKIE_MAX_AGE_S = 30 * 24 * 60 * 60  # Ray's: 30 days
_BEARER = "Bearer "


def _expected(tokens: Iterable[str]) -> list[bytes]:
    return [f"{_BEARER}{t}".encode() for t in dict.fromkeys(t.strip() for t in tokens if t.strip())]


class BearerToken:
    """One or more accepted tokens (ours and Ray's cluster token may both be configured).

    `post_tokens`: the only ones an HTTP POST may carry (None: any of them; empty: POSTs need none).
    """

    def __init__(self, token: str, *others: str, post_tokens: Iterable[str] | None = None) -> None:
        self._expected = _expected((token, *others))
        if not self._expected:
            raise ValueError("an empty token would let everyone in")
        self._post_expected = self._expected if post_tokens is None else _expected(post_tokens)
        self._open_paths = OPEN_HTTP_PATHS
        self._open_prefixes: tuple[str, ...] = ()

    def open_pages(self, paths: Iterable[str], prefixes: Iterable[str] = ()) -> BearerToken:
        """Also leave these paths (exact) and path prefixes open: a page's shell and its files."""
        self._open_paths = self._open_paths | frozenset(paths)
        self._open_prefixes = (*self._open_prefixes, *prefixes)
        return self

    def accepts(self, authorization: str | None, *, post: bool = False) -> bool:
        """Constant-time comparison of the whole header value against every accepted token."""
        given = (authorization or "").strip().encode()
        found = False
        for expected in self._post_expected if post else self._expected:
            found |= hmac.compare_digest(given, expected)
        return found

    @property
    def posts_open(self) -> bool:
        """True when only Ray's token is configured: POSTed events need none (see the module doc)."""
        return not self._post_expected

    def is_open(self, path: str) -> bool:
        if path in self._open_paths:
            return True
        return bool(self._open_prefixes) and path.startswith(self._open_prefixes)

    def http_middleware(self) -> Callable[..., Awaitable[web.StreamResponse]]:
        @web.middleware
        async def require_token(
            request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
        ) -> web.StreamResponse:
            post = request.method == "POST"
            if self.is_open(request.path) or (post and self.posts_open):
                return await handler(request)
            given = request_authorization(request)
            if given and self.accepts(given, post=post):
                return await handler(request)
            if not given:
                return web.json_response(
                    {"error": "missing bearer token (send 'Authorization: Bearer <token>')"},
                    status=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
            return web.json_response({"error": "wrong bearer token"}, status=403)

        return require_token

    def grpc_interceptor(self) -> grpc.aio.ServerInterceptor:
        return _TokenInterceptor(self)

    def http_routes(self) -> list[web.RouteDef]:
        """Ray's `/api/authentication_mode` and `/api/authenticate`: how a page learns a token is
        needed and trades one (sent once in the header) for the HttpOnly cookie it sends after."""

        async def mode(_request: web.Request) -> web.Response:
            return web.json_response({"authentication_mode": "token"})

        async def authenticate(request: web.Request) -> web.Response:
            given = request.headers.get("Authorization", "").strip()
            if not given:
                return web.Response(status=401, text="Unauthorized: Missing authentication token")
            if not self.accepts(given):
                return web.Response(status=403, text="Forbidden: Invalid authentication token")
            response = web.json_response({"status": "authenticated", "message": "Token is valid"})
            response.set_cookie(
                RAY_TOKEN_COOKIE,
                given[len(_BEARER) :],
                max_age=COOKIE_MAX_AGE_S,
                path="/",
                httponly=True,
                samesite="Strict",
                secure=request.scheme == "https",
            )
            return response

        return [web.get("/api/authentication_mode", mode), web.post("/api/authenticate", authenticate)]


def request_authorization(request: web.Request) -> str:
    """The `Bearer <token>` a request carries, from the first of Ray's three places that has one."""
    header = request.headers.get("Authorization", "") or request.headers.get(RAY_AUTHORIZATION_HEADER, "")
    if header:
        return header
    cookie = request.cookies.get(RAY_TOKEN_COOKIE, "")
    return _BEARER + cookie if cookie else ""


def no_authentication_routes() -> list[web.RouteDef]:
    """Ray's `/api/authentication_mode` when no token is configured: the page asks for none (and,
    as Ray does, a stale cookie is cleared)."""

    async def mode(_request: web.Request) -> web.Response:
        response = web.json_response({"authentication_mode": "disabled"})
        response.set_cookie(RAY_TOKEN_COOKIE, "", max_age=0, path="/")
        return response

    return [web.get("/api/authentication_mode", mode)]


class _TokenInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    def __init__(self, token: BearerToken) -> None:
        self._token = token

        async def deny(_request: Any, context: Any) -> None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")

        self._deny = grpc.unary_unary_rpc_method_handler(deny)

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        if details.method in OPEN_GRPC_METHODS:
            return await continuation(details)
        metadata = dict(details.invocation_metadata or ())
        if self._token.accepts(metadata.get("authorization")):
            return await continuation(details)
        return self._deny
