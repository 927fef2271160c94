"""The command sandbox: bubblewrap (`bwrap`) argv built from the workspace's view and policy.

A command runs in new PID, IPC, UTS and cgroup namespaces (and a new network namespace, with only
a loopback of its own, unless the operator allows the network), with a file system put together
from scratch:

- the system read-only: `/usr`, `/etc` and the `/bin`, `/sbin`, `/lib*` links or folders (nothing
  else of the host: not `/home`, `/root`, `/var`, `/srv`, `/opt`, `/tmp`, nor the store wherever
  it lives), as any user of the machine sees it: what its owner and group alone may read (the
  shadow passwords, TLS and SSH private keys, a database's access rules) is mounted over, a file
  by the null device where devices do not open (reading it is refused) and a folder by an empty
  read-only folder, since a command runs with the server's user id and a server run as root
  would read them all (see `_unreadable`; `/etc` is looked at for every command);
- a fresh `/proc` (of the new PID namespace: the server's processes are not in it), a minimal
  `/dev` and an empty `/tmp`;
- the workspace's root, at its own path, the only writable mount;
- over it, exactly as the file tools see it (`Workspace`): an empty read-only folder over each
  hidden folder (`.delegate/`), each read-only folder bound read-only (a missing one becomes an
  empty read-only folder, so a command cannot create it either), and each mount bound read-only
  at its place.

The environment is built from nothing: `PATH`, `LANG`, `TERM` (when set) and the variables the
operator names, plus `HOME` set to the workspace root. The model providers' keys and the database
URL are never passed, even when named. Capabilities are dropped (bwrap's default), and the command
gets a new session, so it cannot push input to a terminal.

Where bwrap is missing or cannot run (no user namespaces, say), commands are refused with a
message saying what to install, unless the operator runs them unconfined, explicitly
(`CommandPolicy(sandbox=False)`, `--unsandboxed-commands`).
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
import threading
import time
from pathlib import Path

from .._errors import ToolError
from .._workspace import COMMAND_ENV, Workspace

SECRET_VARIABLES = frozenset(
    {
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "DELEGATE_DB",
        "DELEGATE_TEST_PG",
        "DATABASE_URL",
        "PGPASSWORD",
    }
)
"""The runtime's own credentials: commands never see them, even when the operator names them."""
SYSTEM_FOLDERS = ("/usr", "/etc")
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
INSTALL_HINT = (
    "commands run in a bubblewrap sandbox, and bubblewrap cannot run here{why}: install it "
    "(Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap) and allow user "
    "namespaces, or have the operator run commands unconfined with --unsandboxed-commands"
)


def command_environment(workspace: Workspace) -> dict[str, str]:
    """The environment of agents' commands: an allowlist of ours, never a credential of the runtime."""
    names = [*COMMAND_ENV, *workspace.commands.env]
    env = {name: os.environ[name] for name in names if name in os.environ and name not in SECRET_VARIABLES}
    env["HOME"] = str(workspace.root)
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    return env


