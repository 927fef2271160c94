"""A command's cgroup: its processes counted, its memory capped as a whole, and all of it killed.

`RLIMIT_NPROC` counts a user id's processes and never binds a server run as root (the kernel
exempts uid 0, in a user namespace too), and `RLIMIT_AS` binds each process alone: three children
of one command held 2 GiB each at once under a cap of 4 GiB (issue 34). A cgroup counts whatever
runs in it: `pids.max` caps its processes and threads, and the memory controller what they hold
together, page cache and tmpfs pages they wrote (`/tmp`, `/dev/shm`) included. The command joins
its cgroup before bwrap starts (`wrap`), so nothing it forks is outside it.

Where the cgroups live: under cgroup v2, in `/sys/fs/cgroup/delegate-commands` when the root hands
out the controllers; under cgroup v1, in each controller's hierarchy, under this process's own
cgroup there (so a container's own limits still hold over its commands). A controller that cannot
be had is left out, and said once in the log: without `pids`, `RLIMIT_NPROC` alone caps processes;
without `memory`, `RLIMIT_AS` caps each process and the tmpfs sizes cap what it keeps in RAM
(docs/security.md).

A command past its memory cap: under v2 the kernel kills all of it (`memory.oom.group`); under
v1 it kills one process, and `run_command` sees the kill (`oom_kills`) and kills the rest.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from ._command_limits import CommandLimits

__all__ = ["CommandCgroup"]

CGROUP_FOLDER = "delegate-commands"
CONTROLLERS = ("pids", "memory")
_log = logging.getLogger("delegate.sandbox")


@dataclass(frozen=True, slots=True)
class _Base:
    """A folder in which a command's cgroups are made, and the controllers it gives them."""

    path: str
    controllers: frozenset[str]
    v2: bool


