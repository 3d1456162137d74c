"""Helpers for the REST tests: an HTTP client that checks every answer against the served
OpenAPI document (status documented, body valid by jsonschema in OpenAPI 3.0's dialect)."""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient
from openapi_schema_validator import OAS30ReadValidator, oas30_format_checker

from app.api.rest.keys import OPENAPI

PREFIX = "/v1"


def resolve(doc: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        target: Any = doc
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = target
    return node


def check_schema(doc: dict[str, Any], schema: dict[str, Any], value: Any, where: str = "$") -> None:
    """`value` against `schema` (a part of `doc`, whose `#/components` its references name), by
    jsonschema with OpenAPI 3.0's dialect for responses (nullable, readOnly; formats checked);
    raises AssertionError naming every mismatch."""
    validator = OAS30ReadValidator(
        {"allOf": [schema], "components": doc.get("components", {})},
        format_checker=oas30_format_checker,
    )
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(
        f"{where}{''.join(f'[{p!r}]' for p in e.absolute_path)}: {e.message}" for e in errors
    )


def _template_regex(template: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$")


class Api:
    """Calls the app and asserts the answer is one the document promises for that operation."""

    def __init__(self, client: TestClient[web.Request, web.Application], app: web.Application) -> None:
        self.client = client
        self.app = app
        self.doc: dict[str, Any] = json.loads(app[OPENAPI])
        self._paths = [(_template_regex(t), t) for t in self.doc["paths"]]

    async def call(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        data: Any = None,
        headers: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        async with self.client.request(
            method, path, json=json_body, data=data, headers=headers, params=params
        ) as resp:
            raw = await resp.read()
            status = resp.status
            if raw:
                assert resp.content_type == "application/json", resp.content_type
            body = json.loads(raw) if raw else None
        self._check(method.lower(), path, status, body)
        return status, body

    def _check(self, method: str, path: str, status: int, body: Any) -> None:
        relative = path.removeprefix(PREFIX) if path.startswith(PREFIX + "/") else None
        template = next((t for regex, t in self._paths if relative and regex.match(relative)), None)
        if template is None:
            assert status == 404, f"{method} {path}: undocumented path answered {status}"
            check_schema(self.doc, {"$ref": "#/components/schemas/Error"}, body)
            return
        operation = self.doc["paths"][template].get(method)
        if operation is None:
            assert status == 405, f"{method} {path}: undocumented method answered {status}"
            check_schema(self.doc, {"$ref": "#/components/schemas/Error"}, body)
            return
        responses = operation["responses"]
        assert str(status) in responses, f"{method} {template}: status {status} is not documented"
        response = resolve(self.doc, responses[str(status)])
        if "content" not in response:
            assert body is None, f"{method} {template}: {status} should have no body, got {body!r}"
            return
        check_schema(self.doc, response["content"]["application/json"]["schema"], body)
