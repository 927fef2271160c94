"""The words the framework says to models: the lead's and subagents' system prompts, and the
`task` tool's description with its delegation guidance."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Collection, Mapping, Sequence

from .._messages import Message
from ..loop import path_states
from ..models import Model, PathState, ToolChoice
from ..workspace import Workspace

LEAD_INSTRUCTIONS = """\
You are the lead agent of a team. You work in a workspace folder shared with your subagents, using \
your tools to read and write files. For work that spans several files or several independent \
questions, delegate with the `task` tool: each subagent starts fresh, does its part, writes its \
results to files, and returns a short summary with the paths. Read their files when you need the \
detail. A subagent's summary is its own report of what it did, not a check of it: when the deliverable \
is a file or a passing test run, give it as `acceptance_criteria` (for example "file:reports/a.md \
non-empty", "tests_passed:pytest -q") and it is checked in code when the subagent ends. When the work \
is done, answer with a concise final report."""

SUBAGENT_INSTRUCTIONS = """\
You are a subagent: another agent delegated one task to you. You have no access to its \
conversation; everything you know is in the task message below. You cannot ask questions and cannot \
delegate further: work it out with your tools. You share the workspace with other agents working at \
the same time, so write only the files your task names (or new files with names of your own that no \
one else would choose). When you are done, call `complete` exactly once with a short, specific \
summary and the paths of the files you wrote; that ends your work. If the task cannot be done, call \
`complete` with a summary that says why."""


def outputs_note(outputs: str) -> str:
    """The line of every agent's system prompt that names the run's outputs folder (spec 002)."""
    return (
        f"Outputs folder: write the files you deliver (reports, results, anything meant for the user) into "
        f"`{outputs}/`, and give their paths in your report. Paths may also be spelt `/mnt/user-data/workspace/...` "
        f"(the workspace) and `/mnt/user-data/outputs/...` (the outputs folder) in file tools, `complete` and "
        "acceptance criteria; shell commands take workspace-relative paths."
    )


FULL_LISTING_CHARS = 6_000
"""A catalogue whose listing fits in this many characters is shown with full descriptions."""
SHORT_LISTING_CHARS = 17_300
"""Otherwise the listing is cut to about this, as sent (JSON escapes counted): every name, and each
description's first sentence while that fits, so that with the rest of the lead's first request
(14.6 KB measured: its prompt, the file tools, the `task` prose, `workflow`'s 2.1 KB guide) 150 or
500 types stay within 32 KB. It was 19,000 before the `workflow` tool."""
FIRST_SENTENCE_CHARS = 160
"""The most of a description's first sentence a shortened listing gives a type."""
MIN_SHORT = 24


def type_listing(types: list[tuple[str, str]]) -> tuple[str, bool]:
    """The subagent types as the `task` tool lists them, and whether descriptions were shortened.
    A large catalogue keeps every name (each stays reachable) and each description's first
    sentence, up to `FIRST_SENTENCE_CHARS`: the room is shared fairly, a short sentence leaving
    what it does not need to the longer ones, and only sentences longer than the share are cut;
    past that, names alone. The full description is a `tool_search` away."""
    full = "\n".join(f"- {name}: {description}" for name, description in types)
    if len(full) <= FULL_LISTING_CHARS:
        return full, False
    firsts = [first_sentence(description) for _, description in types]
    room = SHORT_LISTING_CHARS - sum(_sent(name) + 6 for name, _ in types)
    share = _fair_share([_sent(first) for first in firsts], room, FIRST_SENTENCE_CHARS)
    if share < MIN_SHORT:
        return "Types (names only): " + ", ".join(name for name, _ in types), True
    cut = [_cut(first, share - (_sent(first) - len(first))) for first in firsts]  # what escapes cost, left out
    return "\n".join(f"- {name}: {first}" for (name, _), first in zip(types, cut, strict=True)), True


def _sent(text: str) -> int:
    """What `text` costs in a request's JSON: a character, or the escape it is sent as (`\\u2014`
    for a dash, `\\"` for a quote). A catalogue of 162 definitions whose descriptions are full of
    them overran the 32 KB bound when counted in characters."""
    return len(json.dumps(text)) - 2


def first_sentence(text: str) -> str:
    """A description's first sentence, on one line."""
    return " ".join(text.split()).split(". ")[0].rstrip(".")


def _fair_share(lengths: list[int], room: int, most: int) -> int:
    """The largest share (at most `most`) such that every text cut to it fits in `room` together."""
    left, count = room, len(lengths)
    for length in sorted(lengths):
        share = left // max(1, count)
        if length > share:
            return min(share, most)
        left -= length
        count -= 1
    return most


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[: limit - 1].rsplit(" ", 1)[0]
    return f"{cut}…"


