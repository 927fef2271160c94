"""The Temporal engine's public names (imports `temporalio`: install `delegate[temporal]`)."""

from ._batch_activities import BatchActivities, lease_owner
from ._batch_workflow import BatchWorkflow, workflow_id
from ._temporal import TemporalEngine, TemporalWorker, notifier

__all__ = [
    "BatchActivities",
    "BatchWorkflow",
    "TemporalEngine",
    "TemporalWorker",
    "lease_owner",
    "notifier",
    "workflow_id",
]
