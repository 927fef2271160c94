"""The run layer: a `Runtime` starts a run of the lead over a workspace (`_runtime.py`), from
settings an operator gives once (`_settings.py`: `RuntimeSettings`, `RuntimeFactory`, `open_store`);
the `Recorder` keeps its events, checkpoints and records in the store as it goes (`_recorder.py`);
`RunResult` is what it ends with, live or read back (`_run_result.py`); a stored run's events are
followed page by page (`_follow.py`); and runs whose process died are taken over by another
(`_takeover.py`).

Names are imported on first use, as in `delegate` itself: `delegate runs show` reads a stored run
without loading the runtime.

Its `__all__` is for extension authors; users import from `delegate` (docs/api.md).
"""

from typing import TYPE_CHECKING

from .. import _lazy

if TYPE_CHECKING:
    from ._attempts import attempt_factory
    from ._calls import AgentCalls, ModelCall, agent_calls
    from ._follow import PAGE, interrupted_event, stored_events
    from ._gates import Gates, tightened
    from ._open import open_store
    from ._run_result import RunResult, stored_result, stored_run
    from ._runtime import Runtime
    from ._settings import LOCAL_USER, RuntimeFactory, RuntimeSettings
    from ._takeover import Takeover
    from ._threads import Thread
    from ._tracing import flush_traces

_WHERE = {
    "AgentCalls": "._calls",
    "Gates": "._gates",
    "LOCAL_USER": "._settings",
    "ModelCall": "._calls",
    "PAGE": "._follow",
    "RunResult": "._run_result",
    "Runtime": "._runtime",
    "RuntimeFactory": "._settings",
    "RuntimeSettings": "._settings",
    "Takeover": "._takeover",
    "Thread": "._threads",
    "agent_calls": "._calls",
    "flush_traces": "._tracing",
    "attempt_factory": "._attempts",
    "interrupted_event": "._follow",
    "open_store": "._open",
    "stored_events": "._follow",
    "stored_result": "._run_result",
    "stored_run": "._run_result",
    "tightened": "._gates",
}


__getattr__ = _lazy.lazy_names(__name__, _WHERE)


__all__ = [
    "LOCAL_USER",
    "PAGE",
    "AgentCalls",
    "Gates",
    "ModelCall",
    "RunResult",
    "Runtime",
    "RuntimeFactory",
    "RuntimeSettings",
    "Takeover",
    "Thread",
    "agent_calls",
    "attempt_factory",
    "flush_traces",
    "interrupted_event",
    "open_store",
    "stored_events",
    "stored_result",
    "stored_run",
    "tightened",
]
