"""The API reference at ``/docs``: the OpenAPI document the server serves, as one HTML page
rendered on the server (every operation by tag, its parameters, body and answers, and every
schema), styled by the dashboard's stylesheet.  FastAPI's own ``/docs`` and ``/redoc`` load
Swagger UI and ReDoc from CDNs; this page loads nothing from another host and needs no
script.  ``/redoc`` leads here.  Machines read ``/openapi.json``."""

from __future__ import annotations

from typing import Any, Dict, List

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from .routing import Route
from .ui import templates

router = APIRouter(include_in_schema=False, route_class=Route)
METHODS = ("get", "post", "put", "patch", "delete")


def type_of(schema: Dict[str, Any]) -> str:
    """A schema in a few words: ``integer``, ``array of Run``, ``object of string``, ..."""
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "allOf" in schema or "anyOf" in schema:
        return " or ".join(type_of(s) for s in schema.get("allOf", schema.get("anyOf", [])))
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {type_of(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object of {type_of(schema['additionalProperties'])}"
    if "format" in schema:
        return f"{kind} ({schema['format']})"
    if "enum" in schema:
        return f"{kind}: " + ", ".join(map(str, schema["enum"]))
    return kind


def _bounds(schema: Dict[str, Any]) -> str:
    parts = []
    for key, word in (("minimum", "≥"), ("maximum", "≤"), ("exclusiveMinimum", ">"),
                      ("exclusiveMaximum", "<")):
        if key in schema:
            parts.append(f"{word} {schema[key]}")
    if "default" in schema:
        parts.append(f"default {schema['default']}")
    return ", ".join(parts)


def _body(op: Dict[str, Any]) -> str:
    content = op.get("requestBody", {}).get("content", {})
    return ", ".join(f"{type_of(c.get('schema', {}))} ({media})" for media, c in content.items())


def operations(doc: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The operations of ``doc``, grouped by their first tag, in the document's order."""
    groups: Dict[str, List[Dict[str, Any]]] = {}
    for path, item in doc.get("paths", {}).items():
        for method in METHODS:
            op = item.get(method)
            if op is None:
                continue
            params = [{"name": p["name"], "in": p["in"], "required": p.get("required", False),
                       "type": type_of(p.get("schema", {})), "bounds": _bounds(p.get("schema", {})),
                       "description": p.get("description") or p.get("schema", {}).get("description", "")}
                      for p in op.get("parameters", [])]
            answers = [{"status": status, "description": r.get("description", ""),
                        "type": ", ".join(type_of(c.get("schema", {})) for c in r.get("content", {}).values())}
                       for status, r in sorted(op.get("responses", {}).items())]
            groups.setdefault((op.get("tags") or ["other"])[0], []).append(
                {"id": op.get("operationId", f"{method}-{path}"), "method": method.upper(), "path": path,
                 "summary": op.get("summary", ""), "params": params, "body": _body(op), "answers": answers})
    return [{"tag": tag, "operations": ops} for tag, ops in groups.items()]


def schemas(doc: Dict[str, Any]) -> List[Dict[str, Any]]:
    out = []
    for name, schema in sorted(doc.get("components", {}).get("schemas", {}).items()):
        required = set(schema.get("required", []))
        fields = [{"name": f, "type": type_of(s), "required": f in required, "bounds": _bounds(s),
                   "description": s.get("description", "")}
                  for f, s in schema.get("properties", {}).items()]
        out.append({"name": name, "description": schema.get("description", ""), "fields": fields})
    return out


@router.get("/docs", response_class=HTMLResponse)
def docs(request: Request):
    doc = request.app.openapi()
    return templates.TemplateResponse("reference.html", {
        "request": request, "role": None, "csrf": "", "info": doc.get("info", {}),
        "groups": operations(doc), "schemas": schemas(doc)})


@router.get("/redoc")
def redoc():
    return RedirectResponse("/docs", status_code=301)
