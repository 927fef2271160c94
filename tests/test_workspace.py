"""The workspace root holds: no path a model can spell reads or writes a file outside it.

Examples for each kind of escape, against every tool that takes a path, then two hypothesis
properties over generated paths: `resolve` answers a path under the root or refuses, and running
the tools on those paths never touches, or shows, anything outside the root.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delegate import ToolContext, ToolError, UserError, Workspace, WorkspaceError
from delegate.tools import BUILTIN_TOOLS

SECRET = "TOP-SECRET-CONTENT"


@dataclass
class Planted:
    """A workspace beside an `outside` folder, with symlinks pointing in, out and round in loops."""

    base: Path
    root: Path
    outside: Path
    workspace: Workspace

    def ctx(self) -> ToolContext:
        return ToolContext(run_id="run", agent_id="agent", workspace=self.workspace, emit=lambda e: None)


def plant(base: Path) -> Planted:
    base = base.resolve()
    root = base / "ws"
    outside = base / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text(f"{SECRET}\n")
    (outside / "nested").mkdir()
    (outside / "nested" / "deep.txt").write_text(f"{SECRET} deep\n")
    (base / "beside.txt").write_text(f"{SECRET} beside\n")
    (root / "a.txt").write_text("inside a\n")
    (root / "sub" / "b.txt").write_text("inside b\n")
    links = {
        "in_file": "sub/b.txt",
        "in_dir": "sub",
        "in_abs": str(root / "sub"),
        "out_file": "../outside/secret.txt",
        "out_dir": "../outside",
        "out_abs": str(outside),
        "out_beside": "../beside.txt",
        "dangling_out": "../outside/new.txt",  # writing through it would create a file outside
        "dangling_out_dir": "../outside/newdir",
        "loop": "loop",
        "ping": "pong",
        "pong": "ping",
        "up": "..",
        "sub/back": "../..",
        "sub/parent": "..",
        "sub/twisty": "../sub/../../outside",
    }
    for name, target in links.items():
        (root / name).symlink_to(target)
    return Planted(base=base, root=root, outside=outside, workspace=Workspace.open(root))


@pytest.fixture
def planted(tmp_path: Path) -> Planted:
    return plant(tmp_path)


def snapshot_outside(p: Planted) -> dict[str, bytes | str]:
    """Every path under the temporary base except the workspace, with file contents and link targets."""
    seen: dict[str, bytes | str] = {}
    for folder, dirnames, filenames in os.walk(p.base):
        if Path(folder) == p.base:
            dirnames.remove("ws")
        for name in dirnames + filenames:
            path = Path(folder, name)
            key = str(path.relative_to(p.base))
            if path.is_symlink():
                seen[key] = "-> " + os.readlink(path)
            elif path.is_dir():
                seen[key] = "dir"
            else:
                seen[key] = path.read_bytes()
    return seen


# resolve --------------------------------------------------------------------------------------


def test_resolve_answers_real_paths_inside_the_root(planted: Planted) -> None:
    ws, root = planted.workspace, planted.root
    assert ws.resolve("a.txt") == root / "a.txt"
    assert ws.resolve("./sub/../a.txt") == root / "a.txt"
    assert ws.resolve(str(root / "sub/b.txt")) == root / "sub/b.txt"
    assert ws.resolve("") == root
    assert ws.resolve(".") == root
    assert ws.resolve("sub/parent") == root
    assert ws.resolve("in_file") == root / "sub/b.txt"
    assert ws.resolve("in_abs/b.txt") == root / "sub/b.txt"
    assert ws.resolve("not/yet/there.md") == root / "not/yet/there.md"


ESCAPES = [
    "..",
    "../x",
    "../outside/secret.txt",
    "sub/../../outside/secret.txt",
    "/etc/passwd",
    "/",
    "~",
    "~/x",
    "out_file",
    "out_dir",
    "out_dir/secret.txt",
    "out_dir/nested/deep.txt",
    "out_abs/secret.txt",
    "out_beside",
    "dangling_out",
    "dangling_out_dir/x.txt",
    "up",
    "up/outside/secret.txt",
    "sub/back/outside/secret.txt",
    "sub/twisty/secret.txt",
    "in_dir/../../outside/secret.txt",
    "loop",
    "loop/x",
    "ping",
    "pong/x",
    # After a loop, realpath returns the rest unresolved: these once came back as the bare links.
    "loop/../out_file",
    "ping/../out_dir/secret.txt",
    "loop/../in_file",
]


@pytest.mark.parametrize("path", ESCAPES)
def test_resolve_refuses_paths_that_leave_the_root(planted: Planted, path: str) -> None:
    with pytest.raises(WorkspaceError):
        planted.workspace.resolve(path)


def test_resolve_refuses_absolute_paths_elsewhere(planted: Planted) -> None:
    for path in [planted.outside / "secret.txt", planted.base, planted.base / "wsx", Path("/tmp")]:
        with pytest.raises(WorkspaceError, match="is outside the workspace"):
            planted.workspace.resolve(path)


def test_resolve_tells_a_loop_from_an_escape(planted: Planted) -> None:
    with pytest.raises(WorkspaceError, match="symlink loop"):
        planted.workspace.resolve("ping/x")
    with pytest.raises(WorkspaceError, match=r"path '\.\./x' is outside the workspace"):
        planted.workspace.resolve("../x")


def test_resolve_refuses_a_nul_byte(planted: Planted) -> None:
    with pytest.raises(WorkspaceError, match="NUL byte"):
        planted.workspace.resolve("a.txt\x00.png")


def test_a_tilde_of_an_unknown_user_is_a_plain_name_inside(planted: Planted) -> None:
    assert planted.workspace.resolve("~no-such-user-here/x") == planted.root / "~no-such-user-here/x"


def test_a_workspace_error_is_both_a_tool_error_and_a_user_error() -> None:
    assert issubclass(WorkspaceError, ToolError)
    assert issubclass(WorkspaceError, UserError)


def test_relative_spells_paths_from_the_root(planted: Planted) -> None:
    ws = planted.workspace
    assert ws.relative(planted.root) == "."
    assert ws.relative(planted.root / "sub/b.txt") == "sub/b.txt"


# every tool refuses every escape --------------------------------------------------------------


def path_calls(path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each way a tool can be handed `path`."""
    yield "read_file", {"path": path}
    yield "write_file", {"path": path, "content": "PWNED"}
    yield "write_file", {"path": f"{path}/new.txt", "content": "PWNED"}
    yield "edit_file", {"path": path, "old_string": SECRET, "new_string": "PWNED"}
    yield "list_dir", {"path": path}
    yield "find_files", {"pattern": "**", "path": path}
    yield "find_files", {"pattern": f"{path}/*"}
    yield "grep", {"pattern": "SECRET", "path": path}


