"""An evaluation: every (arm, task, attempt) run as an ordinary run, judged in code, durably.

```python
evaluation = Evaluation.create(store, suite, arms, repeat=2, factory=factory, root=ws / ".delegate" / "evals")
report = await evaluation.run()            # a killed one: Evaluation.open(store, eval_id, ...).run()
```

`factory(arm, folder)` builds the runtime of one attempt: this arm's configuration over the folder
the attempt works in (a fresh copy of the task's starting files). `delegate.run.attempt_factory`
is the one the CLI uses. Each attempt is a run of that runtime, tagged with the eval, arm, task and
attempt (`RunRow.eval`), so `runs show`, the page, traces and cost see it as any run.

Durable: the attempt's run id is stored before its run starts and its judgement as soon as it is
made, so a resumed eval reads judged attempts, judges runs that ended, resumes interrupted runs
(which themselves resume without paying again for what finished) and starts runs only for
attempts that had none: every attempt exactly once, its usage counted once.
"""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from .._config import RunLimits
from .._errors import UserError
from .._messages import Message
from .._store import RunRow, Store
from .._usage import Usage
from ..subagents import Baseline, snapshot_before
from ..workflows import Workflow
from ..workspace import Workspace
from ._arms import Arm
from ._judge import judge
from ._report import EvalReport, build_report
from ._store import AttemptKey, AttemptRow, EvalRow, Evals
from ._suite import Suite, Task

__all__ = ["AttemptFactory", "AttemptRuntime", "Budget", "Evaluation", "equal_budget"]

ENDED = ("completed", "aborted", "error", "timed_out", "cancelled")


class RunEnd(Protocol):
    """What an attempt's run ends with (a `delegate.RunResult` is one)."""

    @property
    def run_id(self) -> str: ...
    @property
    def status(self) -> Any: ...
    @property
    def final(self) -> str: ...
    @property
    def messages(self) -> list[Message]: ...


class AttemptRuntime(Protocol):
    """What runs one attempt (a `delegate.Runtime` is one)."""

    @property
    def workspace(self) -> Workspace: ...

    async def run(
        self,
        prompt: str,
        *,
        run_id: str | None = None,
        limits: RunLimits | None = None,
        workflow: Workflow | str | None = None,
        eval_tag: dict[str, Any] | None = None,
    ) -> RunEnd: ...

    async def resume(self, run_id: str) -> RunEnd: ...

    async def aclose(self) -> None: ...


AttemptFactory = Callable[[Arm, Path], AttemptRuntime]
"""Builds the runtime of an arm's attempt over its folder: see the module's docstring."""


@dataclass(frozen=True, kw_only=True)
class Budget:
    """`--equal-budget`: every arm gets the same per-task budget of `kind`, `value` tokens or USD."""

    kind: Literal["tokens", "cost"]
    value: float

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "value": self.value}


def equal_budget(
    kind: str, value: float | None, arms: Sequence[Arm], base: RunLimits
) -> tuple[Budget, tuple[Arm, ...]]:
    """The budget every arm gets (`value`, else the smallest any arm or the operator's limits set),
    and the arms with it. `UserError` when there is none to take."""
    if kind not in ("tokens", "cost"):
        raise UserError(f"--equal-budget {kind!r}: tokens or cost, optionally =N (tokens=50000, cost=0.5)")
    field = "token_budget" if kind == "tokens" else "cost_budget"
    found: list[float] = [v for v in (*(getattr(a, field) for a in arms), getattr(base, field)) if v is not None]
    if value is None and not found:
        raise UserError(
            f"--equal-budget {kind}: no arm and no flag sets a {kind} budget to take the smallest of; "
            f"give one: --equal-budget {kind}={'50000' if kind == 'tokens' else '0.50'}"
        )
    amount: float = value if value is not None else min(found)
    if not amount > 0:
        raise UserError(f"--equal-budget {kind}={amount}: give a positive number")
    amount = int(amount) if kind == "tokens" else float(amount)
    budget = Budget(kind="tokens" if kind == "tokens" else "cost", value=amount)
    return budget, tuple(replace(a, **{field: amount}) for a in arms)


