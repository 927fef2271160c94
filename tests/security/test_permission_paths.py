"""A path rule (`deny: Write(secret/**)`, `ask: Edit(docs/**)`) judges the file a call reaches,
not the text the model wrote: the absolute path of the same file, or a link to its folder, is the
same file. The rule used to match the argument's text, so `/<workspace>/secret/key.md` (which
`write_file` accepts, and which lands in `secret/`) passed `deny: Write(secret/**)`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from delegate import Extensions, Permissions, Runtime
from delegate.models import ModelRequest, ModelResponse
from delegate.testing import FunctionModel, call, is_lead, reply


def _writing(path: str) -> FunctionModel:
    """A lead that delegates one write of `path`, then answers with what the write gave back."""

    def answer(request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if is_lead(request):
            if len(request.messages) == 1:
                return call("task", subagent_type="general-purpose", description="write", prompt="write")
            return reply(last.tool_results[0].content)
        if last.role == "user":
            return call("write_file", path=path, content="leaked\n")
        return call("complete", summary=f"write said: {last.tool_results[0].content}")

    return FunctionModel(answer)


@pytest.mark.parametrize("spelling", ["absolute", "link", "dots"])
def test_a_denied_folder_is_denied_by_any_spelling_of_its_path(tmp_path: Path, spelling: str) -> None:
    root = tmp_path / "ws"
    (root / "secret").mkdir(parents=True)
    (root / "docs").mkdir()
    (root / "docs" / "s").symlink_to("../secret")  # made earlier by anyone with a command
    path = {
        "absolute": str(root / "secret" / "key.md"),
        "link": "docs/s/key.md",
        "dots": "docs/../secret/key.md",
    }[spelling]
    rt = Runtime(
        model=_writing(path),
        workspace=root,
        store=False,
        extensions=Extensions(permissions=Permissions(deny=["Write(secret/**)"])),
    )
    result = rt.run_sync("write")
    assert not (root / "secret" / "key.md").exists(), result.final
    assert "refused by the permission rule deny 'Write(secret/**)'" in result.final
