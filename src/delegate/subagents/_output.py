"""What a subagent gives back: a short structured result, never its transcript."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from .._usage import Usage

TaskStatus = Literal["completed", "aborted", "error", "timed_out", "cancelled"]
FsType = Literal["file", "directory", "symlink"]


@dataclass(kw_only=True, slots=True)
class Artifact:
    """A delivered file: its absolute path in the shared workspace, and what it is."""

    path: str
    size: int
    fs_type: FsType
    modified_at: str | None = None
    relative_path: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "size": self.size,
            "fs_type": self.fs_type,
            "modified_at": self.modified_at,
        }


@dataclass(kw_only=True, slots=True)
class Skipped:
    """A path the subagent claimed in `complete` that did not validate, and why."""

    path: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "reason": self.reason}


@dataclass(kw_only=True)
class TaskOutput:
    """The result of one subagent, and its usage record."""

    id: str
    type: str
    description: str
    tool_call_id: str | None
    parent_agent_id: str | None
    status: TaskStatus
    stop_reason: str
    summary: str
    artifacts: list[Artifact] = field(default_factory=list[Artifact])
    skipped: list[Skipped] = field(default_factory=list[Skipped])
    steps: int = 0
    usage: Usage = field(default_factory=Usage)
    started_at: datetime | None = None
    completed_at: datetime | None = None
    acceptance: list[dict[str, Any]] | None = None
    error: str | None = None
    model: str = ""

    @property
    def duration(self) -> float | None:
        if self.started_at is None or self.completed_at is None:
            return None
        return (self.completed_at - self.started_at).total_seconds()

    def to_dict(self) -> dict[str, Any]:
        """The record as in `delegate run --json` (`subagents[]`)."""
        return {
            "id": self.id,
            "type": self.type,
            "description": self.description,
            "tool_call_id": self.tool_call_id,
            "status": self.status,
            "stop_reason": self.stop_reason,
            "summary": self.summary,
            "steps": self.steps,
            "usage": {"input_tokens": self.usage.input_tokens, "output_tokens": self.usage.output_tokens},
            "artifacts": [a.to_dict() for a in self.artifacts],
            "skipped": [s.to_dict() for s in self.skipped],
            "acceptance": self.acceptance,
            "error": self.error,
            "model": self.model,
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "completed_at": self.completed_at.isoformat() if self.completed_at else None,
        }

    def render(self) -> str:
        """The compact text the lead reads: summary, status, artifact paths and sizes, verdicts."""
        head = f"[{self.status}] {self.type}: {self.description} ({self.steps} steps, {self.usage.total_tokens} tokens)"
        lines = [head]
        if self.error:
            lines.append(f"Error: {self.error}")
        lines.append(f"Summary: {self.summary.strip() or '(none)'}")
        if self.artifacts:
            lines.append("Artifacts:")
            lines += [f"- {a.relative_path or a.path} ({a.size} bytes, {a.fs_type})" for a in self.artifacts]
        if self.skipped:
            lines.append("Skipped (claimed but not delivered):")
            lines += [f"- {s.path}: {s.reason}" for s in self.skipped]
        if self.acceptance:
            lines.append("Acceptance checklist:")
            lines += [f"[{v['result']}] {v['criterion']} — {v['evidence']}" for v in self.acceptance]
        return "\n".join(lines)
