"""Durable batches: thousands of independent items, each run as a subagent, surviving restarts.

The API the CLI (`delegate batch ...`), the HTTP server (`/api/v1/batches...`) and the lead's tools
call. Every operation takes the caller's `user_id`; another user's batch is not found
(`BatchNotFoundError`, a `UserError`: HTTP 404, exit code 2).

```python
from delegate._store import Store
from delegate.batch import Batches, BatchWorker

batches = Batches(Store.for_workspace(ws))          # applies our migrations (batch.0001_tables)
sub = batches.submit(user_id, subagent_type="general-purpose", title="READMEs",
                     items=[{"key": "repo-1", "prompt": "...", "acceptance_criteria": [...]}],
                     max_running_items=3, max_live_items=100,
                     run_id=run_id, tool_call_id=call_id,       # optional: idempotent resubmission
                     known_types=catalogue_names)               # optional: reject unknown types
sub.batch.id, sub.created                 # created=False: the same (run_id, tool_call_id) again

batches.get(user_id, batch_id)            # Batch: status, counts per item status, caps, times
batches.list_batches(user_id, offset=0, limit=50)
batches.items(user_id, batch_id, status="failed", offset=0, limit=100)   # list[BatchItem]
item.record                               # its subagent's TaskOutput, stored whole (None: none ran)
batches.item(user_id, batch_id, key)
batches.pause(user_id, batch_id)          # no new starts; running items finish
batches.resume(user_id, batch_id)
batches.cancel(user_id, batch_id)         # durable: never runs again, running items are stopped
batches.retry(user_id, batch_id)          # all failed items -> queued; returns how many
batches.retry(user_id, batch_id, key)     # one failed item
for row in batches.export_rows(user_id, batch_id): ...   # JSON Lines rows, read a page at a time

async with BatchWorker(batches, runtime, concurrency=500) as worker:   # runtime: an ItemRunner,
                                          # whose run_task gives back the subagent's TaskOutput
    await worker.wait(user_id, batch_id)      # `submit` without --detach: serve until it ends
    await worker.serve_forever()              # `delegate batch worker`: until worker.stop()
```

Statuses: an item is `queued`, `running`, `succeeded`, `failed` or `cancelled`; `succeeded` means
the execution finished, and its acceptance verdict (`BatchItem.acceptance`) is kept separately.
A batch is `running` or `paused` while any item is queued or running, then `completed` (no item
failed) or `failed`; or `cancelled`. `Batch.done` is True for the last three.

Limits (checked before anything is stored; a rejected submission stores nothing and raises
`BatchValidationError` listing every problem): 1 to `MAX_ITEMS` (100,000) items with non-empty,
unique string keys (at most 256 characters) and non-empty prompts; `max_running_items` 1-1,000 (default
3); `max_live_items` 1-10,000 (default 100, or `max_running_items` when higher), and
`max_running_items <= max_live_items`; `max_attempts` 1-10 (default 3).

Caps: at most `max_running_items` items of a batch run at once, and at most `max_live_items` are
claimed by workers (running, or waiting out a retry backoff), across every worker process; workers
sharing a batch each take an equal part. An attempt that ends in error, times out or aborts is
retried after a backoff, up to the batch's `max_attempts`; a `UserError` from the runner fails the
item at once; a failed acceptance verdict is never retried. A worker that dies (SIGKILL, lost
machine) loses nothing: its items run again from the start elsewhere once its heartbeat lapses
(`heartbeat_ttl`, 30 s), or at once on the same machine; each result is stored exactly once.

Events (`BatchWorker(emit=...)`): `batch.item` for each stored attempt (`batch_id`, `key`, `status`,
`attempt`, `retrying`) and `batch.completed`, with `run_id` the submitting run (or `batch-<id>`).

Databases: SQLite by default (the store's file); with a `postgresql://` store, any number of
`BatchWorker`s share the work. For more than one machine, batches run on Temporal (`Batches(store,
engine="temporal")`, served by `delegate.engine.temporal.TemporalWorker`; see docs/scale-out.md).

The lead's tools: `batch_tools(batches, known_types=...)` gives `batch_task`, `batch_status` and
`cancel_batch`. A runtime that offers them should also give subagent types for batch items no
`list_uploaded_files` tool.

Its `__all__` is for extension authors; users import from `delegate` (docs/api.md).
"""

from ._engine import BatchWorker, ItemRunner, RunnerFactory, run_attempt
from ._migrations import BATCH_MIGRATIONS
from ._model import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_LIVE_ITEMS,
    DEFAULT_MAX_RUNNING_ITEMS,
    ITEM_STATUSES,
    MAX_ATTEMPTS_LIMIT,
    MAX_INTERRUPTIONS,
    MAX_ITEMS,
    MAX_LIVE_ITEMS,
    MAX_RUNNING_ITEMS,
    Batch,
    BatchItem,
    BatchNotFoundError,
    BatchStateError,
    BatchStatus,
    BatchValidationError,
    ItemInput,
    ItemStatus,
    Submission,
    loads_json,
    repeated_fields,
)
from ._queue import AttemptResult, ClaimedItem, ServeInfo, Taken, WorkQueue
from ._store import BatchEngine, Batches, BatchStoreError
from ._tools import batch_tools

__all__ = [
    "BATCH_MIGRATIONS",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_MAX_LIVE_ITEMS",
    "DEFAULT_MAX_RUNNING_ITEMS",
    "ITEM_STATUSES",
    "MAX_ATTEMPTS_LIMIT",
    "MAX_INTERRUPTIONS",
    "MAX_ITEMS",
    "MAX_LIVE_ITEMS",
    "MAX_RUNNING_ITEMS",
    "AttemptResult",
    "Batch",
    "BatchEngine",
    "BatchItem",
    "BatchNotFoundError",
    "BatchStateError",
    "BatchStatus",
    "BatchStoreError",
    "BatchValidationError",
    "BatchWorker",
    "Batches",
    "ClaimedItem",
    "ItemInput",
    "ItemRunner",
    "ItemStatus",
    "RunnerFactory",
    "ServeInfo",
    "Submission",
    "Taken",
    "WorkQueue",
    "batch_tools",
    "loads_json",
    "repeated_fields",
    "run_attempt",
]
