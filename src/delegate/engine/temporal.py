"""The Temporal engine's public names (imports `temporalio`: install `delegate[temporal]`)."""

from ._batch_activities import BatchActivities, lease_owner
from ._batch_workflow import BatchWorkflow, workflow_id
from ._run_activities import RunActivities, workspace_marker
from ._run_workflow import RunRequest, RunWorkflow, run_workflow_id
from ._temporal import TemporalEngine, TemporalWorker, notifier

__all__ = [
    "BatchActivities",
    "BatchWorkflow",
    "RunActivities",
    "RunRequest",
    "RunWorkflow",
    "TemporalEngine",
    "TemporalWorker",
    "lease_owner",
    "notifier",
    "run_workflow_id",
    "workflow_id",
    "workspace_marker",
]
