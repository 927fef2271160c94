"""Workflows: a plan written as a Python script, run in a sandbox, whose `agent()` calls are the
run's subagents (see docs/workflows.md).

For extension authors: users meet `Workflow` (at the top of `delegate`), `Runtime.run(...,
workflow=...)`, `delegate workflow run` and the lead's `workflow` tool.
"""

from ._host import AGENT_OPTIONS, WorkflowHost
from ._journal import Journal, is_workflow_key
from ._outcome import Outcome, agent_result, count_line, verdict_of
from ._sandbox import ScriptError, ScriptLimits, run_script
from ._tool import WORKFLOW_GUIDE, workflow_tool
from ._workflow import Workflow, drive, render, shipped_workflows

WORKFLOW = "workflow"
"""The kind of the checkpoints that keep a workflow's record (key `run` for a run that is a
workflow; the lead's tool call id for one the lead started)."""

__all__ = [
    "AGENT_OPTIONS",
    "WORKFLOW",
    "WORKFLOW_GUIDE",
    "Journal",
    "Outcome",
    "ScriptError",
    "ScriptLimits",
    "Workflow",
    "WorkflowHost",
    "agent_result",
    "count_line",
    "drive",
    "is_workflow_key",
    "render",
    "run_script",
    "shipped_workflows",
    "verdict_of",
    "workflow_tool",
]
