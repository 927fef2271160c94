"""What the lead reads of a subagent: a short structured result, never its transcript.

The record itself (`TaskOutput`, in `delegate._record`) keeps everything. What the lead reads is at
most `MAX_RESULT_CHARS`: a status line, the summary, the typed result, the artifacts, what was
skipped, the acceptance verdicts and any error. When all of it does not fit, the runner writes the
whole of it to `RESULTS_DIR/<run>/<agent>.md` in the workspace, lists that file first among the
artifacts, and the lead reads a shortened view that names it. Compaction keeps each result's
status line and artifact list word for word (`kept`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from .._record import Artifact, FsType, Skipped, Status, StopReason, TaskOutput
from .._text import plural
from ._acceptance import CHECKLIST_HEAD, checklist_count, render_checklist

__all__ = [
    "MAX_RESULT_CHARS",
    "RESULTS_DIR",
    "Artifact",
    "FsType",
    "Skipped",
    "Status",
    "StopReason",
    "TaskOutput",
    "TaskStatus",
    "kept",
    "read",
    "render",
    "render_whole",
]

TaskStatus = Status
"""A subagent's status (the run's vocabulary: see `delegate._record.Status`)."""

MAX_RESULT_CHARS = 2_000
"""The most characters the lead reads for one subagent."""
RESULTS_DIR = "subagent-results"
"""Where, in the workspace, a result too long for the lead is written whole."""

_MAX_ARTIFACT_LINES = 20
_MAX_SKIPPED_LINES = 5
_MAX_VERDICT_CHARS = 240
_MAX_ERROR_CHARS = 300
_MIN_KEPT_SUMMARY_CHARS = 200


def status_line(record: TaskOutput) -> str:
    tokens = plural(record.usage.total_tokens, "token")
    return f"[{record.status}] {record.type}: {record.description} ({plural(record.steps, 'step')}, {tokens})"


def _artifact_line(artifact: Artifact) -> str:
    kind = "" if artifact.fs_type == "file" else f", {artifact.fs_type}"
    if artifact.target is not None:
        kind += f" to {artifact.target}"
    return f"- {artifact.relative_path or artifact.path} ({artifact.size:,} bytes{kind})"


def _result_json(record: TaskOutput) -> str:
    return json.dumps(record.result, ensure_ascii=False, separators=(",", ":"), default=str)


def render_whole(record: TaskOutput) -> str:
    """Everything the lead could read of `record`, unshortened (what the result file holds)."""
    lines = [status_line(record)]
    if record.error:
        lines.append(f"Error: {record.error}")
    lines.append(f"Summary: {record.summary.strip() or '(none)'}")
    if record.result is not None:
        lines.append(f"Result: {_result_json(record)}")
    if record.artifacts:
        lines.append("Artifacts:")
        lines += [_artifact_line(a) for a in record.artifacts]
    if record.skipped:
        lines.append("Skipped (claimed but not delivered):")
        lines += [f"- {s.path}: {s.reason}" for s in record.skipped]
    lines += _layer_lines(record, None)
    if record.acceptance:
        lines.append(CHECKLIST_HEAD)
        lines.append(render_checklist(record.acceptance))
        lines.append(checklist_count(record.acceptance))
    return "\n".join(lines)


_MAX_LAYER_LINES = 10


def _layer_lines(record: TaskOutput, most: int | None) -> list[str]:
    """What the lead reads of an overlay subagent's layer: each conflict (and where its version
    is), what was merged, or where unmerged changes are kept."""
    lines: list[str] = []
    if record.conflicts:
        if record.isolation == "read-only":
            lines.append("Refused writes (its type is read-only; nothing of them was kept):")
        else:
            lines.append(
                "Not merged: the workspace changed these paths meanwhile, so none of its changes were applied:"
            )
        shown = record.conflicts if most is None else record.conflicts[:most]
        for c in shown:
            where = f"; its version: {c.version}" if c.version else ""
            lines.append(_clip(f"- {c.path}: {c.reason}{where}", 300))
        if len(record.conflicts) > len(shown):
            lines.append(f"- ... and {len(record.conflicts) - len(shown)} more")
    elif record.changes and record.status == "completed":
        names = ", ".join(f"{c.path} ({c.op})" for c in record.changes[: most or len(record.changes)])
        more = len(record.changes) - (most or len(record.changes))
        lines.append(_clip(f"Merged into the workspace: {names}" + (f", and {more} more" if more > 0 else ""), 600))
    if record.layer and record.isolation == "overlay":
        what = plural(len(record.changes), "changed path")
        lines.append(f"Its layer ({what}) is kept in {record.layer}; nothing of it reached the workspace.")
    return lines


def render(record: TaskOutput) -> str:
    """The compact text the lead reads, at most `MAX_RESULT_CHARS` (see `read`)."""
    return read(record)[0]


def read(record: TaskOutput) -> tuple[str, bool]:
    """The compact text the lead reads of `record`, at most `MAX_RESULT_CHARS`, and whether it
    is shortened: a result whose whole text (`render_whole`) does not fit is, pointing to
    `record.result_file` when the runner wrote the whole of it there (the record itself keeps
    everything). The whole text is rendered once."""
    whole_in = record.result_file
    if whole_in is None:
        whole = render_whole(record)
        if len(whole) <= MAX_RESULT_CHARS:
            return whole, False
    return _shortened(record, whole_in), True


def _shortened(record: TaskOutput, whole_in: str | None) -> str:
    note = f"(shortened; the whole result is in {whole_in})" if whole_in else "(shortened)"
    head = [status_line(record)[:400], note]
    if record.error:
        head.append(f"Error: {_clip(record.error, _MAX_ERROR_CHARS)}")
    tail = _artifact_lines(record, _MAX_ARTIFACT_LINES)
    if record.skipped:
        tail.append("Skipped (claimed but not delivered):")
        tail += [_clip(f"- {s.path}: {s.reason}", 200) for s in record.skipped[:_MAX_SKIPPED_LINES]]
        if len(record.skipped) > _MAX_SKIPPED_LINES:
            tail.append(f"- ... and {len(record.skipped) - _MAX_SKIPPED_LINES} more")
    tail += _layer_lines(record, _MAX_LAYER_LINES)
    if record.acceptance:
        tail.append(CHECKLIST_HEAD)
        tail += [_clip(line, _MAX_VERDICT_CHARS) for line in render_checklist(record.acceptance).split("\n")]
        tail.append(checklist_count(record.acceptance))
    fixed = len("\n".join(head + tail)) + 1
    room = MAX_RESULT_CHARS - fixed
    middle: list[str] = []
    if record.result is not None:
        result = f"Result: {_result_json(record)}"
        share = room // 2 if record.summary.strip() else room
        middle.append(_clip(result, max(share - 1, 0)))
        room -= len(middle[-1]) + 1
    middle.insert(0, _clip(f"Summary: {record.summary.strip() or '(none)'}", max(room - 1, 0)))
    text = "\n".join(line for line in [*head, *middle, *tail] if line)
    return text[:MAX_RESULT_CHARS]


def _artifact_lines(record: TaskOutput, most: int | None) -> list[str]:
    if not record.artifacts:
        return []
    shown = record.artifacts if most is None else record.artifacts[:most]
    lines = ["Artifacts:"] + [_clip(_artifact_line(a), 300) for a in shown]
    if len(record.artifacts) > len(shown):
        lines.append(f"- ... and {len(record.artifacts) - len(shown)} more, listed in the result file")
    return lines


def kept(records: Sequence[TaskOutput], most: int, shortened: Sequence[bool]) -> str:
    """What survives compaction of a `task` call's results (all of them, in prompt order) when
    the lead's text of them passes `most` characters.

    Each result keeps its status line, its error (clipped) and its artifact list (path, size,
    type) as the lead read them, word for word, whatever their size; and its summary, cut to an
    equal share of the room those leave within `most` (never under `_MIN_KEPT_SUMMARY_CHARS`,
    so ten results with long artifact lists still say what each found). The lead can then still
    tell what every subagent did and re-read every delivered file. `shortened`: whether the
    lead read each shortened (see `read`)."""
    bare = [_kept_lines(r, short) for r, short in zip(records, shortened, strict=True)]
    fixed = sum(len("\n".join(lines)) + 1 for lines in bare)
    share = max(_MIN_KEPT_SUMMARY_CHARS, (most - fixed) // max(len(records), 1) - 1)
    out: list[str] = []
    for record, lines in zip(records, bare, strict=True):
        summary = record.summary.strip()
        at = 2 if record.error else 1  # after the status line and the error
        out += [*lines[:at], *([_clip(f"Summary: {summary}", share)] if summary else []), *lines[at:]]
    return "\n".join(out)


def _kept_lines(record: TaskOutput, shortened: bool) -> list[str]:
    error = [_clip(f"Error: {record.error}", _MAX_ERROR_CHARS)] if record.error else []
    return [status_line(record), *error, *_artifact_lines(record, _MAX_ARTIFACT_LINES if shortened else None)]


def _clip(text: str, most: int) -> str:
    if len(text) <= most:
        return text
    if most <= 1:
        return ""
    return text[: most - 1] + "…"
