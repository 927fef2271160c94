"""Constrained tool calling, for small models that cannot be trusted to emit tool calls.

Instead of the `tools` field, the server gets a `response_format` whose JSON schema admits exactly
one object of the form `{"tool": <name>, "arguments": <that tool's input>}`, or
`{"tool": "final_answer", "arguments": {"text": ...}}`. A server with grammar-constrained decoding
(llama.cpp, vLLM, Ollama) can then only produce a well-formed call, which `parse_constrained`
turns back into the parts the loop knows.

Grounding: a small model invents paths (`your-path`, `SUMMARY_FILE`), loops (reading one file again
and again) and writes over its inputs. A tool parameter marked as a workspace path
(`ToolSpec.path_params`) is therefore narrowed to an `enum` of the paths its conversation mentions
(the task, tool results) that an earlier call has not named yet and that suit its role in the
request's `path_states` (what the workspace holds there, as the loop found it): an `existing` path
names a file, a `new` one names nothing yet. So the model reads only real files it was told of,
creates only files it was told to, and never writes over a file. A tool left with no path to take
is not offered; lists of paths (`complete`'s `paths`) take any mentioned file. Without path
states, only the mention and the earlier calls count.

Ids are grounded the same way (`ToolSpec.id_params`): a batch id or a subagent type is one of those
that exist (`IdChoice.known`) or that the conversation names (`IdChoice.pattern`), and a tool with
no id to take is not offered (a tiny model called `batch_status` 50 times with ids it made up).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, cast

from .._messages import Message, Part, TextPart, ToolCallPart, ToolResultPart
from ._base import FREE_CHOICES, IdChoice, PathRole, PathState, ToolChoice, ToolSpec

States = Mapping[str, PathState] | None

__all__ = [
    "FINAL_ANSWER",
    "constrained_format",
    "constrained_instructions",
    "free_text_call",
    "lean_specs",
    "mentioned_paths",
    "parse_constrained",
    "render_call",
    "unnumbered",
]

FINAL_ANSWER = "final_answer"
"""The pseudo-tool a constrained model calls to answer; its `text` becomes the reply's text."""

_FINAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
    "additionalProperties": False,
}


def constrained_format(
    tools: list[ToolSpec], messages: list[Message], choice: ToolChoice = "auto", states: States = None
) -> dict[str, Any]:
    """A Chat Completions `response_format` (type `json_schema`) that admits one call of `tools`,
    their path parameters grounded in `messages` and in the workspace's `states` of those paths;
    `final_answer` too when `choice` is `auto`, and only the named tool when `choice` names one. A
    required call that grounding leaves no path to take gives way: to any other tool, and failing
    that to a final answer, since an invented path is worse than no call.

    The choice is an `anyOf` (grammar builders and OpenAI's strict mode support it; `oneOf` less
    so). `"tool"` comes first in each option, so the model commits to a tool before its arguments.
    Each tool's `$defs` are moved to the root under a prefixed name, since `$ref`s resolve there.
    """
    mentioned = mentioned_paths(messages)
    used = _used_paths(messages, tools)
    said = _said(messages)

    def grounded(specs: list[ToolSpec]) -> list[tuple[ToolSpec, dict[str, Any]]]:
        each = [(spec, _ground(spec, mentioned, used, states)) for spec in specs]
        each = [(spec, _ground_ids(spec, parameters, said)) for spec, parameters in each if parameters is not None]
        return [(spec, parameters) for spec, parameters in each if parameters is not None]

    kept = grounded(_offered(tools, choice)) if choice != "none" else []
    if not kept and choice not in FREE_CHOICES:  # the named tool has no path to take: any other will do
        kept = grounded(tools)
    defs: dict[str, Any] = {}
    options = [
        _option(spec.name, _hoist_defs(spec.name, variant, defs))
        for spec, parameters in kept
        for variant in _variants(spec, parameters)
    ]
    if choice in ("auto", "none") or not options:
        options.append(_option(FINAL_ANSWER, _FINAL_SCHEMA))
    schema: dict[str, Any] = {"anyOf": options}
    if defs:
        schema["$defs"] = defs
    return {"type": "json_schema", "json_schema": {"name": "tool_call", "schema": schema}}


