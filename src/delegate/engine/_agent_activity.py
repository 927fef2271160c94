"""How an agent's activity is scheduled on Temporal, the same for a batch item's subagent
(`_batch_workflow.py`) and a run's lead (`_run_workflow.py`): one place to change either.

Imported inside Temporal's workflow sandbox (delegate passes through it): temporalio only.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

AGENT_START_TO_CLOSE = timedelta(days=7)
"""How long one attempt of an agent may take in all: long, since an agent may wait for a person or
work for hours; a dead worker is found by the heartbeat timeout, not by this."""
AGENT_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))
"""A worker that died (its heartbeats stopped): the agent runs again on another worker after a
second, then backing off to at most every 30 s, for as long as it takes (no attempt limit: what
an attempt may cost is counted in the store, which ends the item or run at its own limits)."""


def heartbeat(seconds: float) -> timedelta:
    """The heartbeat timeout of an agent's activity (the engine's `heartbeat_timeout`)."""
    return timedelta(seconds=seconds)