TOOL_ESCAPES = [p for p in ESCAPES if not p.startswith(("/", "~"))] + ["ABS_OUTSIDE", "ABS_SECRET"]


@pytest.mark.parametrize("path", TOOL_ESCAPES)
async def test_every_path_tool_refuses_every_escape(planted: Planted, path: str) -> None:
    path = {"ABS_OUTSIDE": str(planted.outside), "ABS_SECRET": str(planted.outside / "secret.txt")}.get(path, path)
    before = snapshot_outside(planted)
    ctx = planted.ctx()
    for name, arguments in path_calls(path):
        with pytest.raises(WorkspaceError) as caught:
            await BUILTIN_TOOLS[name].run(ctx, arguments)
        assert SECRET not in str(caught.value), (name, arguments)
    assert snapshot_outside(planted) == before


@pytest.mark.parametrize("path", ["/etc/passwd", "/etc", "/"])
async def test_read_only_tools_refuse_system_paths(planted: Planted, path: str) -> None:
    ctx = planted.ctx()
    for name, arguments in path_calls(path):
        if name in ("write_file", "edit_file"):
            continue  # never aim a write at a real system file, even one we expect refused
        with pytest.raises(WorkspaceError):
            await BUILTIN_TOOLS[name].run(ctx, arguments)


