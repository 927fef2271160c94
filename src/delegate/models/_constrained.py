"""Constrained tool calling, for small models that cannot be trusted to emit tool calls.

Instead of the `tools` field, the server gets a `response_format` whose JSON schema admits exactly
one object of the form `{"tool": <name>, "arguments": <that tool's input>}`, or
`{"tool": "final_answer", "arguments": {"text": ...}}`. A server with grammar-constrained decoding
(llama.cpp, vLLM, Ollama) can then only produce a well-formed call, which `parse_constrained`
turns back into the parts the loop knows.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any, cast

from .._messages import Part, TextPart, ToolCallPart
from ._base import ToolSpec

__all__ = [
    "FINAL_ANSWER",
    "constrained_format",
    "constrained_instructions",
    "parse_constrained",
    "render_call",
]

FINAL_ANSWER = "final_answer"
"""The pseudo-tool a constrained model calls to answer; its `text` becomes the reply's text."""

_FINAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
    "additionalProperties": False,
}


def constrained_format(tools: list[ToolSpec], *, final: bool = True) -> dict[str, Any]:
    """A Chat Completions `response_format` (type `json_schema`) that admits one call of `tools`
    (and `final_answer`, unless `final` is False: the request requires a tool call).

    The choice is an `anyOf` (grammar builders and OpenAI's strict mode support it; `oneOf` less
    so). `"tool"` comes first in each option, so the model commits to a tool before its arguments.
    Each tool's `$defs` are moved to the root under a prefixed name, since `$ref`s resolve there.
    """
    defs: dict[str, Any] = {}
    options = [_option(spec.name, _hoist_defs(spec.name, spec.parameters, defs)) for spec in tools]
    if final:
        options.append(_option(FINAL_ANSWER, _FINAL_SCHEMA))
    schema: dict[str, Any] = {"anyOf": options}
    if defs:
        schema["$defs"] = defs
    return {"type": "json_schema", "json_schema": {"name": "tool_call", "schema": schema}}


def constrained_instructions(tools: list[ToolSpec], *, final: bool = True) -> str:
    """The note added to the system prompt: what the tools are and how to call one.

    It shows no placeholder values: tiny models copy them verbatim."""
    lines = [
        "You act by answering with exactly one JSON object, nothing else:",
        '{"tool": "<tool name>", "arguments": {<the tool\'s arguments>}}',
        "You will get the tool's result in the next message. Available tools:",
    ]
    for spec in tools:
        lines.append(f"- {spec.name}: {spec.description.strip()} Arguments: {_signature(spec.parameters)}")
    if final:
        lines.append(
            f'When you are done, call "{FINAL_ANSWER}" with "text" set to your final answer, in your own words.'
        )
    else:
        lines.append("Now call one of these tools.")
    return "\n".join(lines)


def _signature(parameters: dict[str, Any]) -> str:
    """`path (string), limit (integer, optional)`: names and types only. Tiny models copy the
    descriptions of a schema into the values, so the note leaves them out."""
    properties = cast(dict[str, Any], parameters.get("properties", {}))
    required = set(cast(list[str], parameters.get("required", [])))
    shown: list[str] = []
    for name, schema in properties.items():
        kind: object = cast(dict[str, Any], schema).get("type", "value") if isinstance(schema, dict) else "value"
        if isinstance(kind, list):
            kind = "/".join(str(k) for k in cast(list[object], kind))
        shown.append(f"{name} ({kind})" if name in required else f"{name} ({kind}, optional)")
    return ", ".join(shown) or "none"


def render_call(call: ToolCallPart) -> str:
    """A past tool call as the JSON text the model produced, to show it its own turns."""
    return json.dumps({"tool": call.name, "arguments": call.arguments}, ensure_ascii=False)


def parse_constrained(text: str) -> list[Part]:
    """The model's JSON reply as parts: a `ToolCallPart`, or a `TextPart` for `final_answer`.

    Malformed JSON becomes a `ToolCallPart` with `raw_arguments`, so the loop tells the model what
    went wrong. A reply that is not JSON at all (the server ignored the format) is taken as text.
    """
    stripped = _strip_fence(text.strip())
    if not stripped.startswith("{"):
        return [TextPart(text=text)] if text.strip() else []
    try:
        value = json.loads(stripped)
    except ValueError:
        return [_bad_call(_guess_name(stripped), stripped)]
    if not isinstance(value, dict):
        return [_bad_call("unknown", stripped)]
    reply = cast(dict[str, Any], value)
    name = reply.get("tool")
    arguments = reply.get("arguments", {})
    if not isinstance(name, str) or not name:
        return [_bad_call("unknown", stripped)]
    if name == FINAL_ANSWER:
        answer = cast(Any, arguments).get("text") if isinstance(arguments, dict) else arguments
        return [TextPart(text=answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False))]
    if not isinstance(arguments, dict):
        return [_bad_call(name, json.dumps(arguments, ensure_ascii=False))]
    return [ToolCallPart(id=_new_id(), name=name, arguments=cast(dict[str, Any], arguments))]


def _option(name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"tool": {"const": name}, "arguments": parameters},
        "required": ["tool", "arguments"],
        "additionalProperties": False,
    }


def _hoist_defs(tool: str, parameters: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """`parameters` without its `$defs`, which go to `defs` as `<tool>__<name>` with refs rewritten."""
    local = parameters.get("$defs")
    if not isinstance(local, dict) or not local:
        return parameters
    names = cast(dict[str, Any], local)
    renamed = {f"#/$defs/{name}": f"#/$defs/{tool}__{name}" for name in names}

    def rewrite(node: Any) -> Any:
        if isinstance(node, dict):
            items = cast(dict[str, Any], node).items()
            return {
                k: renamed.get(v, v) if k == "$ref" and isinstance(v, str) else rewrite(v)
                for k, v in items
                if k != "$defs"
            }
        if isinstance(node, list):
            return [rewrite(item) for item in cast(list[Any], node)]
        return node

    for name, schema in names.items():
        defs[f"{tool}__{name}"] = rewrite(schema)
    return cast(dict[str, Any], rewrite(parameters))


def _bad_call(name: str, raw: str) -> ToolCallPart:
    return ToolCallPart(id=_new_id(), name=name, arguments={}, raw_arguments=raw)


def _guess_name(text: str) -> str:
    """The tool name of a truncated or broken reply, so the loop's error names the right tool."""
    found = re.search(r'"tool"\s*:\s*"([^"]+)"', text)
    return found.group(1) if found else "unknown"


def _strip_fence(text: str) -> str:
    """Drop a Markdown code fence some models wrap around JSON even when constrained."""
    found = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text, flags=re.DOTALL)
    return found.group(1) if found else text


def _new_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"
