"""The `bash` tool, and `run_command` beneath it: one shell command in the workspace root.

Commands run only when the workspace allows them (`--allow-commands`), in the bubblewrap sandbox
of `workspace/_sandbox.py` (unless the operator turned it off). Each command gets its
own process group, so a timeout or a cancellation stops everything it started, not only the
shell. Output (stdout and stderr together) is capped, keeping its head and its tail, where the
errors and the summary usually are.

We drive the process through `loop.subprocess_exec` with a small protocol (the machinery
`asyncio.create_subprocess_exec` wraps) because it tells us when the shell exits even while a
background child still holds the output open; `Process.wait()` would wait for that child too.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Awaitable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import Field

from .._empty import empty_list
from .._errors import ToolError
from .._text import safe_text
from ..models import watched
from ..workspace import (
    NO_OVERLAY,
    CommandCgroup,
    Repositories,
    Workspace,
    after_command,
    command_environment,
    command_lock,
    filter_fd,
    filter_program,
    sandbox_argv,
    size_text,
    workspace_usage,
)
from ._tool import ToolContext, ToolReturn, tool

OUTPUT_MAX_CHARS = 30_000
HOLD_GRACE = 2.0
"""Seconds that background processes may keep the output open after the shell has exited."""
SETTLE = 2.0
"""Seconds to wait for the processes to be gone after they were killed."""
MEMORY_LOOK = 0.2
"""Seconds between two looks at whether the kernel killed one of a command's processes for passing
the memory cap (then the rest of the command is killed with it)."""
DISK_LOOK = 0.5
"""Seconds between two looks at the workspace's size while a command runs (at least: a look
that takes long is followed by a pause 20 times as long, so watching costs at most 5% of a core)."""


@dataclass(kw_only=True, slots=True)
class CommandResult:
    """How a command ended. `exit_code` is negative when a signal killed the shell (-9: SIGKILL)."""

    exit_code: int | None
    output: str
    output_bytes: int
    timed_out: bool = False
    stopped_background: bool = False
    started: bool = True
    """Whether the command itself ran (False: its sandbox failed to start it)."""
    over_quota: bool = False
    """Whether it was killed for growing the workspace past its disk quota."""
    over_memory: bool = False
    """Whether it was killed for holding more memory than its cap, its processes together."""
    notes: list[str] = field(default_factory=empty_list)
    """What the command's caps did to it, one line each (process starts refused, a CPU cap hit,
    the disk quota passed)."""


@tool
async def bash(
    ctx: ToolContext,
    command: Annotated[str, Field(description="The command line, run by /bin/sh in the workspace root.")],
    timeout: Annotated[
        float, Field(ge=1, le=600, description="Seconds before the command and its children are killed.")
    ] = 120,
) -> ToolReturn:
    """Run a shell command in the workspace root and answer with its output and exit code.

    stdout and stderr come back together; past 30,000 characters the middle is cut, keeping the
    head and the tail. There is no input (stdin is closed) and no terminal, so use the
    non-interactive flags of tools (`-y`, `--no-pager`). After `timeout` seconds (default 120)
    the command and every process it started are killed. Background processes that keep the
    output open are stopped when the command ends; redirect their output to a file to keep them.
    Prefer the file tools for reading, searching and editing files: their output is cheaper.
    """
    if not ctx.workspace.allow_commands:
        raise ToolError("commands are not allowed in this workspace; the runtime must allow them (--allow-commands)")
    refusal = ctx.workspace.commands.rules.refusal(command)
    if refusal is not None:
        raise ToolError(f"the command was not run: {refusal}")
    layer = ctx.workspace.layer
    if layer is None:
        result = await run_command(command, ctx.workspace, timeout=timeout)
    else:
        async with command_lock(layer):
            result = await run_command(command, ctx.workspace, timeout=timeout)
            refused = await asyncio.to_thread(after_command, ctx.workspace)
        if refused:
            shown = ", ".join(refused[:10]) + (f" and {len(refused) - 10} more" if len(refused) > 10 else "")
            raise ToolError(
                f"refused: this subagent's type is read-only (it has no write tools), and the command wrote "
                f"{shown}; those writes were discarded and reported to the lead. "
                f"Output:\n{result.output or '(no output)'}"
            )
    output = result.output or "(no output)"
    if result.timed_out:
        raise ToolError(
            f"the command timed out after {timeout:g}s and was killed, with every process it started; "
            f"output so far:\n{output}"
        )
    notes = list(result.notes)
    if result.stopped_background:
        notes.append(
            "[background processes still holding the output were stopped when the command ended; "
            "redirect their output to a file to keep them running]"
        )
    notes.append(_describe_exit(result.exit_code))
    return ToolReturn(
        content="\n".join([output.rstrip("\n"), *notes]),
        data={"exit_code": result.exit_code, "output_bytes": result.output_bytes},
    )


async def run_command(
    command: str, workspace: Workspace, *, timeout: float, max_chars: int = OUTPUT_MAX_CHARS
) -> CommandResult:
    """Run `command` with /bin/sh in the workspace root, in its sandbox (see `workspace/_sandbox.py`)
    unless the operator turned that off; no process it starts outlives the call.

    On timeout the result says `timed_out`; on cancellation the processes are killed and the
    cancellation goes on. Output past `max_chars` keeps its head and tail with a note between.
    Raises `ToolError` when the sandbox cannot run here (saying what to install).
    """
    limits = workspace.commands.limits
    repositories = Repositories()
    usage = await asyncio.to_thread(workspace_usage, workspace, repositories)
    room = max(0, limits.disk_quota - usage) if limits.disk_quota else None
    cgroup: CommandCgroup | None = None
    marker = ""
    seccomp: int | None = None
    if workspace.commands.sandbox:
        marker = f"delegate-sandbox-started-{secrets.token_hex(8)}"
        file_size = limits.file_size if room is None else min(limits.file_size, room)
        seccomp = filter_fd(await asyncio.to_thread(filter_program))  # its first call runs `ldconfig -p`
        try:
            argv = await asyncio.to_thread(
                sandbox_argv,
                command,
                workspace,
                marker=marker,
                file_size=file_size,
                seccomp=seccomp,
                repositories=repositories,
            )
        except BaseException:
            if seccomp is not None:
                os.close(seccomp)
            raise
        env: dict[str, str] = {}  # bwrap builds the command's environment itself (--clearenv, --setenv)
        cgroup = await asyncio.to_thread(CommandCgroup.create, limits)
        if cgroup is not None:
            argv = cgroup.wrap(argv)
    else:
        if workspace.layer is not None:  # unconfined, it would write the workspace itself
            raise ToolError(NO_OVERLAY.format(why=" (the operator runs commands unconfined, without the sandbox)"))
        argv = ["/bin/sh", "-c", command]
        env = command_environment(workspace)
    # a workspace already past its quota may still shrink: only growth past it kills the command
    grown = max(limits.disk_quota, usage) if limits.disk_quota else None
    try:
        collector = _Collector(max_chars, marker.encode())
        result = await _run(argv, env, workspace, timeout, collector, cgroup, grown, seccomp)
        result.notes += _cap_notes(result, workspace, room, cgroup)
        result.notes += await asyncio.to_thread(_remove_repositories, workspace, repositories)
    finally:
        if seccomp is not None:
            os.close(seccomp)
        if cgroup is not None:
            await asyncio.to_thread(cgroup.remove)
    if marker and not result.started and not result.timed_out:
        said = result.output.strip() or f"it ended with exit code {result.exit_code} and no output"
        raise ToolError(f"the sandbox could not start the command: {said}")
    return result


async def _run(
    argv: list[str],
    env: dict[str, str],
    workspace: Workspace,
    timeout: float,
    collector: _Collector,
    cgroup: CommandCgroup | None,
    grown: int | None,
    seccomp: int | None = None,
) -> CommandResult:
    """Start `argv` and wait for it as `run_command` says; past `grown` bytes of workspace, kill it.
    `seccomp` is a descriptor the process inherits (the sandbox's filter)."""
    loop = asyncio.get_running_loop()
    starting = asyncio.ensure_future(
        loop.subprocess_exec(
            lambda: collector,
            *argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=workspace.root,
            env=env,
            start_new_session=True,  # its own session and process group, with no controlling terminal
            pass_fds=() if seccomp is None else (seccomp,),
        )
    )
    try:
        transport, _ = await asyncio.shield(starting)
    except asyncio.CancelledError:
        # Cancelled while its pipes were being connected (the command runs already): asyncio would
        # kill the shell alone and leave what it started running. Kill the whole group once started
        # (even if cancelled again), and wait for that, so no process outlives the call.
        starting.add_done_callback(_kill_started)
        await asyncio.wait([starting])
        raise
    group = transport.get_pid()
    timed_out = stopped_background = False
    over_quota, over_memory = asyncio.Event(), asyncio.Event()
    watchers = [] if cgroup is None else [asyncio.ensure_future(_watch_memory(group, cgroup, over_memory))]
    if grown is not None:
        watchers.append(asyncio.ensure_future(_watch_disk(workspace, grown, group, cgroup, over_quota)))
    try:
        try:
            async with asyncio.timeout(timeout):
                await collector.exited.wait()
                stopped_background = not await _within(collector.closed.wait(), HOLD_GRACE)
        except TimeoutError:
            timed_out = not collector.exited.is_set()
            stopped_background = not timed_out  # the shell had ended; a background process had not
        if timed_out or stopped_background:
            await _stop(group, collector, cgroup)
    except BaseException:  # cancelled, or failed: leave no process behind, then let it go on
        await _stop(group, collector, cgroup)
        raise
    finally:
        for watcher in watchers:
            watcher.cancel()
        exit_code = transport.get_returncode()
        transport.close()  # closes our end of the pipe, even if an escaped process still holds theirs
    return CommandResult(
        exit_code=exit_code,
        output=collector.text(),
        output_bytes=collector.total,
        timed_out=timed_out,
        stopped_background=stopped_background,
        started=collector.started,
        over_quota=over_quota.is_set(),
        over_memory=over_memory.is_set() or (cgroup is not None and cgroup.oom_kills() > 0),
    )


async def _watch_disk(
    workspace: Workspace, most: int, group: int, cgroup: CommandCgroup | None, over: asyncio.Event
) -> None:
    """Look at the workspace's size while the command runs; past `most` bytes, kill the command."""
    while True:
        began = time.monotonic()
        usage = await asyncio.to_thread(workspace_usage, workspace)
        if usage > most:
            over.set()
            _kill_group(group)
            if cgroup is not None:
                await asyncio.to_thread(cgroup.kill)
            return
        await asyncio.sleep(max(DISK_LOOK, 20 * (time.monotonic() - began)))


def _remove_repositories(workspace: Workspace, before: Repositories) -> list[str]:
    """Remove the git repositories the command made in the workspace (see `Repositories`); a
    note saying which, if any. A command on a layer wrote into the layer, never merged there."""
    if workspace.layer is not None:
        return []
    after = Repositories(keep=frozenset(before.found))
    workspace_usage(workspace, after)
    if not after.removed:
        return []
    shown = ", ".join(after.removed[:10]) + (f" and {len(after.removed) - 10} more" if len(after.removed) > 10 else "")
    return [
        f"[removed what the command made a git repository ({shown}): agents may not make or change one in "
        "the workspace, since the operator's git would run its configuration; make a scratch repository "
        "under /tmp instead]"
    ]


async def _watch_memory(group: int, cgroup: CommandCgroup, over: asyncio.Event) -> None:
    """Kill the whole command once the kernel killed one of its processes at the memory cap (under
    cgroup v1 it kills one; v2 kills them all itself, `memory.oom.group`)."""
    while not cgroup.oom_kills():  # a read of one small cgroup file: no need for a thread
        await asyncio.sleep(MEMORY_LOOK)
    over.set()
    _kill_group(group)
    await asyncio.to_thread(cgroup.kill)


def _cap_notes(
    result: CommandResult, workspace: Workspace, room: int | None, cgroup: CommandCgroup | None
) -> list[str]:
    limits = workspace.commands.limits
    quota = size_text(limits.disk_quota)
    notes: list[str] = []
    if result.over_quota:
        notes.append(
            f"[the command was killed: the workspace grew past its disk quota of {quota}; "
            "delete files you no longer need to make room]"
        )
    elif room == 0:
        notes.append(f"[the workspace is at its disk quota of {quota}: no file could grow; delete files to make room]")
    if result.over_memory:
        notes.append(
            f"[the command was killed: its processes together passed the memory cap of {size_text(limits.memory)} "
            "(what they hold, and what is written in /tmp and /dev/shm); use less memory at once]"
        )
    refused = cgroup.refused() if cgroup is not None else 0
    if refused:
        notes.append(
            f"[{refused} process starts were refused: a command may have at most {limits.processes} "
            "processes and threads at once]"
        )
    code = result.exit_code
    if code in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
        notes.append(f"[a process was stopped at its CPU time cap ({limits.cpu_seconds} s)]")
    if code in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ):
        left = f", {size_text(room)} left under the disk quota" if room is not None else ""
        cap = f"{size_text(limits.file_size)} a file{left}"
        notes.append(f"[a process was stopped writing past the file size cap ({cap})]")
    return notes


