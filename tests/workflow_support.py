"""What the workflow tests share: a fake model whose subagents answer by their task, and the
map-review-merge script they run at scale."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from delegate._messages import TextPart
from delegate.models import ModelRequest, ModelResponse
from delegate.testing import FunctionModel, call, reply

MAP_REVIEW_MERGE = """\
phase("summarise")
files = args["files"]
summaries = parallel([
    call("summarise " + f, label=f, acceptance=["file:" + args["check"][i] + " exists"])
    for i, f in enumerate(files)
])
phase("review")
reviews = pipeline(
    [s for s in summaries if s is not None],
    lambda s: [call("review A " + s["label"]), call("review B " + s["label"])],
)
phase("merge")
accepted = [r[0]["summary"] for r in reviews if r is not None and r[0] is not None and r[1] is not None]
log("accepted", len(accepted))
{"accepted": len(accepted), "summaries": len([s for s in summaries if s is not None])}
"""


def task_of(request: ModelRequest) -> str:
    """The task a subagent was given: the text of its first user message."""
    for message in request.messages:
        if message.role == "user":
            return "".join(p.text for p in message.parts if isinstance(p, TextPart))
    return ""


def finished(request: ModelRequest) -> bool:
    """Whether the subagent already called a tool (its `complete` was answered with an error)."""
    return any(m.role == "tool" for m in request.messages)


def answering(answer: Callable[[str], ModelResponse | str]) -> Callable[[ModelRequest], ModelResponse]:
    """A fake model's answer function: every subagent completes with what `answer(task)` says (a
    response, or a summary)."""

    def respond(request: ModelRequest) -> ModelResponse:
        given = answer(task_of(request))
        return call("complete", summary=given) if isinstance(given, str) else given

    return respond


def by_task(answer: Callable[[str], ModelResponse | str], *, latency: float = 0.0) -> FunctionModel:
    """A fake model over `answering(answer)`."""
    return FunctionModel(answering(answer), latency=latency)


def summary_of(task: str) -> ModelResponse | str:
    """Every subagent completes; a review of a file whose number ends in 7 fails (its model errs)."""
    if task.startswith("review B") and task.rstrip().endswith("7.txt"):
        raise RuntimeError("the reviewer's model is down")
    return f"done: {task[:40]}"


def files_args(n: int, missing_every: int = 25) -> dict[str, Any]:
    """`args` of MAP_REVIEW_MERGE: `n` files; every `missing_every`-th summary's criterion names
    a file that does not exist (it does not hold)."""
    files = [f"src/file{i}.txt" for i in range(n)]
    check = ["README.md" if i % missing_every else "missing.md" for i in range(n)]
    return {"files": files, "check": check}


__all__ = ["MAP_REVIEW_MERGE", "answering", "by_task", "files_args", "finished", "reply", "summary_of", "task_of"]
