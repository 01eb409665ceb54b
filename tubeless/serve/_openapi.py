"""The OpenAPI 3.1 document served at ``/openapi.json`` (a test checks real answers against it)."""

from __future__ import annotations

from typing import Any

from tubeless._version import __version__

__all__ = ["openapi_document"]

_STATUS = ["queued", "running", "waiting", "completed", "failed", "cancelled"]


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*statuses: int) -> dict[str, Any]:
    words = {
        400: "The request is malformed (not JSON, too deep, wrong fields).",
        401: "No bearer token, or not the server's.",
        403: "The Host header (or the CORS origin) is not allowed.",
        404: "No such run, entry or pending call.",
        409: "A live run holds the key, or the digest is not the pending call's.",
        413: "The body is over 1 MiB.",
        422: "The input or the limits are refused.",
        429: "--max-runs runs are live; see Retry-After.",
    }
    found: dict[str, Any] = {}
    for status in statuses:
        found[str(status)] = _json(_ref("Error"), words[status])
        if status == 429:
            found["429"]["headers"] = {
                "Retry-After": {"schema": {"type": "integer"}, "description": "Seconds."}
            }
    return found


_COMMON = (401, 403)

_SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {
                    "code": {"type": "string"},
                    "message": {"type": "string"},
                    "run_id": {"type": "string"},
                    "limit": {"type": "string"},
                },
            }
        },
    },
    "PendingApproval": {
        "type": "object",
        "required": [
            "run_id",
            "key",
            "route",
            "turn",
            "call_id",
            "tool",
            "input",
            "digest",
            "requested_at",
        ],
        "properties": {
            "run_id": {"type": "string"},
            "key": {"type": "string"},
            "route": {"type": "string"},
            "turn": {"type": "integer"},
            "call_id": {"type": "string"},
            "tool": {"type": "string"},
            "input": {},
            "digest": {"type": "string"},
            "requested_at": {"type": "string", "format": "date-time"},
        },
    },
    "Run": {
        "type": "object",
        "required": [
            "run_id",
            "entry",
            "key",
            "status",
            "turns",
            "calls",
            "usage",
            "pending_approvals",
            "created_at",
            "updated_at",
        ],
        "properties": {
            "run_id": {"type": "string"},
            "entry": {"type": "string"},
            "key": {"type": "string"},
            "status": {"enum": _STATUS},
            "result": {"description": "The result, when the run completed."},
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
            },
            "turns": {"type": "integer", "minimum": 0},
            "calls": {"type": "integer", "minimum": 0},
            "usage": {
                "type": "object",
                "description": "What the entry agent's budget charged; tokens and cost only "
                "for an agent with token or cost budgets.",
                "properties": {
                    "decisions": {"type": "integer", "minimum": 0},
                    "calls": {"type": "integer", "minimum": 0},
                    "input_tokens": {"type": "integer", "minimum": 0},
                    "output_tokens": {"type": "integer", "minimum": 0},
                    "total_tokens": {"type": "integer", "minimum": 0},
                    "cost_usd": {"type": "string", "description": "US dollars, a decimal."},
                },
            },
            "pending_approvals": {"type": "array", "items": _ref("PendingApproval")},
            "created_at": {"type": "string", "format": "date-time"},
            "updated_at": {"type": "string", "format": "date-time"},
        },
    },
    "Entry": {
        "type": "object",
        "required": ["id", "kind", "input_schema", "result_schema", "limits", "tools"],
        "properties": {
            "id": {"type": "string"},
            "kind": {"enum": ["agent", "pipeline"]},
            "name": {"type": ["string", "null"]},
            "description": {"type": ["string", "null"]},
            "input_schema": {},
            "result_schema": {},
            "limits": {"type": ["object", "null"]},
            "tools": {"type": "array", "items": {"type": "object"}},
        },
    },
    "StartRun": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "input": {"description": "The entry's input (validated by its input schema)."},
            "key": {"type": "string", "minLength": 1, "maxLength": 4096},
            "limits": {
                "type": "object",
                "description": "Limits that tighten the project's (max_turns, max_calls, ...).",
                "additionalProperties": {"type": "integer", "minimum": 0},
            },
            "wait_s": {"type": "number", "minimum": 0, "maximum": 300},
        },
    },
    "Decision": {
        "type": "object",
        "additionalProperties": False,
        "required": ["approve", "digest"],
        "properties": {
            "approve": {"type": "boolean"},
            "digest": {"type": "string"},
            "reason": {"type": "string", "maxLength": 4096},
        },
    },
}


