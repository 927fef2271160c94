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
import errno
import logging
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from delegate.tools import run_command
from delegate.workspace import (
    Workspace,
    _seccomp,  # pyright: ignore[reportPrivateUsage]
    sandbox_argv,
)

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


class _Libseccomp:
    """The installed libseccomp, but for what `unknown` names it does not resolve (as a version
    that predates those calls) and the function `failing` answers (a negative errno)."""

    def __init__(self, lib: Any, *, unknown: tuple[bytes, ...] = (), failing: tuple[str, int] | None = None) -> None:
        self._lib, self._unknown, self._failing = lib, unknown, failing

    def __getattr__(self, name: str) -> Any:
        if self._failing is not None and name == self._failing[0]:
            answer = self._failing[1]
            return lambda *_: answer
        return getattr(self._lib, name)

    def seccomp_syscall_resolve_name(self, name: bytes) -> int:
        return -1 if name in self._unknown else self._lib.seccomp_syscall_resolve_name(name)


UNSEEN_MODES = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
how = (ctypes.c_uint64 * 3)(os.O_CREAT | os.O_WRONLY, 0o4755, 0)  # struct open_how: flags, mode, resolve
made = libc.syscall(437, -100, b"openat2", ctypes.byref(how), 24)  # openat2(AT_FDCWD, ...)
print("openat2", made, ctypes.get_errno())
params = (ctypes.c_uint8 * 120)()
ring = libc.syscall(425, 1, ctypes.byref(params))  # io_uring_setup(1 entry, params)
print("io_uring_setup", ring, ctypes.get_errno())
"""


def test_openat2_and_io_uring_are_refused_where_libseccomp_does_not_know_them(tmp_path: Path) -> None:
    # They were refused by name only: a libseccomp older than the calls (2.4 knows neither) left
    # them allowed, and `openat2` with O_CREAT and mode 04755 (or an io_uring OPENAT) made a
    # set-user-ID file.
    lib = _seccomp._library()  # pyright: ignore[reportPrivateUsage]
    if lib is None:
        pytest.skip("needs libseccomp")
    older = _Libseccomp(lib, unknown=(b"openat2", b"io_uring_setup"))
    program = _seccomp._compiled(older)  # pyright: ignore[reportPrivateUsage,reportArgumentType]
    fd = _seccomp.filter_fd(program)
    assert fd is not None
    try:
        workspace = Workspace.open(tmp_path, allow_commands=True)
        argv = sandbox_argv(f"python3 -c '{UNSEEN_MODES}'", workspace, seccomp=fd)
        ran = subprocess.run(argv, pass_fds=(fd,), capture_output=True, text=True, timeout=60, env={}, check=False)
    finally:
        os.close(fd)
    made = tmp_path / "openat2"
    assert not (made.exists() and made.stat().st_mode & SPECIAL), ran.stdout + ran.stderr
    assert f"openat2 -1 {errno.ENOSYS}" in ran.stdout, ran.stdout + ran.stderr
    assert f"io_uring_setup -1 {errno.ENOSYS}" in ran.stdout, ran.stdout + ran.stderr


@pytest.mark.parametrize(
    ("step", "answer"),
    [("seccomp_init", 0), ("seccomp_rule_add_array", -errno.EINVAL), ("seccomp_export_bpf", -errno.ENOMEM)],
)
def test_a_filter_libseccomp_fails_to_build_is_said_and_tried_again(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, step: str, answer: int
) -> None:
    # A failure of libseccomp past loading it returned None without a word, and the cache kept
    # it: every later command ran with no filter.
    lib = _seccomp._library()  # pyright: ignore[reportPrivateUsage]
    if lib is None:
        pytest.skip("needs libseccomp")
    monkeypatch.setattr(_seccomp, "_library", lambda: _Libseccomp(lib, failing=(step, answer)))
    with caplog.at_level(logging.WARNING, logger="delegate.sandbox"):
        assert _seccomp.filter_program() is None
    said = [r.getMessage() for r in caplog.records if "seccomp filter cannot be built" in r.getMessage()]
    assert said and step in said[0], caplog.text  # which step failed, and why
    monkeypatch.setattr(_seccomp, "_library", lambda: lib)
    assert _seccomp.filter_program()  # the next command is filtered again


def test_the_filter_is_built_off_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Its first call looks for libseccomp with `ldconfig -p`, a process: on the event loop, it
    # stopped the server's every run and request meanwhile.
    from delegate.tools import _shell  # pyright: ignore[reportPrivateUsage]

    on_loop: list[bool] = []

    def watched() -> bytes | None:
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        return _seccomp.filter_program()

    monkeypatch.setattr(_shell, "filter_program", watched)
    assert _run("echo ran", tmp_path).strip().endswith("ran")
    assert on_loop == [False]
