"""A run on Temporal: one workflow per run, its lead agent one heartbeating activity.

Workflow `delegate.run`, id `run:<run id>`. Its one activity, `delegate.run.lead` (id
`lead:<run id>`), runs the run's lead (and the subagents it starts, in the same process) on a
worker that holds the run's workspace, recording every answer and tool result in the store as it
goes (the run's checkpoints). A worker that dies stops heartbeating; after the heartbeat timeout
Temporal runs the activity again on another worker, which resumes the run from its checkpoints
(`Runtime.resume`): answers and tool results recorded before are replayed, not asked or run
again, so usage and records count once. Cancelling the workflow cancels the activity, which asks
the run to stop: it ends `cancelled` with what it spent kept.

This module runs inside Temporal's workflow sandbox: it imports nothing of delegate at run time.
"""

from __future__ import annotations

from dataclasses import dataclass

from temporalio import workflow
from temporalio.workflow import ActivityCancellationType

from ._agent_activity import AGENT_RETRY, AGENT_START_TO_CLOSE, heartbeat

RUN_WORKFLOW = "delegate.run"
LEAD = "delegate.run.lead"


@dataclass(kw_only=True)
class RunRequest:
    """A run to execute: what `delegate run` was given, and where its files are."""

    run_id: str
    prompt: str
    model: str | None
    limits: str
    """Its `RunLimits.to_dict()`, as JSON ("": a resumed run's own, as stored)."""
    workspace: str
    """The absolute path of its workspace: only a worker whose workspace it is runs it."""
    marker: str
    """The workspace's id (`.delegate/workspace-id`), which that worker's copy must hold too."""
    heartbeat_timeout: float
    gates: str = ""
    """The gates of the process that started it (its `Gates.stored()`, as JSON): the worker runs
    it under them, its own rules only added ("": the worker's own, what a run started before
    the gates travelled had)."""
    continue_from: str | None = None
    """The run whose thread it continues (`delegate run --continue`)."""
    workflow: str = ""
    """Its workflow (`Workflow.to_dict()`, as JSON), run instead of the lead (`--workflow FILE`)."""


def run_workflow_id(run_id: str) -> str:
    return f"run:{run_id}"


@workflow.defn(name=RUN_WORKFLOW)
class RunWorkflow:
    @workflow.run
    async def run(self, request: RunRequest) -> str:
        """The run's end status (`completed`, `cancelled`, ...), as stored."""
        return await workflow.execute_activity(
            LEAD,
            request,
            result_type=str,
            activity_id=f"lead:{request.run_id}",
            summary=f"run {request.run_id} lead",
            start_to_close_timeout=AGENT_START_TO_CLOSE,
            heartbeat_timeout=heartbeat(request.heartbeat_timeout),
            retry_policy=AGENT_RETRY,
            cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )
