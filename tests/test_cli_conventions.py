"""The conventions users know from `llm`, `uv` and `gh`, each through the real CLI in a subprocess:
`--version`, the prompt from stdin, the latest run by default, shell completion, help in panels,
one JSON array per `list --json`, reading that creates nothing, and answers as Markdown on a
terminal (plain when piped)."""

from __future__ import annotations

import json
import os
import pty
import re
import shlex
import subprocess
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import typer

from tests.cli_support import delegate, run_cli, scrubbed_env
from tests.loopback_openai import OpenAIServer, Reply
from tests.test_batch_cli import env_for

ANSWER = "# Findings\n\nThe **bold** claim holds.\n\n- first point\n- second point\n"


def echo(body: dict[str, Any]) -> Reply:
    """The lead answers with the prompt it was given, after `said: `."""
    user = next(m for m in body["messages"] if m["role"] == "user")
    return Reply(content=f"said: {user['content']}")


def markdown(body: dict[str, Any]) -> Reply:
    return Reply(content=ANSWER)


def run_with_stdin(args: list[str], text: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(delegate(*args), input=text, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)


def test_version_prints_the_installed_version() -> None:
    for args in (["--version"], ["-V"], ["version"]):
        done = run_cli(args)
        assert done.returncode == 0 and done.stdout.strip() == f"delegate {version('delegate')}", args


def test_dash_h_is_help_on_every_command() -> None:
    for args in (["-h"], ["run", "-h"], ["batch", "-h"], ["batch", "list", "-h"], ["runs", "approve", "-h"]):
        done = run_cli(args, env=scrubbed_env() | {"COLUMNS": "160"})
        assert done.returncode == 0 and "Usage: delegate" in done.stdout, (args, done.stderr)


def test_the_prompt_comes_from_stdin_given_a_dash_or_a_pipe(tmp_path: Path) -> None:
    with OpenAIServer(echo) as server:
        env = env_for(server.base_url)
        dash = run_with_stdin(["run", "-", "--model", "openai:m", "--json"], "summarise the diff\n", env, tmp_path)
        piped = run_with_stdin(["run", "--model", "openai:m", "--json"], "list the files", env, tmp_path)
        empty = run_with_stdin(["run", "-", "--model", "openai:m"], "  \n", env, tmp_path)
    assert json.loads(dash.stdout)["final"] == "said: summarise the diff\n", dash.stderr
    assert json.loads(piped.stdout)["final"] == "said: list the files", piped.stderr
    assert empty.returncode == 2 and "the prompt read from stdin is empty" in empty.stderr


def test_runs_show_events_and_export_mean_the_latest_run_without_an_id(tmp_path: Path) -> None:
    with OpenAIServer(echo) as server:
        env = env_for(server.base_url)
        for prompt in ("first", "second"):
            assert run_cli(["run", prompt, "--model", "openai:m"], env, tmp_path).returncode == 0
    latest = json.loads(run_cli(["runs", "list", "--json"], env, tmp_path).stdout)[0]["run_id"]
    shown = json.loads(run_cli(["runs", "show", "--json"], env, tmp_path).stdout)
    assert (shown["run_id"], shown["final"]) == (latest, "said: second")
    events = [json.loads(line) for line in run_cli(["runs", "events", "--json"], env, tmp_path).stdout.splitlines()]
    assert {e["run_id"] for e in events} == {latest}
    assert json.loads(run_cli(["runs", "export"], env, tmp_path).stdout)["run_id"] == latest


def test_shell_completion_is_offered() -> None:
    """From a bash (completion finds its shell among the process's parents, as from a terminal)."""
    command = " ".join(shlex.quote(str(arg)) for arg in delegate("--show-completion"))
    done = subprocess.run(
        ["bash", "-c", f"{command}; exit $?"], env=scrubbed_env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and "_delegate_completion" in done.stdout, done.stdout + done.stderr
    assert "--install-completion" in run_cli(["--help"]).stdout


def test_run_help_groups_its_options_into_panels() -> None:
    shown = run_cli(["run", "--help"], env=scrubbed_env() | {"COLUMNS": "160"}).stdout
    panels = [line.strip("╭─ ").split(" ─")[0] for line in shown.splitlines() if line.startswith("╭")]
    assert panels == [
        "Arguments",
        "Options",
        "Model",
        "Limits",
        "Output and history",
        "Workflow",
        "Agents, skills and MCP",
        "Commands",
        "The loop",
    ]
    limits = shown[shown.index("╭─ Limits") : shown.index("╭─ Output")]
    assert all(flag in limits for flag in ("--timeout", "--token-budget", "--max-requests", "--cost-budget"))


def test_every_list_json_is_one_array_and_runs_events_json_is_json_lines(tmp_path: Path) -> None:
    with OpenAIServer(echo) as server:
        env = env_for(server.base_url)
        assert run_cli(["run", "hello", "--model", "openai:m"], env, tmp_path).returncode == 0
        assert run_cli(["users", "add", "ada"], env, tmp_path).returncode == 0
    for command in (["runs", "list"], ["agents", "list"], ["users", "list"]):
        listed = json.loads(run_cli([*command, "--json"], env, tmp_path).stdout)
        assert isinstance(listed, list) and listed, command
    lines = run_cli(["runs", "events", "--json"], env, tmp_path).stdout.splitlines()
    assert len(lines) > 2 and all(isinstance(json.loads(line), dict) for line in lines)
    assert "JSON Lines" in run_cli(["runs", "events", "--help"], env=scrubbed_env() | {"COLUMNS": "200"}).stdout


def test_commands_that_only_read_create_nothing_where_they_run(tmp_path: Path) -> None:
    said: dict[str, subprocess.CompletedProcess[str]] = {}
    for command in (
        ["runs", "list"],
        ["runs", "list", "--json"],
        ["runs", "show"],
        ["runs", "events"],
        ["runs", "export"],
        ["agents", "list"],
        ["users", "list"],
        ["batch", "status", "b_nope"],
        ["batch", "list"],
    ):
        done = said[" ".join(command)] = run_cli(command, cwd=tmp_path)
        assert done.returncode in (0, 2), (command, done.stderr)
        assert list(tmp_path.iterdir()) == [], command
    assert said["runs list --json"].stdout.strip() == "[]"
    assert said["runs show"].stderr.strip() == "error: no runs yet: start one with `delegate run PROMPT`"


def on_a_terminal(args: list[str], env: dict[str, str], cwd: Path) -> str:
    """The text `delegate ARGS` shows on a terminal (a pseudo-terminal of 100 columns)."""
    main, child = pty.openpty()
    proc = subprocess.Popen(
        delegate(*args),
        stdin=subprocess.DEVNULL,
        stdout=child,
        stderr=child,
        env=env | {"COLUMNS": "100", "TERM": "xterm"},
        cwd=cwd,
    )
    os.close(child)
    shown = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        shown += chunk
    os.close(main)
    assert proc.wait(timeout=120) == 0, shown
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown.decode(errors="replace"))  # colours and cursor moves left out


def test_an_answer_is_rendered_as_markdown_on_a_terminal_and_plain_when_piped(tmp_path: Path) -> None:
    with OpenAIServer(markdown) as server:
        env = env_for(server.base_url)
        shown = on_a_terminal(["run", "report", "--model", "openai:m"], env, tmp_path)
        piped = run_cli(["run", "report", "--model", "openai:m"], env, tmp_path)
    assert "Findings" in shown and "• first point" in shown
    assert "**bold**" not in shown and "# Findings" not in shown
    assert piped.stdout == ANSWER + "\n"
    assert "**bold**" in run_cli(["runs", "show"], env, tmp_path).stdout  # piped: as it is
    assert "• second point" in on_a_terminal(["runs", "show"], env, tmp_path)


def test_every_commands_help_names_its_values_as_people_read_them_and_shows_a_real_example(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As `gh` and `llm` show help: `TEXT`, `N`, `DIR`, `RUN_ID`, never typer's `<str>`, `<bool>`,
    `<int range> [x>=1]` or `{run_id}`; and each command an example whose flags it takes."""
    from delegate.cli._help import EXAMPLES, HELP_NAMES, build

    monkeypatch.setenv("COLUMNS", "200")
    root = build()

    def commands(command: Any, path: str = "") -> Iterator[tuple[str, Any]]:
        for name, sub in (getattr(command, "commands", None) or {}).items():
            yield from commands(sub, f"{path} {name}".strip())
        if not getattr(command, "commands", None):
            yield path, command

    found = dict(commands(root))
    assert set(EXAMPLES) == set(found)  # every command has its example, none names a command gone
    for path, command in found.items():
        command.get_help(typer.Context(command, info_name=f"delegate {path}", help_option_names=HELP_NAMES))
        shown = capsys.readouterr().out
        assert path not in EXAMPLES or f"Example: {EXAMPLES[path]}" in shown, path
        assert not re.search(r"<(str|int|float|bool|path|list)|\{[a-z_]+\}|x>=|x<=", shown), (path, shown)
        options = {name for param in command.params for name in (*param.opts, *param.secondary_opts)}
        flags = [w.split("=")[0] for w in shlex.split(EXAMPLES.get(path, "")) if w.startswith("-")]
        assert set(flags) <= options, (path, flags)
