"""Bad input to the command line is one line on stderr and exit code 2, never a traceback;
`--debug` shows the traceback."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli_support import run_cli
from tests.durable_support import cli_env, keyed_responder
from tests.loopback_openai import OpenAIServer


@pytest.fixture
def env() -> Iterator[dict[str, str]]:
    with OpenAIServer(keyed_responder) as server:
        yield cli_env(server.base_url)


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_a_prompt_that_is_not_utf8_is_refused_in_one_line(env: dict[str, str], tmp_path: Path) -> None:
    line = one_line_error(run_cli(["run", b"caf\xe9", "--model", "openai:m"], env, tmp_path))
    assert line == "error: the prompt is not valid UTF-8 (byte 0xe9 at position 3): pass it as UTF-8 text"


def test_a_jsonl_file_that_is_not_utf8_is_refused_naming_its_line(env: dict[str, str], tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    items.write_bytes(b'{"key": "a", "prompt": "ok"}\n{"key": "b", "prompt": "caf\xe9"}\n')
    line = one_line_error(run_cli(["batch", "submit", str(items), "--type", "explore", "--detach"], env, tmp_path))
    assert line == f"error: {items}:2: not valid UTF-8 (byte 0xe9 at column 28); save it as UTF-8"


def test_deeply_nested_json_is_refused_in_one_line(env: dict[str, str], tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    items.write_text('{"key": "a", "prompt": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    line = one_line_error(run_cli(["batch", "submit", str(items), "--type", "explore", "--detach"], env, tmp_path))
    assert line == f"error: {items}:1: nested too deeply to read; each line is one flat item object"


@pytest.mark.skipif(os.geteuid() == 0 and sys.platform == "linux", reason="root writes read-only folders")
def test_a_read_only_workspace_is_refused_in_one_line(env: dict[str, str], tmp_path: Path) -> None:
    tmp_path.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        line = one_line_error(run_cli(["run", "hello", "--model", "openai:m"], env, tmp_path))
    finally:
        tmp_path.chmod(stat.S_IRWXU)
    assert "permission denied" in line


def test_a_workspace_whose_store_is_a_folder_we_cannot_write_is_refused_in_one_line(
    env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / ".delegate").write_text("a file where the store's folder should be")
    line = one_line_error(run_cli(["run", "hello", "--model", "openai:m"], env, tmp_path))
    assert ".delegate" in line  # names what it cannot use


def test_a_corrupt_database_is_refused_in_one_line(env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / ".delegate").mkdir()
    (tmp_path / ".delegate" / "delegate.db").write_bytes(b"this is not a database" * 100)
    line = one_line_error(run_cli(["runs", "list"], env, tmp_path))
    assert "is not a SQLite database" in line


def test_an_unreachable_database_is_refused_in_one_line(env: dict[str, str], tmp_path: Path) -> None:
    url = "postgresql://nobody@127.0.0.1:9/nowhere"
    line = one_line_error(run_cli(["runs", "list", "--db", url], env, tmp_path))
    assert line.startswith("error: the database postgresql+psycopg://nobody@127.0.0.1:9/nowhere cannot be used")


def test_debug_shows_the_traceback(env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / ".delegate").mkdir()
    (tmp_path / ".delegate" / "delegate.db").write_bytes(b"this is not a database" * 100)
    proc = run_cli(["runs", "list", "--debug"], env, tmp_path)
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "UserError" in proc.stderr


def test_an_unknown_run_is_one_line(env: dict[str, str], tmp_path: Path) -> None:
    for args in (["runs", "show", "nope"], ["runs", "cancel", "nope"], ["run", "--resume", "nope"]):
        line = one_line_error(run_cli(args, env, tmp_path))
        assert line == "error: no run 'nope': list the runs with `delegate runs list`"


def test_a_bad_command_limit_is_refused_in_one_line_naming_the_caps(env: dict[str, str], tmp_path: Path) -> None:
    proc = run_cli(
        ["run", "hi", "--model", "openai:m", "--allow-commands", "--command-limit", "speed=3"], env, tmp_path
    )
    line = one_line_error(proc)
    assert line.startswith("error: --command-limit 'speed=3': write NAME=VALUE, NAME one of processes, memory")


def test_command_limits_reach_the_workspaces_command_policy(tmp_path: Path) -> None:
    from delegate.cli._common import OperatorFlags

    flags = OperatorFlags(allow_commands=True, command_limit=["processes=64", "memory=1G", "disk_quota=0"])
    policy = flags.settings(tmp_path).commands
    assert policy is not None
    limits = policy.limits
    assert (limits.processes, limits.memory, limits.disk_quota, limits.open_files) == (64, 1 << 30, 0, 1024)
