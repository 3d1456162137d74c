"""Helpers for the REST tests: an HTTP client that checks every answer against the served
OpenAPI document (status documented, body valid), and a small JSON-schema checker for it."""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient

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
    """The subset of JSON Schema that openapi.json uses; raises AssertionError on a mismatch."""
    schema = resolve(doc, schema)
    if value is None and schema.get("nullable"):
        return
    kind = schema.get("type")
    if kind == "object":
        assert isinstance(value, dict), f"{where}: expected an object, got {value!r}"
        for name in schema.get("required", []):
            assert name in value, f"{where}: missing {name!r} in {value!r}"
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for name, member in value.items():
            if name in properties:
                check_schema(doc, properties[name], member, f"{where}.{name}")
            elif extra is False:
                raise AssertionError(f"{where}: undocumented member {name!r}")
            elif isinstance(extra, dict):
                check_schema(doc, extra, member, f"{where}.{name}")
    elif kind == "array":
        assert isinstance(value, list), f"{where}: expected an array, got {value!r}"
        assert len(value) <= schema.get("maxItems", len(value)), f"{where}: too many items"
        for i, item in enumerate(value):
            check_schema(doc, schema["items"], item, f"{where}[{i}]")
    elif kind == "string":
        assert isinstance(value, str), f"{where}: expected a string, got {value!r}"
        if "enum" in schema:
            assert value in schema["enum"], f"{where}: {value!r} not in {schema['enum']}"
        if "pattern" in schema:
            assert re.search(schema["pattern"], value), f"{where}: {value!r} breaks {schema['pattern']}"
    elif kind == "integer":
        assert isinstance(value, int) and not isinstance(value, bool), f"{where}: expected an integer"
        assert value >= schema.get("minimum", value), f"{where}: {value} below the minimum"
    elif kind == "boolean":
        assert isinstance(value, bool), f"{where}: expected a boolean, got {value!r}"
    elif kind == "number":
        assert isinstance(value, int | float) and not isinstance(value, bool), f"{where}: expected a number"
    else:
        raise AssertionError(f"{where}: the checker does not know schema {schema!r}")


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
