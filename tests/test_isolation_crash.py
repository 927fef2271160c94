"""A merge of an overlay subagent's layer killed with SIGKILL at random points: the next start
leaves the workspace with the whole change or none of it, never a part."""

from __future__ import annotations

import os
import random
import signal
import stat
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from delegate import Workspace
from delegate.subagents import recover_merges
from delegate.workspace import Layer
from tests.cli_support import delegate
from tests.durable_support import cli_env, run_json
from tests.loopback_openai import OpenAIServer, Reply

KILLS = 24
FILES = 300
"""Files the layer modifies; as many again it creates, and a third as many it deletes."""
MERGER = """
import sys
from dataclasses import replace
from delegate import Workspace
from delegate.workspace import Layer
from delegate.workspace import merge_layer
workspace = Workspace.open(sys.argv[1])
layer = Layer(root=workspace.root, run_id="run", agent_id="sub1")
print("ready", flush=True)
sys.stdin.readline()  # imported and ready: merge when told to go
merge_layer(replace(workspace, layer=layer), layer)
print("merged", flush=True)
"""


def _prepare(root: Path) -> None:
    """A workspace of old files and a layer that changes them: modifies, creates and deletes."""
    root.mkdir()
    for i in range(FILES + FILES // 3):
        (root / f"f{i:03}.txt").write_text(f"old {i}\n")
    upper = Layer(root=root, run_id="run", agent_id="sub1").upper
    (upper / "made").mkdir(parents=True)
    for i in range(FILES):
        (upper / f"f{i:03}.txt").write_text(f"new {i}\n")
        (upper / "made" / f"n{i:03}.txt").write_text(f"made {i}\n")
    for i in range(FILES, FILES + FILES // 3):
        os.mknod(upper / f"f{i:03}.txt", stat.S_IFCHR | 0o600, 0)  # a whiteout: deleted


def _text(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


def _state(root: Path) -> str:
    """`none` (the workspace as it was), `whole` (the whole change), or `part`."""
    old = all(_text(root / f"f{i:03}.txt") == f"old {i}\n" for i in range(FILES + FILES // 3))
    if old and not (root / "made").exists():
        return "none"
    new = all(_text(root / f"f{i:03}.txt") == f"new {i}\n" for i in range(FILES))
    made = all(_text(root / "made" / f"n{i:03}.txt") == f"made {i}\n" for i in range(FILES))
    gone = not any((root / f"f{i:03}.txt").exists() for i in range(FILES, FILES + FILES // 3))
    return "whole" if new and made and gone else "part"


def _until_journalled(root: Path, proc: subprocess.Popen[str]) -> None:
    journal = Layer(root=root, run_id="run", agent_id="sub1").path / "journal.json"
    while not journal.exists() and proc.poll() is None:
        time.sleep(0.0005)


def _merger(root: Path) -> subprocess.Popen[str]:
    """A merger of the layer of `root` (prepared here), started: it merges once told to go."""
    _prepare(root)
    return subprocess.Popen(
        [sys.executable, "-c", MERGER, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def test_a_merge_killed_at_random_points_ends_whole_or_not_at_all_after_the_next_start(tmp_path: Path) -> None:
    seen: dict[str, int] = {}
    before_recovery: dict[str, int] = {}
    rng = random.Random(2026)
    upcoming = _merger(tmp_path / "ws0")
    try:
        for n in range(KILLS):
            root, proc = tmp_path / f"ws{n}", upcoming
            assert proc.stdin is not None and proc.stdout is not None and proc.stdout.readline().strip() == "ready"
            if n + 1 < KILLS:  # the next one starts its interpreter and imports (0.3 s) meanwhile
                upcoming = _merger(tmp_path / f"ws{n + 1}")
            proc.stdin.write("go\n")
            proc.stdin.flush()
            if n % 3 == 0:  # anywhere: while it lists and stages the changes, or later
                time.sleep(rng.uniform(0.0, 0.5))
            else:  # once the merge is decided (its journal written), while it applies it, or later
                _until_journalled(root, proc)
                time.sleep(rng.uniform(0.0, 0.03))
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            proc.stdin.close()
            proc.stdout.close()
            state = _state(root)
            before_recovery[state] = before_recovery.get(state, 0) + 1
            recover_merges(Workspace.open(root))
            after = _state(root)
            seen[after] = seen.get(after, 0) + 1
            assert after in ("none", "whole"), f"kill {n}: the workspace holds part of the merge after recovery"
    finally:  # a test that failed half-way leaves no merger waiting to go
        upcoming.kill()
        upcoming.wait(timeout=30)
    assert sum(seen.values()) == KILLS >= 20
    assert before_recovery.get("part", 0) >= 1, f"no kill landed mid-merge: {before_recovery}"


def test_the_next_delegate_run_finishes_a_merge_that_a_kill_interrupted(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    _prepare(root)
    layer = Layer(root=root, run_id="run", agent_id="sub1")
    workspace = replace(Workspace.open(root), layer=layer)
    from delegate.tools import never_merged
    from delegate.workspace import layer_changes
    from delegate.workspace._merge import _stage  # pyright: ignore[reportPrivateUsage]

    _stage(layer, layer_changes(layer, never_merged(workspace.shared)))  # journalled, then "killed"
    assert _state(root) == "none" and (layer.path / "journal.json").is_file()

    def answer(body: dict[str, Any]) -> Reply:
        return Reply(content="nothing to do")

    with OpenAIServer(answer) as server:
        proc = subprocess.run(
            delegate("run", "hello", "--model", "openai:m", "--json", "-w", str(root)),
            env=cli_env(server.base_url),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert run_json(proc)["status"] == "completed"
    assert _state(root) == "whole" and not layer.path.exists()
