"""No `.git` anywhere in the workspace is agents' to make or change (issue 34, finding "a nested
`.git` runs code as the operator"): `write_file` alone planted `vendor/lib/.git/config` with
`core.fsmonitor`, and a `git status` inside `vendor/lib` ran it, unsandboxed, as root. Only the
top-level `.git` was read-only. Each test plants a repository the way an agent could (file tools,
a command in the real sandbox, a `.git` file pointing elsewhere, a bare repository's `HEAD`),
then runs the operator's real `git status` in the folder and checks that nothing planted ran."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import pytest

from delegate import ToolContext, ToolError, Workspace
from delegate.tools import BUILTIN_TOOLS, run_command

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
needs_bwrap = pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="needs bubblewrap (/usr/bin/bwrap)")

PLANTED = "[core]\n\trepositoryformatversion = 0\n\tfsmonitor = touch {pwned}; false\n"


def operator_repository(root: Path) -> None:
    """The operator's checkout: a repository at the root, and a nested one in vendor/lib."""
    for folder in (root, root / "vendor" / "lib"):
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "init", "-q", str(folder)], check=True)
        (folder / "README.md").write_text("hello\n")


def operators_git_status(folder: Path) -> None:
    """What the operator runs after the run (no environment of ours: a plain git, as root)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(folder), "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "status"], cwd=folder, env=env, capture_output=True, check=False, timeout=60)
    subprocess.run(["git", "log", "-1"], cwd=folder, env=env, capture_output=True, check=False, timeout=60)


def test_the_file_tools_make_and_change_no_git_anywhere(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    operator_repository(root)
    (root / "app").mkdir()
    pwned = tmp_path / "PWNED"
    config = PLANTED.format(pwned=pwned)
    ctx = ToolContext(run_id="r", agent_id="a", workspace=Workspace.open(root), emit=lambda e: None)

    def call(name: str, **arguments: str) -> str:
        return asyncio.run(BUILTIN_TOOLS[name].run(ctx, arguments)).content

    attempts = [
        ("write_file", {"path": "vendor/lib/.git/config", "content": config}),  # the existing nested one
        ("write_file", {"path": "app/.git/config", "content": config}),  # a new one
        ("write_file", {"path": "app/.git", "content": f"gitdir: {tmp_path}/elsewhere\n"}),  # a .git file
        ("write_file", {"path": "app/sub/.GIT/config", "content": config}),
        ("write_file", {"path": "app/HEAD", "content": "ref: refs/heads/main\n"}),  # a bare repository
        ("write_file", {"path": "app/HEAD", "content": "0123456789abcdef0123456789abcdef01234567\n"}),
        ("edit_file", {"path": "vendor/lib/.git/HEAD", "old_string": "ref:", "new_string": "ref: "}),
    ]
    for name, args in attempts:
        with pytest.raises(ToolError, match="git"):
            call(name, **args)
    (root / "app" / "objects").mkdir()
    (root / "app" / "refs").mkdir()
    (root / "app" / "config").write_text(config)  # what git would read, were app a repository
    for folder in (root / "vendor" / "lib", root / "app", root):
        operators_git_status(folder)
    assert not pwned.exists()
    assert not (root / "app" / ".git").exists() and not (root / "app" / "HEAD").exists()
    # a file named HEAD that names no ref is an ordinary file
    assert call("write_file", path="app/HEAD", content="the top\n").startswith("created app/HEAD")


def run(command: str, workspace: Workspace) -> str:
    result = asyncio.run(run_command(command, workspace, timeout=120))
    return "\n".join([result.output, *result.notes])


@needs_bwrap
@pytest.mark.parametrize(
    "plant",
    [
        # the finding: a nested repository of the operator's, its config changed
        "printf '{config}' > vendor/lib/.git/config",
        # a new repository where there was none
        "mkdir -p app/.git && git init -q app && printf '{config}' > app/.git/config",
        # a .git file pointing at a folder the agent controls (GIT_DIR by another name)
        "git init -q --bare app/evil.d && printf '{config}' > app/evil.d/config "
        "&& git config -f app/evil.d/config core.bare false && printf 'gitdir: evil.d\\n' > app/.git",
        # a bare repository: HEAD, objects, refs and a config in a folder
        "git init -q --bare app && printf '{config}' > app/config && git config -f app/config core.bare false "
        "&& git config -f app/config core.worktree .",
        # the existing nested repository moved aside and another put in its place
        "mv vendor vendor.old && mkdir -p vendor/lib && git init -q vendor/lib "
        "&& printf '{config}' > vendor/lib/.git/config",
    ],
)
def test_a_command_leaves_no_git_it_made_or_changed(tmp_path: Path, plant: str) -> None:
    root = tmp_path / "ws"
    operator_repository(root)
    (root / "app").mkdir()
    pwned = tmp_path / "PWNED"
    workspace = Workspace.open(root, allow_commands=True)
    said = run(plant.format(config=PLANTED.format(pwned=pwned).replace("\n", "\\n").replace("\t", "\\t")), workspace)
    for folder in (root / "vendor" / "lib", root / "app", root / "vendor.old" / "lib", root):
        if folder.is_dir():
            operators_git_status(folder)
    assert not pwned.exists(), said
    operators = root / ("vendor.old" if (root / "vendor.old").exists() else "vendor") / "lib" / ".git" / "config"
    assert "fsmonitor" not in operators.read_text()  # the operator's nested repository is unchanged


@needs_bwrap
def test_a_command_reads_the_nested_repositories_and_is_told_what_was_removed(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    operator_repository(root)
    workspace = Workspace.open(root, allow_commands=True)
    said = run("git -C vendor/lib status --short; git init -q scratch && echo made", workspace)
    assert "?? README.md" in said and "made" in said
    assert "removed what the command made a git repository (scratch/.git)" in said
    assert not (root / "scratch" / ".git").exists()
    assert (root / "vendor" / "lib" / ".git" / "HEAD").exists()  # the operator's own is kept
    scratch = "cd /tmp && git init -q s && cd s && git -c user.name=a -c user.email=a@b commit -q --allow-empty -m x"
    said = run(f"{scratch} && git log --oneline | wc -l", workspace)
    assert said.splitlines()[0] == "1"  # a scratch repository under /tmp works
