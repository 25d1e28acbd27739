"""The ASGI application: the dashboard page, its static files, /api/v1 and its OpenAPI spec, behind the guard."""

from __future__ import annotations

import functools
import json
import logging
import re
import threading
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gpuscope._version import __version__
from gpuscope.platform.access import Guard, error_body
from gpuscope.query.guard import cap_sqlite_heap
from gpuscope.serve.endpoints import ENDPOINTS, Endpoint, handle_errors
from gpuscope.serve.http_api import Api
from gpuscope.serve.openapi import openapi_spec
from gpuscope.serve.params import parse_query, query_request
from gpuscope.serve.security import MAX_BODY_BYTES, GuardMiddleware
from gpuscope.serve.untrusted import MAX_ERROR_CHARS, clean

log = logging.getLogger("gpuscope.serve")

STATIC_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript",
    ".css": "text/css",
    ".svg": "image/svg+xml",
}
_NO_STORE = {"cache-control": "no-store"}


def _error(status: int, code: str, message: str) -> Response:
    # Cut, and in the guard's rendering (ASCII JSON): a message may quote the client's text, as long as a
    # URL may be, with a lone surrogate JSONResponse's UTF-8 cannot encode.
    body = error_body(code, clean(message, MAX_ERROR_CHARS))
    return Response(body, status_code=status, media_type="application/json", headers=_NO_STORE)


_BODY_SHAPE = 'body: a JSON object {"sql": "<one read-only statement>", "limit": N}'


class _NotJsonError(ValueError):
    pass


def parse_json_body(raw: bytes) -> Any:
    """The request body as JSON; raises ValueError with a one-line reason for anything that is not.

    Strict JSON: UTF-8 text, no NaN or Infinity (Python's reader takes them),
    no nesting deep enough to exhaust the parser's recursion.
    """

    def refuse_constant(name: str) -> Any:
        raise _NotJsonError(f"not JSON ({name} is no JSON number)")

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("the body is not UTF-8 text") from None
    try:
        return json.loads(text, parse_constant=refuse_constant)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    except _NotJsonError:
        raise
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at character {exc.pos})") from None
    except ValueError:  # an integer of more digits than Python converts
        raise ValueError("a number with too many digits") from None


def _static(*parts: str) -> bytes:
    path = resources.files("gpuscope.serve") / "static"
    for part in parts:
        path = path / part
    return path.read_bytes()


def static_names() -> list[str]:
    static = resources.files("gpuscope.serve") / "static"
    return sorted(p.name for p in static.iterdir() if p.name[0] != "." and p.is_file())


@functools.cache
def vendored_files() -> Mapping[str, frozenset[str]]:
    """The front-end libraries shipped in the package (scripts/vendor_web.py): package -> its files.

    Read once: the package's files do not change while it runs, and the page asks for them on every load.
    """
    manifest = json.loads((resources.files("gpuscope.serve") / "static" / "vendor" / "MANIFEST.json").read_text())
    return MappingProxyType({name: frozenset(entry["files"]) for name, entry in manifest.items()})


def _query(api: Api, body: dict[str, Any]) -> dict[str, Any]:
    """Read ``POST /query``'s body and run it: on the worker, so a refusal maps to the error shape as a read's does."""
    request = query_request(body)
    return api.query(request.sql, request.limit, request.event_filter, request.timeout_s)


