"""The `task` tool: the lead starts subagents with a fresh context over the shared workspace.

`task_tool` builds the tool the lead calls, its schema made from the catalogue; each call starts
its subagents through the run's `SubagentRunner` (in the foreground, or in the lead's
`Background`).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from typing import Any

from .._errors import ToolError
from ..agents import Catalogue
from ..models import IdChoice
from ..tools import Tool, ToolContext, ToolReturn
from ._background import BACKGROUND_HINT, Background
from ._output import kept, read
from ._overlay import check_asked
from ._prompts import task_description
from ._roster import Nest
from ._runner import SubagentCall, SubagentRunner
from ._snapshot import build_snapshot
from ._task_args import task_schema, validate

MAX_KEPT_CHARS = 4_000
"""A `task` call's results longer than this keep only status lines and artifact lists in compaction."""


def task_tool(
    runner: SubagentRunner,
    background: Background,
    catalogue: Catalogue,
    *,
    max_parallel: int | None,
    command_types: Sequence[str] = (),
) -> Tool:
    """The lead's `task` tool over the types in `catalogue` (already filtered by caller policy):
    its subagents run through `runner`, those asked for in the background in `background`.

    `command_types` are the types hidden because the workspace does not allow commands, so a call
    naming one says why instead of calling it unknown.
    """
    types = [(d.name, d.description) for d in catalogue.definitions.values()]
    schema = task_schema(types)

    async def run_task(ctx: ToolContext, args: dict[str, Any]) -> ToolReturn:
        nest = runner.roster.nest(ctx.agent_id)
        if not nest.delegates:  # never offered past the depth: a model that names it anyway is refused
            raise ToolError(depth_refusal(ctx.agent_id, nest, runner.roster.max_depth))
        definition, prompts, description, mode, criteria = validate(args, catalogue, command_types)
        asked = check_asked(args.get("isolation"))
        in_background = args.get("run_in_background", False)
        if not isinstance(in_background, bool):
            raise ToolError("run_in_background must be true or false")
        if in_background and nest.depth:
            raise ToolError("a subagent's own subagents run in the foreground: call task without run_in_background")
        runner.prepare(definition)
        first = runner.roster.reserve(len(prompts))
        snapshot = None
        if mode == "snapshot":
            snapshot = build_snapshot(ctx.conversation, pending_tool_call_id=ctx.tool_call_id)
        labels = [
            description if len(prompts) == 1 else f"{description} [{i + 1}/{len(prompts)}]" for i in range(len(prompts))
        ]
        keys = _keys(ctx.tool_call_id, nest, definition.name, prompts)
        ids = [runner.roster.new_id(key) for key in keys]
        runs = [
            runner.run(
                SubagentCall(
                    definition=definition,
                    prompt=prompt,
                    description=labels[i],
                    parent=ctx,
                    tool_call_id=ctx.tool_call_id,
                    criteria=criteria,
                    snapshot=snapshot,
                    seq=first + i,
                    key=keys[i],
                    agent_id=ids[i],
                    background=in_background,
                    isolation=asked,
                )
            )
            for i, prompt in enumerate(prompts)
        ]
        if in_background:
            for agent_id, work in zip(ids, runs, strict=True):
                background.start(agent_id, work)
            lines = [
                f"Started {a} ({definition.name}: {label}) in the background."
                for a, label in zip(ids, labels, strict=True)
            ]
            lines.append(BACKGROUND_HINT)
            return ToolReturn(content="\n".join(lines))
        gathered = asyncio.gather(*runs)  # each in a task of its own: one can be stopped
        outputs = list(await (runner.lending(gathered) if nest.depth else gathered))
        texts, shortened = zip(*map(read, outputs), strict=True)
        if len(outputs) == 1:
            text = texts[0]
        else:
            text = f"{len(outputs)} subagents finished; results in prompt order.\n\n" + "\n\n".join(
                f"## {i + 1}/{len(outputs)}\n{t}" for i, t in enumerate(texts)
            )
        # What compaction keeps: all of it while short, else each result's status, summary and artifacts.
        keep = text if len(text) <= MAX_KEPT_CHARS else kept(outputs, MAX_KEPT_CHARS, shortened)
        delivered = any(o.status == "completed" and o.artifacts for o in outputs)
        return ToolReturn(content=text, keep=keep, data=outputs, progress=delivered)

    return Tool(
        name="task",
        description=task_description(types, max_parallel=max_parallel),
        parameters=schema,
        function=run_task,
        one_of=("prompts", "prompt"),
        id_params={"subagent_type": IdChoice(known=tuple(name for name, _ in types))},
        watched=False,  # it runs subagents: each of their calls is watched itself
    )


def depth_refusal(agent_id: str, nest: Nest, max_depth: int) -> str:
    """What a `task` call past the run's depth is told (see `RunLimits.max_depth`)."""
    if nest.reach < max_depth:
        why = f"its type's max_depth lets its subagents go no deeper than level {nest.reach}"
    else:
        why = f"the run's max_depth is {max_depth}"
    return (
        f"{agent_id} is a subagent at depth {nest.depth} and may not start subagents of its own ({why}). "
        "Do this work yourself with your own tools, and say in your result what is left."
    )


def _keys(call_id: str | None, nest: Nest, type_name: str, prompts: Sequence[str]) -> list[str | None]:
    """What names each subagent of one `task` call within its run, so that one that finished is
    given back, not run again, when the run resumes. The lead's: its tool call id (its answers
    replay on a resume) and the prompt's index. A subagent's: its own key, its call's place among
    its `task` calls and a digest of what it asked (a resumed subagent asks its model again, and
    only the same ask in the same place reuses what finished); none when it has no key."""
    if not nest.depth:
        return [f"{call_id}#{i}" for i in range(len(prompts))]
    nest.calls += 1
    if nest.key is None:
        return [None] * len(prompts)
    digests = [hashlib.sha256(f"{type_name}\0{p}".encode("utf-8", "surrogatepass")).hexdigest()[:16] for p in prompts]
    return [f"{nest.key}>{nest.calls}.{i}:{d}" for i, d in enumerate(digests)]
