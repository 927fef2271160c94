"""Checking a `task` call's arguments before anything starts: what is wrong becomes a `ToolError`
the lead reads, saying how to fix it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, cast

from .._errors import ToolError
from ..agents import Catalogue, Subagent
from ._acceptance import parse_criteria
from ._prompts import type_listing

ContextMode = Literal["isolated", "snapshot"]
CONTEXT_MODES: tuple[ContextMode, ...] = ("isolated", "snapshot")
MAX_PROMPTS = 100
ARGUMENTS = frozenset(
    {
        "subagent_type",
        "description",
        "prompt",
        "prompts",
        "context_mode",
        "acceptance_criteria",
        "isolation",
        "run_in_background",
    }
)


def validate(
    args: dict[str, Any], catalogue: Catalogue, command_types: Sequence[str]
) -> tuple[Subagent, list[str], str, ContextMode, list[str] | None]:
    """Check a `task` call before anything starts; raise `ToolError` saying what is wrong."""
    unknown = sorted(set(args) - ARGUMENTS)
    if unknown:
        raise ToolError(f"unknown argument(s) {', '.join(unknown)}; see the task tool's schema")
    mode = args.get("context_mode", "isolated")
    if mode not in CONTEXT_MODES:
        raise ToolError(f"context_mode must be 'isolated' or 'snapshot', not {mode!r}")
    name = args.get("subagent_type")
    if name is None:
        available = ", ".join(catalogue.names()) or "none permitted by caller policy"
        raise ToolError(f"subagent_type is missing: name the type of subagent to start ({available})")
    definition = catalogue.get(name) if isinstance(name, str) else None
    if definition is None:
        if name in command_types:
            raise ToolError(
                f"subagent_type {name!r} runs commands, and this workspace does not allow command "
                "execution (the runtime must allow commands, e.g. --allow-commands)"
            )
        names = catalogue.names()
        if len(names) > 30:
            import difflib  # on first use: only a mistyped name needs it

            close = difflib.get_close_matches(str(name), names, n=5, cutoff=0.5)
            hint = f"close names: {', '.join(close)}; " if close else ""
            raise ToolError(
                f"unknown subagent_type {name!r}; {hint}the task tool's description lists all {len(names)} types "
                "(tool_search with a few words finds them by what they do)"
            )
        available = ", ".join(names) or "none permitted by caller policy"
        raise ToolError(f"unknown subagent_type {name!r}; available: {available}")
    description = args.get("description")
    if not isinstance(description, str) or not description.strip():
        raise ToolError("description is required: a short label of 3-7 words")
    if len(description) > 80:
        raise ToolError(f"description is {len(description)} characters; keep it to at most 80")
    prompts = _prompts(args)
    criteria = parse_criteria(args["acceptance_criteria"]) if args.get("acceptance_criteria") else None
    return definition, prompts, description.strip(), mode, criteria


def _prompts(args: dict[str, Any]) -> list[str]:
    prompt, prompts = args.get("prompt"), args.get("prompts")
    if prompt is not None and not isinstance(prompt, str):
        raise ToolError("prompt must be a string")
    if prompts is None:
        if not isinstance(prompt, str) or not prompt.strip():
            raise ToolError("prompt is required (or prompts, a list of prompts to run in parallel)")
        return [prompt]
    if not isinstance(prompts, list) or not prompts:
        raise ToolError("prompts must be a non-empty list of strings")
    items = cast(list[object], prompts)
    if len(items) > MAX_PROMPTS:
        raise ToolError(f"prompts has {len(items)} entries; at most {MAX_PROMPTS} per call")
    texts: list[str] = []
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item.strip():
            raise ToolError(f"prompts[{i}] must be a non-empty string")
        texts.append(f"{prompt.strip()}\n\n{item}" if prompt and prompt.strip() else item)
    return texts


def task_schema(types: list[tuple[str, str]]) -> dict[str, Any]:
    """The `task` tool's parameters over the subagent types `types` (name, description)."""
    listing, short = type_listing(types)
    # The prompts come before the label: models that write arguments in schema order (small ones
    # under a grammar do) put their care into the first free text they write. A large catalogue is
    # listed once, in the tool's description, without the enum (names are checked in code).
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "subagent_type": {
                "type": "string",
                **({"enum": [name for name, _ in types]} if types and not short else {}),
                "description": (
                    "The type of subagent to start: one of the types listed in this tool's description."
                    if short
                    else f"The type of subagent to start. Available types:\n{listing}"
                ),
            },
            "prompt": {
                "type": "string",
                "description": (
                    "Self-contained delegation: the goal, all the context it needs (it has no conversation "
                    "history), the files to write, and scope boundaries."
                ),
            },
            "prompts": {
                "type": "array",
                "items": {"type": "string"},
                "maxItems": MAX_PROMPTS,
                "description": (
                    "One subagent per prompt, run in parallel, results in order. With `prompts`, `prompt` "
                    "(optional) is context shared by all of them, put before each."
                ),
            },
            "description": {
                "type": "string",
                "maxLength": 80,
                "description": "Short label (3-7 words) for the progress view and logs. Not the task itself.",
            },
            "context_mode": {
                "type": "string",
                "enum": list(CONTEXT_MODES),
                "default": "isolated",
                "description": (
                    "isolated (default): the subagent sees only its prompt. snapshot: it also gets a read-only "
                    "copy of this conversation, for requirements or failed attempts scattered across it."
                ),
            },
            "isolation": {
                "type": "string",
                "enum": ["overlay", "shared"],
                "description": (
                    "overlay: the subagent writes into a private layer over the workspace, merged all or nothing "
                    "when it completes (a conflict if the workspace changed the same files meanwhile); use it for "
                    "parallel subagents that may edit the same files. shared (default): it writes the workspace."
                ),
            },
            "acceptance_criteria": {
                "type": "array",
                "items": {"type": "string", "maxLength": 500},
                "maxItems": 20,
                "description": (
                    "Completion conditions, checked in code when the subagent ends where they take one of "
                    "the forms 'file:<path> exists', 'file:<path> non-empty', 'dir:<path> exists', "
                    "'file_written:<path>', 'tests_passed:<command>' (it holds when the command exits 0 and its "
                    "test runner reports tests run, none failed); any other wording is passed on as UNVERIFIED. "
                    "Give the deliverables' paths here: the subagent's summary is its own report, unchecked."
                ),
            },
            "run_in_background": {
                "type": "boolean",
                "default": False,
                "description": (
                    "true: start the subagent(s) and return at once with their ids; keep working, and their "
                    "results come to you as they end (or use task_wait, task_status, task_stop)."
                ),
            },
        },
        "required": ["subagent_type", "description"],
        "additionalProperties": False,
    }
    return schema


Kind = tuple[str, int]


def kind(definition: Subagent) -> Kind:
    """What the runner prepares once: a definition, by its name and identity (a workflow's agent
    with its own model or schema runs a definition derived from its type's, of the same name;
    the catalogue's definitions and the derived ones live as long as the run)."""
    return definition.name, id(definition)