class CommandCgroup:
    """The cgroups of one command (one under v2, one per controller under v1)."""

    def __init__(self, parts: list[tuple[_Base, str]]) -> None:
        self.parts = parts

    @classmethod
    def create(cls, limits: CommandLimits) -> CommandCgroup | None:
        """New cgroups with the caps of `limits`, or None where none can be made here."""
        parts: list[tuple[_Base, str]] = []
        name = f"{os.getpid()}-{secrets.token_hex(6)}"
        for base in _bases():
            path = os.path.join(base.path, name)
            try:
                os.mkdir(path)
                for file, value in _settings(base, limits):
                    _write_if_there(path, file, value)
            except OSError as exc:
                _log.warning(
                    "could not make a cgroup for a command (%s): %s not capped", exc, "/".join(base.controllers)
                )
                with contextlib.suppress(OSError):
                    os.rmdir(path)
                continue
            parts.append((base, path))
        return cls(parts) if parts else None

    @staticmethod
    def memory_capped() -> bool:
        """Whether commands' memory is capped as a whole here (a memory cgroup can be made)."""
        return any("memory" in base.controllers for base in _bases())

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv`, started by a shell that first moves itself into these cgroups."""
        procs = [os.path.join(path, "cgroup.procs") for _, path in self.parts]
        joins = " && ".join(f'echo $$ > "${i + 1}"' for i in range(len(procs)))
        return ["/bin/sh", "-c", f'{joins} && shift {len(procs)} && exec "$@"', "sh", *procs, *argv]

    def refused(self) -> int:
        """How many forks the process cap refused."""
        words = self._read("pids", "pids.events").split()
        return int(words[1]) if len(words) >= 2 and words[0] == "max" and words[1].isdigit() else 0

    def oom_kills(self) -> int:
        """How many of its processes the kernel killed for passing the memory cap."""
        for base, path in self.parts:
            if "memory" in base.controllers:
                text = _read(path, "memory.events" if base.v2 else "memory.oom_control")
                for line in text.splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and value.strip().isdigit():
                        return int(value)
        return 0

    def kill(self) -> None:
        """SIGKILL every process in its cgroups, even one that left the command's process group."""
        for _, path in self.parts:
            for pid in _read(path, "cgroup.procs").split():
                with contextlib.suppress(OSError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)

    def remove(self) -> None:
        """Kill what is left and remove the cgroups (an emptied cgroup goes at once; give its
        processes a moment to be reaped, then leave it to the next server start)."""
        for _, path in self.parts:
            for _ in range(50):
                self.kill()
                try:
                    os.rmdir(path)
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)  # its killed processes are still being reaped
                else:
                    break
            else:
                _log.warning("a command's cgroup %s could not be removed: processes are left in it", path)

    def _read(self, controller: str, file: str) -> str:
        for base, path in self.parts:
            if controller in base.controllers:
                return _read(path, file)
        return ""


def _settings(base: _Base, limits: CommandLimits) -> list[tuple[str, str]]:
    """What to write in a new cgroup of `base`, in order (a file that is not there, such as swap
    accounting's on a kernel without it, is skipped)."""
    settings: list[tuple[str, str]] = []
    if "pids" in base.controllers:
        settings.append(("pids.max", str(limits.processes)))
    if "memory" in base.controllers:
        memory = str(limits.memory)
        if base.v2:
            settings += [("memory.max", memory), ("memory.swap.max", "0"), ("memory.oom.group", "1")]
        else:
            settings += [("memory.limit_in_bytes", memory), ("memory.memsw.limit_in_bytes", memory)]
    return settings


def _write_if_there(path: str, file: str, value: str) -> None:
    target = os.path.join(path, file)
    if file.startswith(("memory.swap", "memory.memsw", "memory.oom")) and not os.path.exists(target):
        return
    Path(target).write_text(value)


def _read(path: str, file: str) -> str:
    try:
        return Path(path, file).read_text()
    except OSError:
        return ""


@functools.cache
def _bases() -> tuple[_Base, ...]:
    """Where this server makes its commands' cgroups (tried once): the cgroup v2 root's folder
    when it hands out the controllers, else a folder per v1 hierarchy; empty cgroups left by an
    earlier server are removed. Says in the log what is not capped for want of a controller."""
    bases = _v2_base() or _v1_bases()
    found = {c for base in bases for c in base.controllers}
    if "pids" not in found and os.geteuid() == 0:
        _log.warning(
            "no pids cgroup can be made here (/sys/fs/cgroup): the number of processes of commands is "
            "not capped, since RLIMIT_NPROC does not bind root; run the server as another user, or "
            "give it a writable cgroup"
        )
    if "memory" not in found:
        _log.warning(
            "no memory cgroup can be made here (/sys/fs/cgroup): a command's memory is capped per "
            "process (RLIMIT_AS) and its tmpfs by size, not as a whole"
        )
    return bases


def _v2_base() -> tuple[_Base, ...]:
    root = Path("/sys/fs/cgroup")
    try:
        offered = set(root.joinpath("cgroup.subtree_control").read_text().split())
    except OSError:
        return ()
    controllers = frozenset(c for c in CONTROLLERS if c in offered)
    base = _Base(str(root / CGROUP_FOLDER), controllers, v2=True)
    return (base,) if controllers and _usable(base) else ()


def _v1_bases() -> tuple[_Base, ...]:
    own: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, names, path = line.split(":", 2)
            for name in names.split(","):
                own[name] = path
    bases: list[_Base] = []
    for controller in CONTROLLERS:
        hierarchy = Path("/sys/fs/cgroup", controller)
        if not hierarchy.joinpath("cgroup.procs").exists():
            continue
        folder = hierarchy / own.get(controller, "/").lstrip("/") / CGROUP_FOLDER
        base = _Base(str(folder), frozenset({controller}), v2=False)
        if _usable(base):
            bases.append(base)
    return tuple(bases)


def _usable(base: _Base) -> bool:
    """Make `base` (handing its controllers down, under v2) and a probe cgroup in it; remove the
    empty cgroups an earlier server left there. False where that cannot be done."""
    try:
        os.makedirs(base.path, exist_ok=True)
        if base.v2:
            Path(base.path, "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in base.controllers))
        probe = os.path.join(base.path, f"probe-{os.getpid()}")
        os.makedirs(probe, exist_ok=True)
        for file, value in _settings(base, CommandLimits()):
            _write_if_there(probe, file, value)
        os.rmdir(probe)
    except OSError:
        return False
    for stale in os.listdir(base.path):
        with contextlib.suppress(OSError):
            os.rmdir(os.path.join(base.path, stale))  # fails for one that still has processes
    return True
