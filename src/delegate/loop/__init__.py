"""The agent loop: one agent's turns against its model and tools until it answers or a limit ends
it (`_loop.py`), the guard that ends an agent going round in circles (`_guard.py`), and the cut that
makes a request fit the model's context window (`_fit.py`). The lead and every subagent run here;
what they run is built by `delegate.subagents` (`assemble`) from the settings in `delegate._config`.

Its `__all__` is for extension authors; users import from `delegate` (docs/api.md).
"""

from ._budget import RunBudget
from ._deadline import Deadline, passed_deadline
from ._guard import DEFAULT_ADVICE, LoopWatch
from ._loop import (
    EVENT_VALUE_LIMIT,
    AgentResult,
    AgentSpec,
    Inbox,
    Journal,
    ToolGate,
    opening_choices,
    path_states,
    run_agent,
)
from ._pause import deadlines_paused, on_wait
from ._watchdog import Watchdog

__all__ = [
    "DEFAULT_ADVICE",
    "EVENT_VALUE_LIMIT",
    "AgentResult",
    "AgentSpec",
    "Deadline",
    "Inbox",
    "Journal",
    "LoopWatch",
    "RunBudget",
    "ToolGate",
    "Watchdog",
    "deadlines_paused",
    "on_wait",
    "opening_choices",
    "passed_deadline",
    "path_states",
    "run_agent",
]
