"""The bash tool: off unless allowed, and when on, no process it starts outlives the call."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest

import delegate.tools._shell
from delegate import ToolContext, ToolError, Workspace
from delegate._messages import Message
from delegate.loop import AgentSpec, run_agent
from delegate.testing import ScriptedModel, call, reply
from delegate.tools import BUILTIN_TOOLS, ToolReturn, builtin_tools
from delegate.workspace import CommandPolicy

bash = BUILTIN_TOOLS["bash"]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    return folder.resolve()


@pytest.fixture
def ctx(root: Path) -> ToolContext:
    workspace = Workspace.open(root, allow_commands=True)
    return ToolContext(run_id="run", agent_id="agent", workspace=workspace, emit=lambda e: None)


@pytest.fixture
def short_hold_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """Background processes may hold a command's output 0.2 s after its shell ended (2 s by
    default), so a test of what happens past the grace does not wait 2 s for it."""
    monkeypatch.setattr(delegate.tools._shell, "HOLD_GRACE", 0.2)


@pytest.fixture
def unconfined(root: Path) -> ToolContext:
    """Commands run as the operator's own user, no sandbox: for the process-group machinery, whose
    process ids the sandbox's own PID namespace would hide (`tests/security/` covers the sandbox)."""
    workspace = Workspace.open(root, allow_commands=True, commands=CommandPolicy(sandbox=False))
    return ToolContext(run_id="run", agent_id="agent", workspace=workspace, emit=lambda e: None)


async def run(ctx: ToolContext, command: str, **arguments: Any) -> ToolReturn:
    return await bash.run(ctx, {"command": command, **arguments})


