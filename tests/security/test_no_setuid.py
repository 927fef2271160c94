"""No command makes a file that runs as the server's user for whoever starts it.

A command runs with the server's user id, and the files it makes are that user's on the host: a
`chmod u+s` of a copy of `/bin/sh` in the workspace, by a server run as root, left a set-user-ID
root shell that any local user who can reach the folder runs as root (by a server of another
user, a shell as that user, who reads the store and every token hash). The bit is refused by the
sandbox's seccomp filter, however a command asks for it (`chmod`, `install -m`, `open` with a
mode), and ordinary modes are set as before. The file tools never carry the bit over either.
"""

from __future__ import annotations

import asyncio
import shutil
import stat
from pathlib import Path

import pytest

from delegate._workspace import Workspace
from delegate.tools import run_command

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
SPECIAL = stat.S_ISUID | stat.S_ISGID


def _run(command: str, root: Path) -> str:
    result = asyncio.run(run_command(command, Workspace.open(root, allow_commands=True), timeout=60))
    return result.output


@pytest.mark.parametrize(
    ("made", "command"),
    [
        ("chmod", "cp /bin/sh chmod && chmod u+s,g+s chmod"),
        ("octal", "cp /bin/sh octal && chmod 6755 octal"),
        ("install", "install -m 4755 /bin/sh install"),
        ("python", "python3 -c \"import os; os.close(os.open('python', os.O_CREAT | os.O_WRONLY, 0o4755))\""),
        ("cp-a", "cp -a operators cp-a"),  # a set-user-ID file the operator keeps there, copied whole
        (
            "fchmodat2",  # Linux 6.6's call, by number (an old kernel answers ENOSYS: nothing to refuse)
            "cp /bin/sh fchmodat2 && python3 -c "
            "\"import ctypes; ctypes.CDLL(None).syscall(452, -100, b'fchmodat2', 0o4755, 0)\"",
        ),
    ],
)
def test_a_command_cannot_make_a_set_user_id_file(tmp_path: Path, made: str, command: str) -> None:
    shutil.copy("/bin/true", tmp_path / "operators")
    (tmp_path / "operators").chmod(0o4755)
    output = _run(f"{command}; ls -ln {made}", tmp_path)
    info = (tmp_path / made).lstat() if (tmp_path / made).exists() else None
    assert info is None or not info.st_mode & SPECIAL, output


def test_ordinary_modes_are_set_as_before(tmp_path: Path) -> None:
    output = _run("echo hi > run.sh && chmod 750 run.sh && mkdir d && chmod 700 d && echo done", tmp_path)
    assert output.strip().endswith("done"), output
    assert stat.S_IMODE((tmp_path / "run.sh").stat().st_mode) == 0o750
    assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o700


@pytest.mark.parametrize("name", ["write_file", "edit_file"])
async def test_the_file_tools_never_keep_the_set_user_id_bit_on_what_they_write(tmp_path: Path, name: str) -> None:
    # They keep a file's mode; they kept this bit too, so an agent's text replaced the operator's
    # set-user-ID program and ran as its owner for whoever started it.
    from delegate import ToolContext
    from delegate.tools import BUILTIN_TOOLS

    program = tmp_path / "program"
    program.write_text("#!/bin/sh\necho the operator's\n")
    program.chmod(0o6755)
    ctx = ToolContext(run_id="run", agent_id="agent", workspace=Workspace.open(tmp_path), emit=lambda e: None)
    if name == "write_file":
        await BUILTIN_TOOLS[name].run(ctx, {"path": "program", "content": "#!/bin/sh\nid\n"})
    else:
        await BUILTIN_TOOLS[name].run(ctx, {"path": "program", "old_string": "the operator's", "new_string": "mine"})
    assert program.read_text() != "#!/bin/sh\necho the operator's\n"
    assert stat.S_IMODE(program.stat().st_mode) == 0o755
