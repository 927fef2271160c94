"""A result too long for the lead is written whole into the workspace, never through a link out of it.

The runner (not an agent) writes `subagent-results/<run>/<agent>.md` when a subagent's result
does not fit the lead's context. It wrote it by name, following links: an agent with `bash` made
`subagent-results` a link, and the runner made folders and wrote the subagent's text wherever it
led (another user's folder under `delegate serve`, the shared definitions, anywhere the server's
user may write). It must go through the workspace view, from a handle, as every tool does.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from delegate import CommandPolicy, Runtime
from delegate.models import ModelRequest, ModelResponse
from delegate.testing import FunctionModel, call, is_lead, reply

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
LONG = "x" * 5_000
"""A summary longer than the lead may read (`MAX_RESULT_CHARS`)."""


def _linking_to(target: str) -> FunctionModel:
    """A lead that delegates once; its subagent links `subagent-results` to `target`, then
    completes with a result too long for the lead."""

    def answer(request: ModelRequest) -> ModelResponse:
        if is_lead(request):
            if len(request.messages) == 1:
                return call("task", subagent_type="general-purpose", description="long", prompt="work")
            return reply(request.messages[-1].tool_results[0].content)
        turns = sum(1 for m in request.messages if m.role == "assistant")
        if turns == 0:
            return call("bash", command=f"ln -s {target} subagent-results && echo linked")
        return call("complete", summary=LONG)

    return FunctionModel(answer)


@pytest.mark.parametrize("target", ["outside", ".delegate"])
def test_a_long_result_is_never_written_through_a_link_the_agent_made(tmp_path: Path, target: str) -> None:
    root, outside = tmp_path / "ws", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / ".delegate").mkdir()
    link = str(outside) if target == "outside" else target
    rt = Runtime(model=_linking_to(link), workspace=root, commands=CommandPolicy(), store=False)
    result = rt.run_sync("work")
    assert result.status == "completed"
    assert (root / "subagent-results").is_symlink()  # the agent's link is there, as it made it
    assert list(outside.iterdir()) == []
    assert [p.name for p in (root / ".delegate").iterdir()] == []
    (record,) = result.subagents
    assert record.result_file is None  # nothing written: the lead reads the result shortened