def download_name(db: Path, suffix: str) -> str:
    """A download's file name: the recording's, in characters that any header and file system take."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", db.stem)[:100].lstrip(".") or "recording"
    return stem + suffix


def static_file(name: str) -> Response:
    return Response(_static(name), media_type=STATIC_TYPES.get(Path(name).suffix, "application/octet-stream"))


def mcp_app(db: Path, guard: Guard) -> GuardMiddleware:
    """The MCP server alone, streamable HTTP at /mcp, behind ``guard``."""
    return GuardMiddleware(_mcp_starlette(db), guard)


def _mcp_starlette(db: Path) -> Starlette:
    from mcp.server.transport_security import TransportSecuritySettings

    from gpuscope.serve.mcp_server import build_server

    # The guard in front checks Host and Origin against the same allow-list as the dashboard's.
    return build_server(db, remote=True).streamable_http_app(
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        max_request_body_size=MAX_BODY_BYTES,
    )


class _WithMcp:
    """Route /mcp to the MCP app and everything else to the dashboard; lifespan events go to the MCP app (its sessions)."""

    def __init__(self, dashboard: Starlette, mcp: Starlette) -> None:
        self.dashboard, self.mcp = dashboard, mcp

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan" or scope.get("path", "").rstrip("/") == "/mcp":
            await self.mcp(scope, receive, send)
        else:
            await self.dashboard(scope, receive, send)


def create_app(
    db: Path,
    guard: Guard,
    *,
    mcp: bool = False,
    baseline: Path | None = None,
    first_screen: threading.Event | None = None,
) -> GuardMiddleware:
    """The whole server: every route behind ``guard`` (Host, token, size limit, security headers); with ``mcp``, /mcp too.

    ``baseline``: a recording of the run before, which ``GET diff`` compares this one with.
    ``first_screen``: set once what the page's first screen asks for is computed (see ``Api.warm``).
    """
    cap_sqlite_heap()  # the server's process exists to serve these reads (docs/dashboard.md)
    api = Api(db, baseline=baseline)
    # Warm before serving, not on the first request: a fleet client asking many fresh agents at once would
    # otherwise wait for each one's imports and first open.
    api.warm(first_screen)

    async def run(call: Any, *args: Any, headers: dict[str, str] | None = None) -> Response:
        try:
            result = await run_in_threadpool(call, *args)
        except Exception as exc:  # the API's own errors become the error shape; a bug is logged, not shown
            mapped = handle_errors(exc)
            if mapped is None:
                log.exception("internal error")
                return _error(500, "internal", "internal error (see the server's log)")
            return _error(*mapped)
        return JSONResponse(result, headers={**_NO_STORE, **(headers or {})})

    def get_route(ep: Endpoint) -> Route:
        # A download is saved under the recording's name, not the endpoint's (profile.speedscope).
        extra = (
            {"content-disposition": f'attachment; filename="{download_name(db, ep.download)}"'} if ep.download else {}
        )

        def answer(query: dict[str, str]) -> dict[str, Any]:
            return ep.handler(api, **parse_query(ep.params, query))

        async def endpoint(request: Request) -> Response:
            return await run(answer, dict(request.query_params), headers=extra)

        return Route(f"/api/v1{ep.path}", endpoint, methods=["GET"])

    async def query(request: Request) -> Response:
        try:
            body = parse_json_body(await request.body())  # read whole already, within its limit, by the guard
        except ValueError as exc:
            return _error(400, "bad_json", f"{exc}; {_BODY_SHAPE}")
        if not isinstance(body, dict):
            return _error(400, "bad_json", _BODY_SHAPE)
        return await run(lambda: _query(api, body))

    async def spec(request: Request) -> Response:
        return JSONResponse(openapi_spec(), headers=_NO_STORE)

    async def index(request: Request) -> Response:
        # The banner prints this URL: what is under it, each with what it returns.
        listed = [{"method": "GET", "path": f"/api/v1{ep.path}", "summary": ep.summary} for ep in ENDPOINTS]
        listed.append({"method": "POST", "path": "/api/v1/query", "summary": "one read-only SQL query"})
        body = {"version": __version__, "openapi": "/api/v1/openapi.json", "endpoints": listed}
        return JSONResponse(body, headers=_NO_STORE)

    async def page(request: Request) -> Response:
        return Response(_static("index.html"), media_type=STATIC_TYPES[".html"], headers=_NO_STORE)

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in static_names():
            return _error(404, "not_found", f"no such file: {name}")
        return static_file(name)

    async def vendored(request: Request) -> Response:
        package, name = request.path_params["package"], request.path_params["name"]
        if name not in vendored_files().get(package, frozenset()):
            return _error(404, "not_found", f"no such file: {package}/{name}")
        media = STATIC_TYPES.get(Path(name).suffix, "text/plain; charset=utf-8")  # the licence has no suffix
        return Response(_static("vendor", package, name), media_type=media)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        codes = {404: "not_found", 405: "method_not_allowed"}
        return _error(exc.status_code, codes.get(exc.status_code, "http_error"), str(exc.detail))

    async def internal(request: Request, exc: Exception) -> Response:
        log.exception("internal error", exc_info=exc)
        return _error(500, "internal", "internal error (see the server's log)")

    routes = [
        Route("/", page, methods=["GET"]),
        Route("/static/{name}", static, methods=["GET"]),
        Route("/static/vendor/{package}/{name}", vendored, methods=["GET"]),
        Route("/favicon.ico", lambda request: static_file("favicon.svg"), methods=["GET"]),
        Route("/api/v1/", index, methods=["GET"]),
        Route("/api/v1", index, methods=["GET"]),
        Route("/api/v1/openapi.json", spec, methods=["GET"]),
        Route("/api/v1/query", query, methods=["POST"]),
        *(get_route(ep) for ep in ENDPOINTS),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error, Exception: internal})
    return GuardMiddleware(_WithMcp(app, _mcp_starlette(db)) if mcp else app, guard)