async def test_walking_the_root_never_follows_links_out(planted: Planted) -> None:
    ctx = planted.ctx()
    everything = (await BUILTIN_TOOLS["find_files"].run(ctx, {"pattern": "**"})).content.splitlines()
    assert everything == ["a.txt", "in_abs/", "in_dir/", "in_file", "sub/", "sub/b.txt", "sub/parent/"]
    found = (await BUILTIN_TOOLS["grep"].run(ctx, {"pattern": "SECRET|inside"})).content
    assert found.splitlines() == ["a.txt:1: inside a", "in_file:1: inside b", "sub/b.txt:1: inside b"]
    listing = (await BUILTIN_TOOLS["list_dir"].run(ctx, {"path": "."})).content
    assert SECRET not in listing
    assert "out_dir -> (outside the workspace, or a symlink loop)" in listing


async def test_links_inside_the_root_are_followed(planted: Planted) -> None:
    ctx = planted.ctx()
    assert (await BUILTIN_TOOLS["read_file"].run(ctx, {"path": "in_file"})).content == "     1\tinside b"
    written = await BUILTIN_TOOLS["write_file"].run(ctx, {"path": "in_dir/c.txt", "content": "c"})
    assert written.content == "created sub/c.txt (1 byte written)"
    assert (await BUILTIN_TOOLS["list_dir"].run(ctx, {"path": "in_dir"})).content.startswith("sub/ (")


# properties over generated paths --------------------------------------------------------------

SEGMENTS = [
    "..", ".", "", "a.txt", "sub", "b.txt", "new.txt", "newdir", "secret.txt", "outside", "ws", "nested",
    "in_file", "in_dir", "in_abs", "out_file", "out_dir", "out_abs", "out_beside", "dangling_out",
    "dangling_out_dir", "loop", "ping", "pong", "up", "back", "parent", "twisty",
]  # fmt: skip


def generated_paths(prefixes: list[str]) -> st.SearchStrategy[str]:
    segments = st.lists(st.sampled_from(SEGMENTS), min_size=0, max_size=6)
    return st.builds(lambda prefix, parts: prefix + "/".join(parts), st.sampled_from(prefixes), segments)


@pytest.fixture(scope="module")
def planted_once(tmp_path_factory: pytest.TempPathFactory) -> Planted:
    return plant(tmp_path_factory.mktemp("resolve"))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_resolve_answers_a_real_path_under_the_root_or_refuses(planted_once: Planted, data: st.DataObject) -> None:
    p = planted_once
    prefixes = ["", "./", "/", "//", f"{p.root}/", f"{p.outside}/", f"{p.base}/", "/etc/", "~/", "~root/", "~nobody/"]
    path = data.draw(generated_paths(prefixes))
    try:
        real = p.workspace.resolve(path)
    except WorkspaceError:
        return
    assert real == p.root or real.is_relative_to(p.root)
    assert ".." not in real.parts
    assert Path(os.path.realpath(real)) == real  # fully resolved: no link left to lead elsewhere


async def call_quietly(ctx: ToolContext, name: str, arguments: dict[str, Any]) -> str:
    try:
        return (await BUILTIN_TOOLS[name].run(ctx, arguments)).content
    except ToolError as exc:
        return str(exc)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_tool_reads_or_writes_outside_the_root(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    p = plant(tmp_path_factory.mktemp("tools"))
    ctx = p.ctx()
    before = snapshot_outside(p)
    # Absolute prefixes only into our own temporary folders: a bug must never aim a write at the system.
    paths = generated_paths(["", "./", f"{p.root}/", f"{p.outside}/", f"{p.base}/"])
    outputs: list[str] = []
    with asyncio.Runner() as runner:
        for _ in range(4):
            path = data.draw(paths)
            for name, arguments in path_calls(path):
                outputs.append(runner.run(call_quietly(ctx, name, arguments)))
    assert snapshot_outside(p) == before
    assert not any(SECRET in output for output in outputs)