def _path_param(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


def openapi_document(title: str) -> dict[str, Any]:
    """The document for a server of the project ``title``."""
    run = _json(_ref("Run"), "The run.")
    return {
        "openapi": "3.1.0",
        "info": {"title": f"tubeless serve: {title}", "version": __version__},
        "components": {
            "schemas": _SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": {
            "/healthz": {
                "get": {
                    "operationId": "healthz",
                    "security": [],
                    "responses": {
                        "200": _json(
                            {"type": "object", "properties": {"status": {"const": "ok"}}},
                            "The server is up.",
                        ),
                        **_errors(403),
                    },
                }
            },
            "/metrics": {
                "get": {
                    "operationId": "metrics",
                    "responses": {
                        "200": {
                            "description": "Prometheus text.",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        },
                        **_errors(*_COMMON),
                    },
                }
            },
            "/v1/entries": {
                "get": {
                    "operationId": "listEntries",
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "required": ["entries"],
                                "properties": {
                                    "entries": {"type": "array", "items": _ref("Entry")}
                                },
                            },
                            "The project's agents and pipelines.",
                        ),
                        **_errors(*_COMMON),
                    },
                }
            },
            "/v1/entries/{entry}/runs": {
                "post": {
                    "operationId": "startRun",
                    "parameters": [
                        _path_param("entry"),
                        {
                            "name": "Idempotency-Key",
                            "in": "header",
                            "required": False,
                            "schema": {"type": "string", "minLength": 1, "maxLength": 256},
                        },
                    ],
                    "requestBody": {
                        "required": False,
                        "content": {"application/json": {"schema": _ref("StartRun")}},
                    },
                    "responses": {
                        "200": _json(_ref("Run"), "The run ended within wait_s."),
                        "202": _json(_ref("Run"), "The run is under way."),
                        **_errors(400, *_COMMON, 404, 409, 413, 422, 429),
                    },
                }
            },
            "/v1/runs": {
                "get": {
                    "operationId": "listRuns",
                    "parameters": [
                        {"name": "entry", "in": "query", "schema": {"type": "string"}},
                        {"name": "status", "in": "query", "schema": {"enum": _STATUS}},
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 1, "maximum": 500},
                        },
                        {"name": "cursor", "in": "query", "schema": {"type": "string"}},
                    ],
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "required": ["runs", "next_cursor"],
                                "properties": {
                                    "runs": {"type": "array", "items": _ref("Run")},
                                    "next_cursor": {"type": ["string", "null"]},
                                },
                            },
                            "Runs, newest first.",
                        ),
                        **_errors(400, *_COMMON),
                    },
                }
            },
            "/v1/runs/{run_id}": {
                "get": {
                    "operationId": "getRun",
                    "parameters": [_path_param("run_id")],
                    "responses": {"200": run, **_errors(*_COMMON, 404)},
                }
            },
            "/v1/runs/{run_id}/cancel": {
                "post": {
                    "operationId": "cancelRun",
                    "parameters": [_path_param("run_id")],
                    "responses": {
                        "200": _json(_ref("Run"), "The run had ended (or now has)."),
                        "202": _json(_ref("Run"), "Cancelling: the run stops shortly."),
                        **_errors(400, *_COMMON, 404, 413),
                    },
                }
            },
            "/v1/runs/{run_id}/events": {
                "get": {
                    "operationId": "runEvents",
                    "parameters": [
                        _path_param("run_id"),
                        {
                            "name": "since",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 0},
                        },
                        {"name": "Last-Event-ID", "in": "header", "schema": {"type": "string"}},
                    ],
                    "responses": {
                        "200": {
                            "description": "record, status and end events.",
                            "content": {"text/event-stream": {"schema": {"type": "string"}}},
                        },
                        **_errors(400, *_COMMON, 404),
                    },
                }
            },
            "/v1/runs/{run_id}/approvals/{call_id}": {
                "post": {
                    "operationId": "answerApproval",
                    "parameters": [_path_param("run_id"), _path_param("call_id")],
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": _ref("Decision")}},
                    },
                    "responses": {
                        "200": _json(_ref("Run"), "Recorded; the run had ended."),
                        "202": _json(_ref("Run"), "Recorded; the run goes on by itself."),
                        **_errors(400, *_COMMON, 404, 409, 413),
                    },
                }
            },
            "/v1/approvals": {
                "get": {
                    "operationId": "listApprovals",
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "required": ["approvals"],
                                "properties": {
                                    "approvals": {"type": "array", "items": _ref("PendingApproval")}
                                },
                            },
                            "Calls waiting for a decision.",
                        ),
                        **_errors(*_COMMON),
                    },
                }
            },
        },
    }