def is_gone(pid: int) -> bool:
    """True when `pid` has exited (a zombie waiting for a reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


async def gone_within(pid: int, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if is_gone(pid):
            return True
        await asyncio.sleep(0.05)
    return is_gone(pid)


async def read_pid(path: Path, seconds: float = 30.0) -> int:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        await asyncio.sleep(0.02)
    raise AssertionError(f"{path} was never written")


async def test_commands_are_refused_unless_the_workspace_allows_them(root: Path) -> None:
    ctx = ToolContext(run_id="run", agent_id="agent", workspace=Workspace.open(root), emit=lambda e: None)
    with pytest.raises(ToolError) as caught:
        await run(ctx, "touch made.txt")
    assert str(caught.value) == (
        "commands are not allowed in this workspace; the runtime must allow them (--allow-commands)"
    )
    assert not (root / "made.txt").exists()


async def test_a_command_runs_in_the_workspace_root_and_reports_its_exit_code(ctx: ToolContext, root: Path) -> None:
    returned = await run(ctx, "pwd; exit 3")
    assert returned.content == f"{root}\n[exit code 3]"
    assert returned.data == {"exit_code": 3, "output_bytes": len(str(root)) + 1}


async def test_stdout_and_stderr_come_back_together_in_order(ctx: ToolContext) -> None:
    returned = await run(ctx, "echo out; echo err >&2; echo out again")
    assert returned.content == "out\nerr\nout again\n[exit code 0]"


async def test_a_silent_command_says_it_had_no_output(ctx: ToolContext) -> None:
    assert (await run(ctx, "true")).content == "(no output)\n[exit code 0]"


async def test_commands_get_no_input(ctx: ToolContext) -> None:
    returned = await run(ctx, 'cat; read line; echo "read: [$line]"', timeout=60)
    assert returned.content == "read: []\n[exit code 0]"


async def test_a_command_runs_in_its_own_session_and_process_group(unconfined: ToolContext) -> None:
    returned = await run(unconfined, "echo $$; cut -d' ' -f5,6 /proc/$$/stat")
    pid, groups = returned.content.splitlines()[:2]
    assert groups == f"{pid} {pid}"


async def test_a_timeout_kills_the_command_and_its_children(unconfined: ToolContext, root: Path) -> None:
    started = time.monotonic()
    with pytest.raises(ToolError) as caught:
        await run(unconfined, "echo before; sleep 60 & echo $! > child.pid; wait", timeout=1)
    assert time.monotonic() - started < 30  # well short of the child's 60 s: it did not wait for it
    assert str(caught.value) == (
        "the command timed out after 1s and was killed, with every process it started; output so far:\nbefore\n"
    )
    assert await gone_within(int((root / "child.pid").read_text()))


async def test_cancelling_the_call_kills_the_command_and_cancellation_goes_on(
    unconfined: ToolContext, root: Path
) -> None:
    task = asyncio.create_task(run(unconfined, "sleep 60 & echo $! > child.pid; wait"))
    child = await read_pid(root / "child.pid")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await gone_within(child)


async def test_cancelling_a_command_while_it_starts_kills_what_it_started(unconfined: ToolContext, root: Path) -> None:
    """On a loaded machine the command runs before the event loop has connected its pipes; a
    cancellation then must not leave its background processes running (nor wait for them)."""
    for turns in range(4):
        pid_file = root / f"child{turns}.pid"
        task = asyncio.create_task(run(unconfined, f"sleep 600 & echo $! > {pid_file.name}; wait"))
        for _ in range(turns):
            await asyncio.sleep(0)  # cancel at a different step of the start each time
        time.sleep(0.05)  # the loop held up, as by a busy machine, while the command runs
        task.cancel()
        await asyncio.wait([task], timeout=60)
        assert task.cancelled()
        if pid_file.exists():
            assert await gone_within(await read_pid(pid_file))


async def test_long_output_keeps_its_head_and_tail(ctx: ToolContext) -> None:
    returned = await run(ctx, "seq 1 100000")
    text = returned.content
    assert len(text) < 30_300
    assert text.startswith("1\n2\n3\n")
    assert text.endswith("99999\n100000\n[exit code 0]")
    assert "bytes of output cut; send it to a file and read that in parts to see it all" in text
    assert returned.data["output_bytes"] == len("".join(f"{n}\n" for n in range(1, 100001)))


async def test_background_processes_holding_the_output_are_stopped_when_the_command_ends(
    unconfined: ToolContext, short_hold_grace: None
) -> None:
    started = time.monotonic()
    returned = await run(unconfined, "sleep 60 & echo $!")
    assert time.monotonic() - started < 30  # well short of the child's 60 s: it did not wait for it
    pid, note, exit_code = returned.content.splitlines()
    assert note.startswith("[background processes still holding the output were stopped")
    assert exit_code == "[exit code 0]"
    assert await gone_within(int(pid))


async def test_background_processes_with_their_own_output_keep_running(ctx: ToolContext) -> None:
    returned = await run(ctx, "sleep 60 > /dev/null 2>&1 & echo $!")
    pid = int(returned.content.splitlines()[0])
    try:
        assert returned.content == f"{pid}\n[exit code 0]"
        assert not is_gone(pid)
    finally:
        os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(shutil.which("setsid") is None, reason="needs setsid(1)")
async def test_a_process_that_leaves_the_group_does_not_hold_the_call_up(ctx: ToolContext) -> None:
    started = time.monotonic()
    returned = await run(ctx, "setsid sleep 60 & echo $!")
    pid = int(returned.content.splitlines()[0])
    try:
        assert time.monotonic() - started < 30  # well short of the child's 60 s
        assert returned.content.endswith("[exit code 0]")
    finally:
        os.kill(pid, signal.SIGKILL)


async def test_a_command_killed_by_a_signal_says_which(unconfined: ToolContext) -> None:
    assert (await run(unconfined, "kill -9 $$")).content == "(no output)\n[killed by SIGKILL (exit code -9)]"


async def test_the_timeout_must_be_between_1_and_600_seconds(ctx: ToolContext) -> None:
    for timeout in (0, 601):
        with pytest.raises(ToolError, match=r"^invalid arguments for bash: timeout:"):
            await run(ctx, "true", timeout=timeout)


async def test_the_model_sees_command_output_through_the_loop(ctx: ToolContext, root: Path) -> None:
    model = ScriptedModel([call("bash", command="echo hi > out.txt && cat out.txt"), reply("done")])
    spec = AgentSpec(name="lead", instructions="work", model=model, tools=builtin_tools(allow_commands=True))
    result = await run_agent(spec, ctx, [Message.user("say hi")])
    [part] = [p for m in result.messages for p in m.tool_results]
    assert (part.is_error, part.content) == (False, "hi\n[exit code 0]")
    assert (root / "out.txt").read_text() == "hi\n"


async def test_a_refused_command_reaches_the_model_as_an_error_result(root: Path) -> None:
    ctx = ToolContext(run_id="run", agent_id="agent", workspace=Workspace.open(root), emit=lambda e: None)
    model = ScriptedModel([call("bash", command="ls"), reply("could not list")])
    tools = [*builtin_tools(allow_commands=False), bash]  # handed bash anyway: the workspace still says no
    spec = AgentSpec(name="lead", instructions="work", model=model, tools=tools)
    result = await run_agent(spec, ctx, [Message.user("list")])
    [part] = [p for m in result.messages for p in m.tool_results]
    assert part.is_error
    assert part.content == (
        "Error: commands are not allowed in this workspace; the runtime must allow them (--allow-commands)"
    )
    assert result.final == "could not list"


async def test_commands_see_only_allowed_variables_and_never_the_runtimes_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from delegate.tools._shell import run_command

    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("DELEGATE_DB", "postgresql://u:p@h/db")
    monkeypatch.setenv("HARMLESS", "visible")
    monkeypatch.setenv("UNNAMED", "hidden-value")
    policy = CommandPolicy(env=("HARMLESS", "OPENAI_API_KEY", "DELEGATE_DB"))
    result = await run_command("env", Workspace.open(tmp_path, commands=policy), timeout=10)
    assert "HARMLESS=visible" in result.output
    assert f"HOME={tmp_path.resolve()}" in result.output
    assert "sk-secret" not in result.output and "u:p@h/db" not in result.output
    assert "hidden-value" not in result.output
    assert "sk-secret" not in result.output and "u:p@h/db" not in result.output


def test_naming_a_credential_with_command_env_says_it_is_left_out(tmp_path: Path) -> None:
    """The operator who writes `--command-env OPENAI_API_KEY` is told it never reaches a command,
    instead of finding out from a command that fails without it."""
    from tests.cli_support import run_cli
    from tests.durable_support import cli_env
    from tests.loopback_openai import OpenAIServer, Reply

    with OpenAIServer(lambda body: Reply(content="ok")) as server:
        args = ["run", "hi", "--model", "openai:m", "--allow-commands", "--unsandboxed-commands"]
        done = run_cli([*args, "--command-env", "OPENAI_API_KEY", "--command-env", "HOME"], cli_env(server.base_url))
    assert done.returncode == 0, done.stderr
    assert "warning: --command-env OPENAI_API_KEY: the runtime's own credentials" in done.stderr
    assert "HOME" not in done.stderr.split("--command-env", 1)[1].split("\n")[0]


@pytest.mark.parametrize(
    ("command", "allowed"),
    [
        ("git diff --stat", True),
        ("git diff", True),
        ("git diffx", False),  # a prefix rule matches whole words
        ("npm test", True),
        ("npm test -- -x", False),  # an exact rule matches only itself
        ("npm run build", True),  # a `*` pattern matches the whole command
        ("git diff && npm test", True),
        ("git diff; rm -rf src", False),  # every part of a line must be allowed
        ("git diff | rm -rf src", False),
        ("git diff 2>&1 > out.txt", True),  # a redirection is not a separator
        ('git diff "a;b"', True),  # nor is a quoted `;`
        ("git diff $(rm -rf src)", False),  # substitution cannot be checked
        ("git diff `rm -rf src`", False),
        ("X=1 git diff", False),
        ("$GIT diff", False),
        ("git diff 'unclosed", False),
    ],
)
def test_command_rules_allow_only_lines_whose_every_command_matches(command: str, allowed: bool) -> None:
    from delegate.workspace import CommandRules

    rules = CommandRules(allow=("git diff:*", "npm test", "npm run *"))
    assert (rules.refusal(command) is None) == allowed
