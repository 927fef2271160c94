"""Where work executes: the embedded engine (in-process, the default) or Temporal (scale-out).

```python
from delegate.engine import EngineSettings

EngineSettings.parse("temporal://127.0.0.1:7233/default")   # or EngineSettings.from_env()
```

The embedded engine is what runs without a server: a run's lead and subagents run in the process
that started it, and batches are served by `delegate.batch.BatchWorker` in-process (or by
`delegate batch worker` processes on one machine). On Temporal, `delegate worker --engine ...`
processes on any number of machines serve the deployment's task queue, and the store (PostgreSQL)
still holds what the CLI, the HTTP API and the web page read. `docs/scale-out.md` shows the
deployment.

The Temporal side (`TemporalEngine`, `TemporalWorker`) lives in `delegate.engine.temporal`, which
imports `temporalio` (the `temporal` extra): nothing here does.
"""

from ._settings import ENGINE_ENV, EngineKind, EngineSettings

__all__ = ["ENGINE_ENV", "EngineKind", "EngineSettings"]