def sandbox_argv(command: str, workspace: Workspace) -> list[str]:
    """The bwrap command line that runs `command` with /bin/sh in the workspace's sandbox.

    Raises `ToolError` (saying what to install) when bwrap cannot run here.
    """
    bwrap = _usable_bwrap(workspace.commands.bwrap)
    root = str(workspace.root)
    argv = [bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    argv += ["--unshare-cgroup-try", "--hostname", "sandbox"]
    if not workspace.commands.network:
        argv.append("--unshare-net")
    argv += _system_mounts()
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--bind", root, root]
    for hidden in workspace.hidden:
        path = os.path.join(root, hidden)
        argv += ["--tmpfs", path, "--remount-ro", path]
    for mount in workspace.mounts:
        argv += ["--ro-bind", str(mount.source), os.path.join(root, mount.at)]
    for read_only in workspace.read_only:
        path = os.path.join(root, read_only)
        if os.path.isdir(path) and not os.path.islink(path):
            argv += ["--ro-bind", path, path]
        elif not os.path.lexists(path):
            argv += ["--tmpfs", path, "--remount-ro", path]
    argv += ["--chdir", root, "--clearenv"]
    for name, value in command_environment(workspace).items():
        argv += ["--setenv", name, value]
    return [*argv, "--", "/bin/sh", "-c", command]


def _system_mounts() -> list[str]:
    argv: list[str] = []
    folders = [f for f in SYSTEM_FOLDERS if os.path.isdir(f)]
    for folder in folders:
        argv += ["--ro-bind", folder, folder]
    for link in SYSTEM_LINKS:
        if os.path.islink(link):
            argv += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            argv += ["--ro-bind", link, link]
            folders.append(link)
    for path, is_folder in _unreadable(tuple(folders)):
        argv += ["--tmpfs", path, "--remount-ro", path] if is_folder else ["--ro-bind", "/dev/null", path]
    return argv


SYSTEM_RESCAN = 60.0
"""Seconds a look at what a system folder hides (`_unreadable`) is used for before another."""
LOOKED_AT_EACH_COMMAND = frozenset({"/etc"})
"""System folders looked at anew for every command: where an operator's secrets are put (a key
made owner-only a moment ago is masked from the next command), and small enough to walk in a few
milliseconds; walking `/usr` takes about half a second."""
_seen: dict[str, tuple[float, list[tuple[str, bool]]]] = {}
_seen_lock = threading.Lock()


def _unreadable(folders: tuple[str, ...]) -> list[tuple[str, bool]]:
    """The paths under `folders` that a user who is neither their owner nor in their group may
    not read (a folder: nor list and enter), with whether each is a folder; each folder looked at
    again after `SYSTEM_RESCAN` seconds, or for every command (`LOOKED_AT_EACH_COMMAND`)."""
    found: list[tuple[str, bool]] = []
    for folder in folders:
        found += _unreadable_in(folder)
    return found


def _unreadable_in(folder: str) -> list[tuple[str, bool]]:
    kept = 0.0 if folder in LOOKED_AT_EACH_COMMAND else SYSTEM_RESCAN
    with _seen_lock:
        seen = _seen.get(folder)
        if seen is None or time.monotonic() - seen[0] >= kept:
            found: list[tuple[str, bool]] = []
            _walk_unreadable(folder, found)
            seen = _seen[folder] = (time.monotonic(), found)
        return seen[1]


def _walk_unreadable(folder: str, found: list[tuple[str, bool]]) -> None:
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
        except OSError:
            continue
        if stat.S_ISLNK(mode):
            continue  # its target is masked where it lives, or not mounted at all
        if stat.S_ISDIR(mode):
            if mode & (stat.S_IROTH | stat.S_IXOTH) != stat.S_IROTH | stat.S_IXOTH:
                found.append((entry.path, True))
            else:
                _walk_unreadable(entry.path, found)
        elif not mode & stat.S_IROTH:
            found.append((entry.path, False))


@functools.cache
def _usable_bwrap(program: str) -> str:
    """The path of a bwrap that can build a sandbox here (checked once per process)."""
    found = shutil.which(program)
    if program == "bwrap" and found is None and Path("/usr/bin/bwrap").exists():
        found = "/usr/bin/bwrap"  # PATH may lack /usr/bin in a service's environment
    if found is None:
        raise ToolError(INSTALL_HINT.format(why=f" ({program} is not installed)"))
    probe = [found, "--unshare-pid", "--unshare-net", *_system_mounts(), "--proc", "/proc", "--", "/bin/true"]
    try:
        done = subprocess.run(probe, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolError(INSTALL_HINT.format(why=f" ({exc})")) from None
    if done.returncode != 0:
        reason = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["it failed"]
        raise ToolError(INSTALL_HINT.format(why=f" ({reason[0]})"))
    return found
