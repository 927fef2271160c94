"""A `Bash(...)` rule that asks or refuses is never passed by a command it cannot check.

`_command_rules.py` says a command whose program is a variable (`$R -f x`) cannot be checked, and
that what cannot be checked is asked about or refused under an `ask` or `deny` rule, never let
through. The permission rules let it through: `R=rm; $R -f victim.txt` (and `/bin/r? -f ...`)
passed `deny: Bash(rm:*)`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from delegate import CommandPolicy, Extensions, Permissions, Runtime
from delegate.models import ModelRequest, ModelResponse
from delegate.testing import FunctionModel, call, is_lead, reply

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def _running(command: str) -> FunctionModel:
    """A lead that runs `command` with `bash`, then answers with what it gave back."""

    def answer(request: ModelRequest) -> ModelResponse:
        assert is_lead(request)
        if len(request.messages) == 1:
            return call("bash", command=command)
        return reply(request.messages[-1].tool_results[0].content)

    return FunctionModel(answer)


@pytest.mark.parametrize(
    "command", ["R=rm; $R -f victim.txt", 'R=rm; "$R" -f victim.txt', "${R:-rm} -f victim.txt", "/bin/r? -f victim.txt"]
)
def test_a_command_whose_program_is_a_variable_is_refused_by_a_deny_rule(tmp_path: Path, command: str) -> None:
    (tmp_path / "victim.txt").write_text("keep me\n")
    rt = Runtime(
        model=_running(command),
        workspace=tmp_path,
        store=False,
        commands=CommandPolicy(),
        extensions=Extensions(permissions=Permissions(deny=["Bash(rm:*)"])),
    )
    result = rt.run_sync("clean up")
    assert (tmp_path / "victim.txt").exists(), result.final
    assert "refused by the permission rule deny 'Bash(rm:*)'" in result.final
