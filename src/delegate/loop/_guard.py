"""The loop guard: an agent that goes round in circles is ended, saying so, instead of spending its
whole step limit (a 135M model called `batch_status` with invented ids 50 times; a real model can
retry a failing command the same way).

Two rules, checked after every turn that called tools:

- **repeated failure**: the same call (the same tool with the same arguments) failed
  `repeated_failures` times (3 by default), whether or not other calls came between;
- **no progress**: `idle_steps` turns in a row (10 by default) made no progress. A turn makes
  progress when one of its calls succeeded and either had not been made before by this agent (the
  same tool with the same arguments) or changed something: wrote a file, or ran a subagent that
  delivered files (the tool says so: `ToolReturn.progress`). Reading the same file again, listing
  the same folder again, or starting the same subagent again with the same prompt is no progress.

The agent then ends `aborted`, its stop reason `repeated_failure` or `no_progress`, with an error
that says what happened and what to try (the model's own advice first: the local model says to use
a real one). Either rule is switched off with None.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from .._config import LoopGuard
from .._empty import empty_dict, empty_set
from .._messages import ToolCallPart, ToolResultPart
from .._record import StopReason

__all__ = ["DEFAULT_ADVICE", "LoopWatch"]

DEFAULT_ADVICE = (
    "Try a more precise prompt or a more capable model; the guard's limits are --max-repeated-failures "
    "and --max-idle-steps (LoopGuard in Python)."
)


@dataclass(slots=True)
class LoopWatch:
    """What one agent's guard has seen so far."""

    guard: LoopGuard
    advice: str = ""
    succeeded: set[str] = field(default_factory=empty_set)
    failures: dict[str, int] = field(default_factory=empty_dict)
    idle: int = 0

    def after_turn(
        self, calls: list[ToolCallPart], results: list[ToolResultPart], progressed: set[str]
    ) -> tuple[StopReason, str] | None:
        """Count one turn's `calls` and their `results` (`progressed`: the ids of calls whose tool
        said they changed something); the stop reason and error when the agent must end."""
        by_id = {call.id: call for call in calls}
        progress = False
        for result in results:
            call = by_id.get(result.tool_call_id)
            if call is None:
                continue
            key = _key(call)
            if result.is_error:
                count = self.failures[key] = self.failures.get(key, 0) + 1
                limit = self.guard.repeated_failures
                if limit is not None and count >= limit:
                    error = (
                        f"went round in circles: it called {call.name} with the same arguments {count} times and "
                        f"every call failed (the last said: {_first_line(result.content)})"
                    )
                    return "repeated_failure", self._advised(error)
            elif key not in self.succeeded or call.id in progressed:
                self.succeeded.add(key)
                progress = True
        self.idle = 0 if progress else self.idle + 1
        limit = self.guard.idle_steps
        if limit is not None and self.idle >= limit:
            turns = "1 turn" if self.idle == 1 else f"{self.idle} turns in a row"
            error = (
                f"made no progress in {turns}: none of its calls did something new "
                "(a call not made before that succeeded, a file written, a subagent that delivered); "
                f"its last calls: {', '.join(sorted({c.name for c in calls}))}"
            )
            return "no_progress", self._advised(error)
        return None

    def _advised(self, error: str) -> str:
        return f"{error}. {self.advice or DEFAULT_ADVICE}"


def _key(call: ToolCallPart) -> str:
    arguments = call.raw_arguments if call.raw_arguments is not None else call.arguments
    return f"{call.name}\0{json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)}"


def _first_line(text: str) -> str:
    line = (text.strip().splitlines() or [""])[0]
    return line if len(line) <= 200 else f"{line[:199]}…"
