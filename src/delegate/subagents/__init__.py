"""The subagent layer: the `task` tool, `complete`, snapshots, acceptance checks, prompts.

Its `__all__` is for extension authors; users import from `delegate` (docs/api.md).
"""

from ..workspace import recover_merges, sweep_layers
from ._acceptance import Baseline, Verdict, check_criteria, parse_criteria, snapshot_before
from ._assemble import RunScope, assemble, toolset
from ._background import BACKGROUND_TOOLS, Background, background_tools
from ._complete import COMPLETE_TOOL, Delivery
from ._context import project_context
from ._hooks import run_checked
from ._output import MAX_RESULT_CHARS, Artifact, Skipped, TaskOutput, TaskStatus
from ._prompts import LEAD_INSTRUCTIONS, SUBAGENT_INSTRUCTIONS, first_sentence, type_listing
from ._roster import Roster
from ._runner import Keeping, SubagentCall, SubagentRunner
from ._task import task_tool

__all__ = [
    "BACKGROUND_TOOLS",
    "COMPLETE_TOOL",
    "LEAD_INSTRUCTIONS",
    "MAX_RESULT_CHARS",
    "SUBAGENT_INSTRUCTIONS",
    "Artifact",
    "Background",
    "Baseline",
    "Delivery",
    "Keeping",
    "Roster",
    "RunScope",
    "Skipped",
    "SubagentCall",
    "SubagentRunner",
    "TaskOutput",
    "TaskStatus",
    "Verdict",
    "assemble",
    "background_tools",
    "check_criteria",
    "first_sentence",
    "parse_criteria",
    "project_context",
    "recover_merges",
    "run_checked",
    "snapshot_before",
    "sweep_layers",
    "task_tool",
    "toolset",
    "type_listing",
]
