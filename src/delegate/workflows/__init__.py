"""Workflows: a plan written as a Python script, run in a sandbox, whose `agent()` calls are the
run's subagents (see docs/workflows.md).

For extension authors: users meet `Workflow` (at the top of `delegate`), `Runtime.run(...,
workflow=...)`, `delegate workflow run` and the lead's `workflow` tool. Names are imported on
first use, as in `delegate` itself: reading a stored run's record (`WORKFLOW`) loads no host.
"""

from typing import TYPE_CHECKING

from .. import _lazy

if TYPE_CHECKING:
    from ._host import AGENT_OPTIONS, WorkflowHost
    from ._journal import Journal, is_workflow_key
    from ._outcome import Outcome, agent_result, count_line, verdict_of
    from ._sandbox import ScriptError, ScriptLimits, run_script
    from ._tool import WORKFLOW_GUIDE, workflow_tool
    from ._workflow import Workflow, drive, render, shipped_workflows

WORKFLOW = "workflow"
"""The kind of the checkpoints that keep a workflow's record (key `run` for a run that is a
workflow; the lead's tool call id for one the lead started)."""

_WHERE = {
    "AGENT_OPTIONS": "._host",
    "Journal": "._journal",
    "Outcome": "._outcome",
    "ScriptError": "._sandbox",
    "ScriptLimits": "._sandbox",
    "WORKFLOW_GUIDE": "._tool",
    "Workflow": "._workflow",
    "WorkflowHost": "._host",
    "agent_result": "._outcome",
    "count_line": "._outcome",
    "drive": "._workflow",
    "is_workflow_key": "._journal",
    "render": "._workflow",
    "run_script": "._sandbox",
    "shipped_workflows": "._workflow",
    "verdict_of": "._outcome",
    "workflow_tool": "._tool",
}

__getattr__ = _lazy.lazy_names(__name__, _WHERE)

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
