"""What a workflow did, in a form that says whether its work passed: each agent's status and
verdicts, the phases, and the count line.

"completed" says an agent (or the script) ended as it should; whether its work holds is what its
acceptance verdicts say, counted apart: an agent without criteria is never counted as holding.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .._empty import empty_list
from .._record import TaskOutput

__all__ = ["AgentEntry", "Outcome", "Verdict", "agent_result", "count_line", "verdict_of"]

Verdict = Literal["holds", "does not hold", "unverified", "none"]
"""What an agent's acceptance verdicts say together: every criterion holds; one does not hold;
some could not be checked (and none fails); it had no criteria."""


def verdict_of(record: TaskOutput) -> Verdict:
    verdicts = record.acceptance or []
    if not verdicts:
        return "none"
    results = [v.get("result") for v in verdicts]
    if "does not hold" in results:
        return "does not hold"
    return "holds" if all(r == "holds" for r in results) else "unverified"


def agent_result(record: TaskOutput) -> dict[str, Any]:
    """An agent's result as the script gets it: plain data."""
    verdict = verdict_of(record)
    return {
        "id": record.id,
        "label": record.description,
        "status": record.status,
        "summary": record.summary,
        "result": record.result,
        "artifacts": [a.relative_path for a in record.artifacts],
        "acceptance": [dict(v) for v in record.acceptance or []],
        "holds": None if verdict in ("none", "unverified") else verdict == "holds",
        "error": record.error,
    }


@dataclass(kw_only=True, slots=True)
class AgentEntry:
    """One `agent()` call of the script: where it was made and what came of it (no record yet:
    it runs)."""

    id: str
    label: str
    phase: str | None
    line: int | None
    replayed: bool = False
    """Answered from the journal of an earlier attempt (not run again)."""
    record: TaskOutput | None = None
    ended: str | None = None
    """How it ended when the workflow ended before it did (`cancelled`, `interrupted`): it has
    no record of its own here."""

    @property
    def status(self) -> str:
        return self.record.status if self.record is not None else self.ended or "running"

    def to_dict(self) -> dict[str, Any]:
        record = self.record
        return {
            "id": self.id,
            "label": self.label,
            "phase": self.phase,
            "line": self.line,
            "status": self.status,
            "verdict": verdict_of(record) if record is not None else None,
            "replayed": self.replayed,
        }


@dataclass(kw_only=True, slots=True)
class Counts:
    agents: int = 0
    completed: int = 0
    holding: int = 0
    not_holding: int = 0
    unverified: int = 0
    failed: int = 0
    running: int = 0

    def add(self, entry: AgentEntry) -> None:
        self.agents += 1
        record = entry.record
        if record is None and entry.ended is None:
            self.running += 1
            return
        if record is None or record.status != "completed":
            self.failed += 1
            return
        self.completed += 1
        verdict = verdict_of(record)
        if verdict == "holds":
            self.holding += 1
        elif verdict == "does not hold":
            self.not_holding += 1
        elif verdict == "unverified":
            self.unverified += 1

    def to_dict(self) -> dict[str, int]:
        return {
            "agents": self.agents,
            "completed": self.completed,
            "holding": self.holding,
            "not_holding": self.not_holding,
            "unverified": self.unverified,
            "failed": self.failed,
        }


@dataclass(kw_only=True, slots=True)
class Outcome:
    """A workflow's agents, phases and counts, as it goes and as it ended."""

    agents: list[AgentEntry] = field(default_factory=empty_list)
    phases: list[str] = field(default_factory=empty_list)
    not_started: int = 0
    """Agents the script asked for that never started: the run's budget was spent, or the cap reached."""
    logs: int = 0

    def add(self, entry: AgentEntry) -> None:
        self.agents.append(entry)

    def phase(self, name: str) -> None:
        if name not in self.phases:
            self.phases.append(name)

    def end_unfinished(self, status: str) -> None:
        """The workflow ended (`cancelled`, `interrupted`) while these agents ran: they ended so."""
        for entry in self.agents:
            if entry.record is None:
                entry.ended = status

    def counts(self, entries: list[AgentEntry] | None = None) -> Counts:
        counts = Counts()
        for entry in self.agents if entries is None else entries:
            counts.add(entry)
        return counts

    @property
    def line(self) -> str:
        return count_line(self.counts().to_dict(), self.not_started)

    def to_dict(self) -> dict[str, Any]:
        """The workflow part of the run's record: `counts`, the count `line`, its `phases` (each
        with its counts) and each agent (`id`, `label`, `phase`, `line` of the script, `status`,
        `verdict`, `replayed`)."""
        named = [*self.phases, *sorted({e.phase for e in self.agents if e.phase and e.phase not in self.phases})]
        phases: list[dict[str, Any]] = [
            {"name": name, **self.counts([e for e in self.agents if e.phase == name]).to_dict()} for name in named
        ]
        loose = [e for e in self.agents if not e.phase]
        if loose and named:
            phases.append({"name": None, **self.counts(loose).to_dict()})
        return {
            "counts": self.counts().to_dict() | {"not_started": self.not_started},
            "line": self.line,
            "phases": phases,
            "agents": [e.to_dict() for e in self.agents],
        }


def count_line(counts: dict[str, int], not_started: int = 0) -> str:
    """ "300 agents: 291 completed, 287 with every criterion holding, 4 with a criterion not
    holding, 9 failed": what a workflow's agents did, and whether their work passed ("3 agents: 3
    completed (no acceptance criteria to check), 0 failed" when no agent that completed had any)."""
    n = counts.get("agents", 0)
    parts = [f"{counts.get('completed', 0)} completed"]
    if counts.get("holding") or counts.get("not_holding") or counts.get("unverified"):
        parts.append(f"{counts.get('holding', 0)} with every criterion holding")
        parts.append(f"{counts.get('not_holding', 0)} with a criterion not holding")
        if counts.get("unverified"):
            parts.append(f"{counts['unverified']} with a criterion unverified")
    elif counts.get("completed"):  # "0 with every criterion holding" would read as if none passed
        parts[0] += " (no acceptance criteria to check)"
    parts.append(f"{counts.get('failed', 0)} failed")
    if not_started:
        parts.append(f"{not_started} not started (budget or agent cap)")
    return f"{n} agent{'' if n == 1 else 's'}: " + ", ".join(parts)
