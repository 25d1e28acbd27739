"""The OpenAPI 3.1 document of /api/v1, built from the endpoint table (so it cannot drift from the routes).

Each parameter's schema comes from its ``Param`` (type, bounds, default), each
answer's from ``gpuscope.serve.schemas``: the document says what the server
reads and what it answers, and the tests hold real answers to it.
"""

from __future__ import annotations

import re
from typing import Any

from gpuscope._version import __version__
from gpuscope.model.limits import PID_MAX, PID_MIN
from gpuscope.serve import schemas
from gpuscope.serve.endpoints import ENDPOINTS
from gpuscope.serve.params import MAX_PIDS, MAX_ROWS, QUERY_TIMEOUT_S, Param

_ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
        }
    },
}
_QUERY_BODY = {
    "type": "object",
    "required": ["sql"],
    "properties": {
        "sql": {"type": "string", "minLength": 1},
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_ROWS},
        "since": {"type": "string", "description": "only the last DURATION"},
        "from": {"type": "string", "description": "from this time"},
        "to": {"type": "string", "description": "up to this time"},
        "pids": {
            "type": "array",
            "maxItems": MAX_PIDS,
            "items": {"type": "integer", "minimum": PID_MIN, "maximum": PID_MAX},
        },
        "timeout_s": {
            "type": "number",
            "exclusiveMinimum": 0,
            "description": f"at most the server's {QUERY_TIMEOUT_S:g} s",
        },
    },
}


def _parameter(p: Param) -> dict[str, Any]:
    return {"name": p.name, "in": "query", "required": False, "description": p.meaning, "schema": p.schema()}


def _ok(schema: schemas.Schema) -> dict[str, Any]:
    return {"description": "OK", "content": {"application/json": {"schema": schema}}}


def openapi_spec() -> dict[str, Any]:
    """The document served at /api/v1/openapi.json."""
    error = {"$ref": "#/components/responses/Error"}
    paths: dict[str, Any] = {}
    for ep in ENDPOINTS:
        paths[f"/api/v1{ep.path}"] = {
            "get": {
                "summary": ep.summary,
                "operationId": re.sub(r"[-.]", "_", ep.path.strip("/")),
                "parameters": [_parameter(p) for p in ep.params],
                "responses": {"200": _ok(ep.response), "400": error, "401": error, "503": error},
            }
        }
    paths["/api/v1/query"] = {
        "post": {
            "summary": "one read-only SQL statement, time-limited (as `gpuscope query`)",
            "operationId": "query",
            "requestBody": {"required": True, "content": {"application/json": {"schema": _QUERY_BODY}}},
            "responses": {"200": _ok(schemas.QUERY), "400": error, "401": error, "413": error, "503": error},
        }
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "gpuscope dashboard API", "version": __version__},
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Error": _ERROR_SCHEMA},
            "responses": {
                "Error": {
                    "description": "an error",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
                }
            },
        },
        "security": [{"bearer": []}],
    }
