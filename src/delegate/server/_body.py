"""Request bodies: read only once the caller's token is known good, and parsed off the event loop.

FastAPI reads and parses a route's pydantic body before it resolves the route's dependencies, so
a body parameter would be parsed (on the event loop) for a caller without a token: a 7.6 MB body
naming `\\ud800` cost the loop 0.8 s before its 401, and a deeply nested one raised
`RecursionError`, an unauthenticated 500. So no route takes a body parameter. A route names its
body as a dependency, `json_body(Model)`, which depends on `current_user`: the token is checked
first (a 401 for a bad one, the body never read: `BodyLimit` reads a body only when asked to),
then the body is read (within the server's size cap and idle timeout) and parsed in a thread.

Every way a body can be wrong answers the API's JSON error, never a 500:

- not UTF-8: 400 `bad_request`, with the byte and where it is;
- not JSON, nested deeper than `MAX_DEPTH`, or holding an unpaired surrogate (`"\\ud800"`, which
  is not Unicode and which no database column can hold): 422 `invalid_request`, saying where;
- the wrong fields or types: 422 `invalid_request`, one problem per field (as for a bad query).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import pydantic_core
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from .._text import encodes
from ._auth import ApiError, UserId

__all__ = ["MAX_DEPTH", "body_schema", "json_body", "optional_json_body", "parse_body"]

MAX_DEPTH = 200
"""The deepest nesting of arrays and objects a body may have (the limit of pydantic's parser)."""

_M = TypeVar("_M", bound=BaseModel)


def json_body(model: type[_M]) -> Callable[..., Awaitable[_M]]:
    """A dependency giving the request's body as `model`, read and parsed once the token is checked."""

    async def body(request: Request, user_id: UserId) -> _M:
        del user_id  # asked for so that FastAPI checks the token first
        parsed = await asyncio.to_thread(parse_body, await request.body(), model)
        if parsed is None:
            message = f"the body is empty: send a JSON object {_fields(model)}"
            raise ApiError(422, "invalid_request", message, problems=[message])
        return parsed

    return body


def optional_json_body(model: type[_M]) -> Callable[..., Awaitable[_M | None]]:
    """`json_body` for a route whose body may be left out (None then)."""

    async def body(request: Request, user_id: UserId) -> _M | None:
        del user_id
        return await asyncio.to_thread(parse_body, await request.body(), model)

    return body


def parse_body(raw: bytes, model: type[_M]) -> _M | None:
    """`raw` as `model`, None if it is empty; an `ApiError` or a `RequestValidationError` (both
    4xx JSON answers) for anything else that is not a `model`. Meant for a worker thread."""
    if not raw.strip():
        return None
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        byte = f"byte {raw[exc.start]:#04x} at {exc.start}"
        raise ApiError(400, "bad_request", f"the body is not valid UTF-8 ({byte}): send UTF-8 text") from None
    try:
        value = pydantic_core.from_json(raw)  # refuses lone surrogates and nesting past MAX_DEPTH
    except ValueError as exc:
        message = _why_not_json(raw, str(exc))
        raise ApiError(422, "invalid_request", message, problems=[message]) from None
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False, include_input=False)) from None


def body_schema(model: type[BaseModel], *, required: bool = True) -> dict[str, Any]:
    """The `openapi_extra` that documents a route's `json_body(model)` in /api/v1/openapi.json
    (FastAPI documents only the bodies it parses itself)."""
    schema = model.model_json_schema()
    defs = cast(dict[str, Any], schema.pop("$defs", {}))
    content = {"application/json": {"schema": _inlined(schema, defs)}}
    return {"requestBody": {"required": required, "content": content}}


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _why_not_json(raw: bytes, reason: str) -> str:
    """What is wrong with a body the JSON parser refused, saying where when it can."""
    if "recursion limit" in reason:
        return f"the body nests arrays and objects deeper than {MAX_DEPTH} levels: send flatter JSON"
    if _SURROGATE_ESCAPE.search(raw):
        try:
            where = _lone_surrogate(json.loads(raw))  # it parses lone surrogates: to say where one is
        except (ValueError, RecursionError):
            where = None
        if where is not None:
            return f"{where or 'the body'}: the text holds an unpaired surrogate (\\ud800-\\udfff), not Unicode"
    return f"the body is not valid JSON ({reason})"


def _lone_surrogate(value: Any) -> str | None:
    """Where in a JSON value a string holds an unpaired surrogate (`items[0].key`; "" for the
    whole value), or None. A walk with a list, not recursion: a body can nest deep."""
    todo: list[tuple[str, Any]] = [("", value)]
    while todo:
        where, value = todo.pop()
        if isinstance(value, str):
            if not encodes(value):
                return where
        elif isinstance(value, dict):
            for key, item in reversed(cast(dict[str, Any], value).items()):
                if not encodes(key):
                    return where
                todo.append((f"{where}.{key}" if where else key, item))
        elif isinstance(value, list):
            todo.extend((f"{where}[{n}]", item) for n, item in reversed(list(enumerate(cast(list[Any], value)))))
    return None


def _fields(model: type[BaseModel]) -> str:
    required = [name for name, field in model.model_fields.items() if field.is_required()]
    return "with " + ", ".join(repr(name) for name in required) if required else "(see /api/v1/openapi.json)"


def _inlined(schema: Any, defs: dict[str, Any]) -> Any:
    """`schema` with each `{"$ref": "#/$defs/X"}` replaced by X (the models here do not nest themselves)."""
    if isinstance(schema, dict):
        found = cast(dict[str, Any], schema)
        ref = found.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _inlined(defs[ref.removeprefix("#/$defs/")], defs)
        return {key: _inlined(item, defs) for key, item in found.items()}
    if isinstance(schema, list):
        return [_inlined(item, defs) for item in cast(list[Any], schema)]
    return schema