def task_description(types: list[tuple[str, str]], *, max_parallel: int | None) -> str:
    """The `task` tool's description: when and how to delegate well. `max_parallel` None: no cap."""
    listing, short = type_listing(types)
    at_once = f"up to {max_parallel} run at once" if max_parallel else "all of them run at once (no cap)"
    if short:
        listing += (
            f"\n({len(types)} types; descriptions shortened. For a type's full description, or to find types by "
            'what they do, call tool_search with "agent:<name>" or a few words.)'
        )
    return f"""\
Start a subagent to do a piece of work for you, with a fresh context over the same workspace. It \
returns a short summary, its status, and the files it wrote (paths and sizes) — not its transcript, \
so your context stays small. Delegate generously: work that needs several files read or written, \
independent questions that can run side by side, and heavy reading whose details you don't need to \
keep. Pass `prompts` (a list) to start one subagent per prompt in parallel — {at_once}, \
and results come back in the order of the prompts; several `task` calls in one turn also run in \
parallel. Don't delegate a single step you can do with one tool call, nor a wide or vague task \
("explore the codebase"): ask a precise question. If a subagent already answered something, use \
its result and files — do not start another one for it.

Available subagent types:
{listing}

Writing the prompt: the subagent knows nothing of this conversation and cannot ask you anything. \
Make each prompt self-contained: the goal, the inputs (with paths), what to write and where, the \
format, and what not to do. A bad prompt has a vague goal, refers to "what we discussed" (the \
subagent cannot see it), or does not say what to deliver. Parallel subagents share the workspace, so \
give each one its own output file names.

A subagent's result is a self-report: its summary says what it believes it did, and nothing checks \
it. When the deliverable is a file or a test run, list it in `acceptance_criteria` (for example \
"file:reports/a.md non-empty", "tests_passed:pytest -q") and it is checked in code when the subagent \
ends: the result then carries an acceptance checklist of what holds."""


MAX_INPUTS = 3
"""A task that names more files to read than this is not a one-file task."""


def opening_turns(
    states: Mapping[str, PathState], tools: Collection[str], *, finish: ToolChoice = "none"
) -> tuple[list[ToolChoice], str]:
    """The first turns of a weak model's agent, chosen for its task's shape, and a note of them
    for its instructions (nothing when the task has no shape we know).

    `states` says what the workspace holds at each path the task names. A one-file task (files to
    read, at most `MAX_INPUTS`, and one new file to write: a summary, a list of steps, a title) is
    done in order: read each, write the new file, then `finish` (`none`: answer; a subagent's
    `complete`). A question about files (none to write) reads them, then answers. A task that asks
    for several new files delegates once, one subagent per file (`task`). Small models copy the
    steps they are told far better than they plan them; the grammar then holds each step's path
    to the task's files.
    """
    inputs = [path for path, state in states.items() if state == "file"]
    outputs = [path for path, state in states.items() if state == "absent"]
    reads = ["read_file"] * len(inputs)
    if not 1 <= len(inputs) <= MAX_INPUTS or "read_file" not in tools:
        inputs = []
    ending = (
        "call complete with a one-line summary and the path you wrote"
        if finish == "complete"
        else ("answer in one line, saying what you wrote")
    )
    if inputs and len(outputs) == 1 and "write_file" in tools:
        note = (
            f"Your steps: read {_listed(inputs)} with read_file; then write {outputs[0]} with write_file, its "
            f"content what the task asks for, in your own words, from what you read; then {ending}."
        )
        return [*reads, "write_file", finish], note
    if inputs and not outputs:
        return [*reads, finish], f"Your steps: read {_listed(inputs)} with read_file; then answer the task from it."
    if len(outputs) > 1 and "task" in tools:
        note = (
            "Your first step: call task once, with one prompt per file to write, each naming its inputs and its file."
        )
        return ["task"], note
    return [], ""


def prompt_shaped(model: Model, given: ToolChoice | Sequence[ToolChoice]) -> bool:
    """Whether `shaped_opening` shapes an agent's opening by its prompt (else it is `given`)."""
    return given == "auto" and model.profile.grounds_paths


async def shaped_opening(
    model: Model,
    workspace: Workspace,
    prompt: str,
    tools: Collection[str],
    given: ToolChoice | Sequence[ToolChoice],
    *,
    finish: ToolChoice = "none",
) -> tuple[ToolChoice | Sequence[ToolChoice], str]:
    """An agent's first tool choices and a note of its steps: what it was `given`, unless that is
    `auto` and its model is weak (it grounds its calls), which then gets `opening_turns`."""
    if not prompt_shaped(model, given):
        return given, ""
    states = await asyncio.to_thread(path_states, workspace, [Message.user(prompt)])
    opening, steps = opening_turns(states, tools, finish=finish)
    return (opening or given), steps


def _listed(paths: list[str]) -> str:
    return paths[0] if len(paths) == 1 else ", ".join(paths[:-1]) + f" and {paths[-1]}"