class Evaluation:
    """An eval in the store, and how to run (or resume) it: see the module's docstring."""

    def __init__(
        self,
        evals: Evals,
        row: EvalRow,
        factory: AttemptFactory,
        root: Path,
        *,
        max_parallel: int = 4,
        on_attempt: Callable[[AttemptKey, dict[str, Any]], None] | None = None,
    ) -> None:
        self.evals = evals
        self.row = row
        self.tasks = {t["id"]: Task.from_dict(t) for t in row.spec["tasks"]}
        self.arms = {a["name"]: Arm.from_dict(a) for a in row.spec["arms"]}
        self._factory = factory
        self.folder = root / row.id
        self._slots = asyncio.Semaphore(max_parallel)
        self.on_attempt = on_attempt
        """Called with each attempt's key and judgement as it is judged (progress)."""

    @property
    def id(self) -> str:
        return self.row.id

    @classmethod
    def create(
        cls,
        store: Store,
        suite: Suite,
        arms: Sequence[Arm],
        factory: AttemptFactory,
        root: Path,
        *,
        repeat: int = 1,
        budget: Budget | None = None,
        user_id: str | None = None,
        max_parallel: int = 4,
        on_attempt: Callable[[AttemptKey, dict[str, Any]], None] | None = None,
    ) -> Evaluation:
        """Store a new eval of `suite`'s tasks under `arms`, each `repeat` times (nothing runs yet)."""
        if not arms:
            raise UserError("an eval compares at least one arm: --arm NAME=OPTIONS")
        names = [a.name for a in arms]
        if len(set(names)) != len(names):
            raise UserError(f"arm names are used twice: {', '.join(sorted({n for n in names if names.count(n) > 1}))}")
        if repeat < 1:
            raise UserError("--repeat is a whole number of at least 1")
        spec = {
            "suite": suite.name,
            "source": suite.source,
            "tasks": [t.to_dict() for t in suite.tasks],
            "arms": [a.to_dict() for a in arms],
            "repeat": repeat,
            "budget": budget.to_dict() if budget is not None else None,
        }
        keys = [AttemptKey(a.name, t.id, n) for n in range(1, repeat + 1) for t in suite.tasks for a in arms]
        evals = Evals(store)
        row = evals.create(f"eval_{uuid.uuid4().hex[:12]}", user_id, suite.name, spec, keys)
        return cls(evals, row, factory, root, max_parallel=max_parallel, on_attempt=on_attempt)

    @classmethod
    def open(
        cls,
        store: Store,
        eval_id: str,
        factory: AttemptFactory,
        root: Path,
        *,
        user_id: str | None = None,
        max_parallel: int = 4,
        on_attempt: Callable[[AttemptKey, dict[str, Any]], None] | None = None,
    ) -> Evaluation:
        """A stored eval, to resume. `UserError` for an unknown one (or another user's)."""
        evals = Evals(store)
        row = evals.get(eval_id, user_id)
        if row is None:
            raise UserError(f"no eval {eval_id!r}: list them with `delegate eval list`")
        return cls(evals, row, factory, root, max_parallel=max_parallel, on_attempt=on_attempt)

    async def run(self) -> EvalReport:
        """Run every attempt not judged yet (at most `max_parallel` at once), then the report."""
        pending = [a for a in await asyncio.to_thread(self.evals.attempts, self.id) if a.outcome is None]
        async with asyncio.TaskGroup() as group:
            for attempt in pending:
                group.create_task(self._attempt(attempt))
        attempts = await asyncio.to_thread(self.evals.attempts, self.id)
        if all(a.outcome is not None for a in attempts):
            await asyncio.to_thread(self.evals.finish, self.id)
        row = await asyncio.to_thread(self.evals.get, self.id)
        return build_report(row or self.row, attempts)

    async def _attempt(self, attempt: AttemptRow) -> None:
        async with self._slots:
            key = attempt.key
            arm, task = self.arms[key.arm], self.tasks[key.task]
            folder = self.folder / key.arm / key.task / str(key.attempt)
            store = self.evals.store
            run = await asyncio.to_thread(store.get_run, attempt.run_id) if attempt.run_id else None
            if run is not None and run.status not in (*ENDED, "interrupted"):
                return  # going on in another process: its judgement is that process's
            if run is None:
                await asyncio.to_thread(_fresh, folder, task)
            runtime = self._factory(arm, folder)
            try:
                end, baseline = await self._run(runtime, attempt, run, arm, task)
                outcome = await judge(task, str(end.status), end.final, runtime.workspace, baseline, end.messages)
            finally:
                await runtime.aclose()
            row = await asyncio.to_thread(store.get_run, end.run_id)
            outcome |= _spent(row, end.run_id)
            await asyncio.to_thread(self.evals.judge, self.id, key, outcome)
            if self.on_attempt is not None:
                self.on_attempt(key, outcome)

    async def _run(
        self, runtime: AttemptRuntime, attempt: AttemptRow, run: RunRow | None, arm: Arm, task: Task
    ) -> tuple[RunEnd, Baseline]:
        """Start the attempt's run, resume it, or read how it ended."""
        if run is None:
            baseline = await asyncio.to_thread(snapshot_before, task.criteria, runtime.workspace)
            run_id = await asyncio.to_thread(
                self.evals.start, self.id, attempt.key, attempt.run_id or f"run_{uuid.uuid4().hex[:12]}"
            )
            end = await runtime.run(
                task.prompt, run_id=run_id, workflow=arm.plan(task.prompt, task.args), eval_tag=attempt.key.tag(self.id)
            )
            return end, baseline
        baseline = Baseline(started_ns=int(run.created_at.timestamp() * 1e9))
        if run.status == "interrupted":
            return await runtime.resume(run.id), baseline
        return _Ended(run_id=run.id, status=run.status, final=run.final or "", messages=[]), baseline


@dataclass(kw_only=True)
class _Ended:
    """A run that ended before the eval judged it (the process was killed in between)."""

    run_id: str
    status: str
    final: str
    messages: list[Message]


def _fresh(folder: Path, task: Task) -> None:
    """The attempt's folder, made afresh from the task's starting files."""
    if folder.exists():
        shutil.rmtree(folder)
    if task.workspace is not None:
        shutil.copytree(task.workspace, folder, symlinks=True)
    folder.mkdir(parents=True, exist_ok=True)
    for rel, text in task.files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _spent(row: RunRow | None, run_id: str) -> dict[str, Any]:
    """The run's usage and time, as its record has them (counted once, whatever resumed it)."""
    usage = row.usage if row is not None else Usage()
    seconds = None
    if row is not None and row.completed_at is not None:
        seconds = round((row.completed_at - row.created_at).total_seconds(), 3)
    return {
        "run_id": run_id,
        "usage": {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cost_usd": usage.cost_usd,
        },
        "seconds": seconds,
    }