def constrained_instructions(tools: list[ToolSpec], choice: ToolChoice = "auto") -> str:
    """The note added to the system prompt: what the tools are and how to call one.

    It shows no placeholder values: tiny models copy them verbatim. A turn whose tool is chosen
    (`choice` names it) describes that tool alone, and a turn that must answer none: a small
    model reads a short prompt better."""
    lines = [
        'You act by answering with exactly one JSON object, nothing else: the name of a tool under "tool" '
        'and its arguments under "arguments".',
        "You will get the tool's result in the next message. Available tools:",
    ]
    if choice == "none":
        return f'Answer now: call "{FINAL_ANSWER}" with "text" set to your final answer, in your own words.'
    if choice not in FREE_CHOICES:
        tools = [spec for spec in tools if spec.name == choice] or tools
    for spec in tools:
        lines.append(f"- {spec.name}: {spec.description.strip()} Arguments: {_signature(spec.parameters)}")
    if choice == "auto":
        lines.append(
            f'When you are done, call "{FINAL_ANSWER}" with "text" set to your final answer, in your own words.'
        )
    elif choice == "required":
        lines.append("Now call one of these tools.")
    else:
        lines.append(f'Now call "{choice}".')
    return "\n".join(lines)


_PATH = re.compile(r"(?<![\w/.:@-])((?:[\w-][\w.-]*/)*[\w-][\w.-]*\.[A-Za-z][A-Za-z0-9]{1,7})(?![\w/-])")
"""A path-like word with an extension of two or more characters: `report.md`, `docs/a.txt`. Not a
URL's host or path (`://` or `@` before it), nor `e.g.`; a one-letter extension (`main.c`) is missed."""


def mentioned_paths(messages: list[Message]) -> list[str]:
    """The paths the user's messages and the tool results mention, in order of first mention."""
    found: dict[str, None] = {}
    for message in messages:
        for part in message.parts:
            if message.role == "user" and isinstance(part, TextPart):
                text = part.text
            elif isinstance(part, ToolResultPart):
                text = part.content
            else:
                continue
            found.update(dict.fromkeys(_PATH.findall(text)))
    return list(found)


def _offered(tools: list[ToolSpec], choice: ToolChoice) -> list[ToolSpec]:
    if choice in FREE_CHOICES:
        return tools
    return [spec for spec in tools if spec.name == choice] or tools


def _used_paths(messages: list[Message], tools: list[ToolSpec]) -> set[str]:
    """The paths earlier calls named in a path parameter."""
    params = {spec.name: spec.path_params for spec in tools}
    used: set[str] = set()
    for message in messages:
        for call in message.tool_calls:
            used.update(v for k, v in call.arguments.items() if k in params.get(call.name, ()) and isinstance(v, str))
    return used


def _ground(spec: ToolSpec, mentioned: list[str], used: set[str], states: States) -> dict[str, Any] | None:
    """`spec`'s parameters with its path parameters narrowed to the `mentioned` paths that suit them,
    or None when a required one has no path left to take."""
    if not spec.path_params:
        return spec.parameters
    properties = dict(cast(dict[str, Any], spec.parameters.get("properties", {})))
    required = cast(list[str], spec.parameters.get("required", []))
    for name, role in spec.path_params.items():
        schema = cast(dict[str, Any] | None, properties.get(name))
        if schema is None:
            continue
        if schema.get("type") == "array":
            files = [path for path in mentioned if _suits(path, role, states)]
            if files:
                properties[name] = {**schema, "items": {"type": "string", "enum": files}}
            continue
        fresh = [path for path in mentioned if path not in used and _suits(path, role, states)]
        if fresh:
            properties[name] = {**schema, "enum": fresh}
        elif name in required:
            return None
        else:
            del properties[name]
    return {**spec.parameters, "properties": properties}


def _said(messages: list[Message]) -> str:
    """The text of the user's messages and the tool results, where ids are named."""
    texts: list[str] = []
    for message in messages:
        for part in message.parts:
            if message.role == "user" and isinstance(part, TextPart):
                texts.append(part.text)
            elif isinstance(part, ToolResultPart):
                texts.append(part.content)
    return "\n".join(texts)