class _Collector(asyncio.SubprocessProtocol):
    """Keeps the first and the last `max_bytes / 2` bytes of the output, and notes exit and EOF.
    Output is the command's progress, for the call's idle watchdog (`delegate.models.progress`)."""

    def __init__(self, max_bytes: int, marker: bytes = b"") -> None:
        self.progress = watched()
        self.marker = marker + b"\n" if marker else b""
        self.pending = bytearray()
        self.started = not marker
        self.half = max(1, max_bytes // 2)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.exited = asyncio.Event()
        self.closed = asyncio.Event()

    def pipe_data_received(self, fd: int, data: bytes | bytearray) -> None:
        if self.progress is not None:
            self.progress.mark()
        if self.marker:  # the sandbox's line saying it started the command comes first, or never
            self.pending += data
            if len(self.pending) < len(self.marker) and self.marker.startswith(self.pending):
                return
            data = self._settle_marker()
            if not data:
                return
        self._keep(data)

    def _settle_marker(self) -> bytes:
        """What the output holds besides the marker line, once it is known whether it came."""
        data = bytes(self.pending)
        if data.startswith(self.marker):
            self.started = True
            data = data[len(self.marker) :]
        self.marker = b""
        self.pending.clear()
        return data

    def _keep(self, data: bytes | bytearray) -> None:
        self.total += len(data)
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > self.half:
                del self.tail[: len(self.tail) - self.half]

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if self.marker:
            self._keep(self._settle_marker())
        self.closed.set()

    def process_exited(self) -> None:
        self.exited.set()

    def text(self) -> str:
        """The output kept, its bytes that are not UTF-8 shown as `\\xNN` (see `_text.py`)."""
        cut = self.total - len(self.head) - len(self.tail)
        if cut <= 0:
            return _decode(self.head + self.tail)
        head = _decode(self.head)
        tail = _decode(self.tail)
        note = f"[… {cut:,} bytes of output cut; send it to a file and read that in parts to see it all …]"
        return f"{head}\n{note}\n{tail}"


def _decode(output: bytes | bytearray) -> str:
    """A command's output as text: a byte 0xff (a file name `ls` printed) reads `\\xff`, so the
    model sees which byte it was, where U+FFFD would hide it."""
    return safe_text(bytes(output).decode("utf-8", "surrogateescape"))


def _kill_started(starting: asyncio.Future[tuple[asyncio.SubprocessTransport, _Collector]]) -> None:
    """Kill the process group of a command whose caller was cancelled while it started."""
    if starting.cancelled() or starting.exception() is not None:
        return  # it never started (asyncio reaped what it had spawned)
    transport, _ = starting.result()
    _kill_group(transport.get_pid())
    transport.close()


def _kill_group(group: int) -> None:
    with suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(group, signal.SIGKILL)


async def _stop(group: int, collector: _Collector, cgroup: CommandCgroup | None) -> None:
    """Kill the command's process group (and all of its cgroup, where it has one), and give the
    output a moment to reach its end.

    Without a cgroup, a process that left the group (`setsid`) may hold the output open for ever:
    after `SETTLE` seconds we stop waiting for it.
    """
    _kill_group(group)
    if cgroup is not None:
        await asyncio.to_thread(cgroup.kill)
    await _within(_settled(collector), SETTLE)


async def _settled(collector: _Collector) -> None:
    await collector.exited.wait()
    await collector.closed.wait()


async def _within(awaitable: Awaitable[object], seconds: float) -> bool:
    """Await `awaitable` for at most `seconds`; say whether it finished."""
    try:
        async with asyncio.timeout(seconds):
            await awaitable
    except TimeoutError:
        return False
    return True


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "[exit code unknown]"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"[killed by {name} (exit code {code})]"
    return f"[exit code {code}]"
