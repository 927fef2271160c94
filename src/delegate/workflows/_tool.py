"""The lead's `workflow(script, description)` tool: a plan written as code, run over the run's
subagents, whose result is the script's return value beside the count line.

Its agents are keyed under the tool call's id: a resumed run calls the tool again (it is never
replayed: see `REPLAYED_NEVER`) and its finished agents are answered from the journal. Agents a
workflow starts never get this tool (it is the lead's alone): workflows do not nest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._errors import ToolError, UserError
from ..agents import Catalogue
from ..subagents import MAX_RESULT_CHARS, SubagentRunner
from ..tools import Tool, ToolContext, ToolReturn
from ._host import WorkflowHost
from ._workflow import Workflow, drive

__all__ = ["WORKFLOW_GUIDE", "workflow_tool"]

WORKFLOW_GUIDE = """\
Run a plan written as a short Python script: its agents are subagents (as `task` starts), and only \
the script's return value comes back to you, with a count of how many agents completed and whether \
their acceptance criteria held. Use it when the work is many similar steps (one per file, per \
question) or stages (map, review, merge) that a loop says better than dozens of task calls; for one \
to a few subagents, use task.

In the script (Python without imports, files, clock or randomness):
- agent(prompt, type=, label=, phase=, acceptance=[...], schema={JSON Schema}, isolation=, model=, \
timeout=, token_budget=, cost_budget=) runs one agent and returns its result: a dict with status, summary, result \
(typed, with schema), artifacts, acceptance, holds (True/False/None); it raises RuntimeError if the \
agent failed.
- parallel([call(prompt, ...), ...]) runs them all at once; a failed agent is None in its place.
- pipeline(items, stage, stage, ...): each stage gets an item's value and returns call(...), a list \
of calls, or a plain value; items move on independently; a failed agent ends its item as None.
- phase("name"), log(text), budget.remaining / budget.spent, read(path), glob(pattern), args.
The last expression is the result. Give every agent acceptance criteria ('file:<path> exists', \
'file:<path> non-empty', 'tests_passed:<command>'): "completed" alone says nothing checked it.

Example:
files = glob("docs/*.md")
notes = parallel([call("Summarise " + f + " into notes/" + f.split("/")[-1], label=f, \
acceptance=["file:notes/" + f.split("/")[-1] + " non-empty"]) for f in files])
[n["artifacts"] for n in notes if n and n["holds"]]"""


def workflow_tool(runner: SubagentRunner, catalogue: Catalogue, *, keep: Callable[[str, dict[str, Any]], None]) -> Tool:
    """The lead's `workflow` tool over `runner`'s subagents of the types in `catalogue`; `keep`
    gets each workflow's record (by its tool call id) to store."""

    async def run_workflow(ctx: ToolContext, args: dict[str, Any]) -> ToolReturn:
        try:
            plan = Workflow(script=str(args.get("script") or ""), description=str(args.get("description") or ""))
        except UserError as exc:
            raise ToolError(str(exc)) from None
        call_id = ctx.tool_call_id or "workflow"
        host = WorkflowHost(runner, ctx, catalogue, prefix=f"{call_id}/", emit=ctx.emit, tool_call_id=call_id)
        ended = await drive(plan, host, lambda record: keep(call_id, record))
        text = ended.final
        if len(text) > MAX_RESULT_CHARS:
            text = (
                text[:MAX_RESULT_CHARS] + f"\n[cut: the return value has {len(ended.final):,} characters; return less]"
            )
        if ended.status != "completed":
            raise ToolError(text)
        records = [e.record for e in host.outcome.agents if e.record is not None]
        return ToolReturn(content=text, data=records, progress=any(r.artifacts for r in records))

    return Tool(
        name="workflow",
        description=WORKFLOW_GUIDE,
        parameters={
            "type": "object",
            "properties": {
                "script": {"type": "string", "description": "The plan: a Python script (see the tool's description)."},
                "description": {
                    "type": "string",
                    "maxLength": 120,
                    "description": "Short label (3-10 words) for the progress view and logs.",
                },
            },
            "required": ["script", "description"],
            "additionalProperties": False,
        },
        function=run_workflow,
        watched=False,  # it runs agents: each of their calls is watched itself
    )