def _ground_ids(spec: ToolSpec, parameters: dict[str, Any], said: str) -> dict[str, Any] | None:
    """`parameters` with each id parameter narrowed to the ids that exist or were named, or None
    when a required one has none to take."""
    if not spec.id_params:
        return parameters
    properties = dict(cast(dict[str, Any], parameters.get("properties", {})))
    required = cast(list[str], parameters.get("required", []))
    for name, choice in spec.id_params.items():
        schema = cast(dict[str, Any] | None, properties.get(name))
        if schema is None:
            continue
        values = _ids(choice, said)
        if values:
            properties[name] = {**schema, "enum": values}
        elif name in required:
            return None
        else:
            del properties[name]
    return {**parameters, "properties": properties}


def _ids(choice: IdChoice, said: str) -> list[str]:
    found = dict.fromkeys(choice.known)
    if choice.pattern:
        found.update(dict.fromkeys(re.findall(choice.pattern, said)))
    return list(found)


def _variants(spec: ToolSpec, parameters: dict[str, Any]) -> list[dict[str, Any]]:
    """`parameters` once per parameter of `spec.one_of`, each time with that one required and the
    others left out: a small model given both mixes them up."""
    properties = cast(dict[str, Any], parameters.get("properties", {}))
    choices = [name for name in spec.one_of if name in properties]
    if not choices:
        return [parameters]
    required = cast(list[str], parameters.get("required", []))
    return [
        {
            **parameters,
            "properties": {k: v for k, v in properties.items() if k == name or k not in choices},
            "required": [*required, name],
        }
        for name in choices
    ]


def _suits(path: str, role: PathRole, states: States) -> bool:
    """Whether `path` is a file (`existing`) or nothing yet (`new`); any path, without `states`."""
    state = None if states is None else states.get(path)
    if state is None:
        return True
    return state == ("file" if role == "existing" else "absent")


def lean_specs(tools: list[ToolSpec]) -> list[ToolSpec]:
    """`tools` without the optional arguments that name no path and are no `one_of` choice: a
    tiny model fills every field it is offered, and a made-up `offset` or `limit` breaks a call
    that the tool's defaults would have made work."""
    return [_lean(spec) for spec in tools]


def _lean(spec: ToolSpec) -> ToolSpec:
    properties = cast(dict[str, Any], spec.parameters.get("properties", {}))
    required = set(cast(list[str], spec.parameters.get("required", [])))
    kept = {
        k: v
        for k, v in properties.items()
        if k in required or k in spec.one_of or k in spec.path_params or k in spec.id_params
    }
    if len(kept) == len(properties):
        return spec
    return replace(spec, parameters={**spec.parameters, "properties": kept})


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


def free_text_call(
    tools: list[ToolSpec], messages: list[Message], choice: ToolChoice, states: States = None
) -> tuple[str, dict[str, Any], str] | None:
    """When the turn's tool is chosen (`choice` names it) and grounding leaves each of its
    required arguments one value but one free text (`write_file`: its one path, and its
    `content`): the tool, the fixed arguments, and the name of the free one. A small model writes
    that text far better as plain prose than inside a JSON object, so the model is asked for the
    text alone and the call is made of it (see `OpenAIModel`). None otherwise."""
    chosen = [spec for spec in tools if spec.name == choice]
    if not chosen or choice in FREE_CHOICES:
        return None
    schema = constrained_format(chosen, messages, choice, states)["json_schema"]["schema"]
    options = cast(list[dict[str, Any]], schema["anyOf"])
    if len(options) != 1 or options[0]["properties"]["tool"].get("const") != choice:
        return None
    arguments = cast(dict[str, Any], options[0]["properties"]["arguments"])
    fixed: dict[str, Any] = {}
    free: list[str] = []
    for name in cast(list[str], arguments.get("required", [])):
        prop = cast(dict[str, Any], arguments.get("properties", {}).get(name, {}))
        enum = prop.get("enum")
        if isinstance(enum, list) and len(cast(list[Any], enum)) == 1:
            fixed[name] = cast(list[Any], enum)[0]
        elif prop.get("type") == "string" and enum is None:
            free.append(name)
        else:
            return None
    return (choice, fixed, free[0]) if len(free) == 1 else None


_NUMBERED = re.compile(r"^ *\d+\t", re.MULTILINE)


def unnumbered(text: str) -> str:
    """`text` without the line numbers of a numbered listing (`     1\tfirst line`), when every
    line has one; any other text as it is."""
    lines = text.splitlines()
    if not lines or not all(_NUMBERED.match(line) for line in lines if line):
        return text
    return _NUMBERED.sub("", text)


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
