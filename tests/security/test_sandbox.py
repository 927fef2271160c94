"""Commands run in a real bubblewrap sandbox (issue 9, finding "keys stolen"): through the real
server, an agent's `bash` sees no credential of the server, no process of it, no store, no
network, and can write only its user's workspace."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from delegate import Store
from delegate._errors import ToolError
from delegate.skills import SkillCatalogue
from delegate.subagents._acceptance import check_criteria, snapshot_before
from delegate.tools import run_command
from delegate.tools._shell import CommandResult
from delegate.workspace import CommandPolicy, Mount, Workspace
from delegate.workspace._sandbox import _unreadable, sandbox_argv  # pyright: ignore[reportPrivateUsage]
from tests.security.support import two_users

pytestmark = pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="needs bubblewrap (/usr/bin/bwrap)")

SECRETS = {
    "OPENAI_API_KEY": "sk-openai-secret",
    "ANTHROPIC_API_KEY": "sk-ant-secret",
    "PGPASSWORD": "pg-secret",
    "GITHUB_TOKEN": "ghp-secret",
    "DELEGATE_DB": "postgresql://u:db-secret@h/db",
}


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HARMLESS", "named-by-the-operator")
    root = tmp_path / "server"
    (root / ".delegate" / "agents").mkdir(parents=True)
    return root.resolve()


def bash(command: str, timeout: float = 60) -> tuple[str, dict[str, object]]:
    return ("bash", {"command": command, "timeout": timeout})


def test_commands_see_no_credential_and_no_process_of_the_server(workspace: Path, store: Store) -> None:
    policy = CommandPolicy(env=("HARMLESS", "OPENAI_API_KEY"))  # naming a provider's key does not pass it
    with two_users(workspace, store, commands=policy) as users:
        outcomes = users.act(
            "alice",
            [
                bash("tr '\\0' '\\n' < /proc/$PPID/environ; env; tr '\\0' '\\n' < /proc/1/environ"),
                bash(f"test -e /proc/{os.getpid()} && echo server-visible || echo server-hidden; hostname"),
                bash("ls /proc | grep -c '^[0-9]'"),
            ],
        )
    environment, server, processes = (o.content for o in outcomes)
    for value in SECRETS.values():
        assert value not in environment
    assert "HARMLESS=named-by-the-operator" in environment
    assert f"HOME={users.folder('alice')}" in environment
    assert server.splitlines()[:2] == ["server-hidden", "sandbox"]
    assert int(processes.splitlines()[0]) < 10  # the sandbox's own few, not the host's


def test_commands_cannot_reach_the_store_or_write_outside_the_users_workspace(workspace: Path) -> None:
    with (
        Store.for_workspace(workspace) as store,
        two_users(workspace, store, commands=CommandPolicy()) as users,
    ):
        db = workspace / ".delegate" / "delegate.db"
        outcomes = users.act(
            "alice",
            [
                bash(f"cat {db} ../../delegate.db; ls -a ../.. {workspace}/.delegate 2>&1; ls -a .delegate"),
                bash("touch /usr/x /etc/x 2>&1; echo x > .delegate/agents/x.md 2>&1; echo ok > mine.txt"),
                bash("mkdir -p .claude/agents 2>&1; echo x > .claude/agents/x.md 2>&1; ls /home /root /work 2>&1"),
                bash(f"ln -s {db} db-link; ln -s ../../delegate.db up-link; echo linked"),
            ],
        )
        # the calls of one turn run at once: follow the links in a run of their own
        through_links = users.act(
            "alice",
            [
                ("read_file", {"path": "db-link"}),
                ("read_file", {"path": "up-link"}),
                ("grep", {"pattern": "SQLite", "path": "db-link"}),
            ],
        )
    store_view, writes, definitions, linked = (o.content for o in outcomes)
    assert linked.startswith("linked")
    assert all(o.error and "outside the workspace" in o.content for o in through_links), through_links
    assert "SQLite format" not in store_view and "No such file or directory" in store_view
    assert "Read-only file system" in writes
    assert (users.folder("alice") / "mine.txt").read_text() == "ok\n"
    assert not (users.folder("alice") / ".delegate" / "agents").exists()
    assert "Read-only file system" in definitions and not (users.folder("alice") / ".claude/agents/x.md").exists()
    assert db.read_bytes().startswith(b"SQLite format 3\x00")


def _owner_only(path: str) -> bool:
    return os.path.exists(path) and not os.stat(path).st_mode & stat.S_IROTH


@pytest.mark.skipif(not _owner_only("/etc/shadow"), reason="needs an /etc/shadow that others may not read")
def test_commands_read_the_system_only_as_any_user_of_the_machine_may(workspace: Path, store: Store) -> None:
    """A server run as root gives its commands uid 0: without the masks they read the shadow
    passwords and every private key of the host, and could hand them to their user in a file."""
    with two_users(workspace, store, commands=CommandPolicy()) as users:
        [seen] = users.act(
            "alice", [bash("head -c 200 /etc/shadow 2>&1; echo; ls -A /etc/ssl/private 2>&1; head -1 /etc/passwd")]
        )
    shadow = Path("/etc/shadow").read_text()
    assert shadow.splitlines()[0] not in seen.content and "Permission denied" in seen.content
    private = Path("/etc/ssl/private")
    if private.is_dir() and _owner_only(str(private)):
        assert all(key.name not in seen.content for key in private.iterdir())
    assert Path("/etc/passwd").read_text().splitlines()[0] in seen.content  # what anyone may read stays


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to make an owner-only file in /etc")
def test_a_key_made_owner_only_in_etc_is_masked_from_the_very_next_command(tmp_path: Path) -> None:
    workspace = Workspace.open(tmp_path, allow_commands=True)

    def run(command: str) -> str:
        done = subprocess.run(sandbox_argv(command, workspace), capture_output=True, text=True, timeout=60)
        return done.stdout + done.stderr

    assert run("echo warm") == "warm\n"  # the system folders were looked at, as a first command does
    key = Path(f"/etc/delegate-test-key-{os.getpid()}")
    try:
        key.touch(mode=0o600)
        key.write_text("operator-secret")
        seen = run(f"cat {key} 2>&1; head -1 /etc/passwd")
    finally:
        key.unlink()
    assert "operator-secret" not in seen and "Permission denied" in seen
    assert Path("/etc/passwd").read_text().splitlines()[0] in seen  # what anyone may read stays


def test_what_the_sandbox_masks_is_found_by_permissions_not_by_names(tmp_path: Path) -> None:
    system = tmp_path / "etc"
    (system / "open" / "sub").mkdir(parents=True)
    (system / "open" / "sub" / "key.pem").write_text("k")
    (system / "open" / "sub" / "cert.pem").write_text("c")
    (system / "closed").mkdir()
    (system / "closed" / "inside").write_text("x")
    (system / "group-only").write_text("g")
    (system / "link").symlink_to(system / "group-only")
    os.chmod(system / "open" / "sub" / "key.pem", 0o600)
    os.chmod(system / "closed", 0o750)
    os.chmod(system / "group-only", 0o640)
    found = sorted(_unreadable((str(system),)))
    assert found == [
        (str(system / "closed"), True),
        (str(system / "group-only"), False),
        (str(system / "open" / "sub" / "key.pem"), False),
    ]


def test_commands_have_no_network_unless_the_operator_allows_it(workspace: Path, store: Store) -> None:
    with two_users(workspace, store, commands=CommandPolicy()) as users:
        port = users.server.port
        probe = f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5)\" 2>&1"
        [closed] = users.act("alice", [bash(f"{probe} && echo reached || echo unreachable")])
    assert closed.content.splitlines()[-2] == "unreachable"
    network = CommandPolicy(network=True)
    with two_users(workspace, store, ("carol", "dave"), commands=network) as users:
        probe = f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {users.server.port}))\""
        [opened] = users.act("carol", [bash(f"{probe} && echo reached")])
    assert opened.content.splitlines()[0] == "reached"


def test_no_process_of_a_command_outlives_it_and_limits_hold(workspace: Path, store: Store) -> None:
    marker = f"delegate-marker-{os.getpid()}"
    with two_users(workspace, store, commands=CommandPolicy()) as users:
        outcomes = users.act(
            "alice",
            [
                bash(f"sh -c 'sleep 300' {marker} > /dev/null 2>&1 & echo started"),
                bash("sleep 30", timeout=1),
                bash("yes | head -c 200000"),
            ],
        )
    assert outcomes[0].content.startswith("started")
    assert outcomes[1].error and "timed out after 1s" in outcomes[1].content
    assert "bytes of output cut" in outcomes[2].content and len(outcomes[2].content) < 40_000
    deadline = time.monotonic() + 60
    while any(marker in _cmdline(pid) for pid in os.listdir("/proc") if pid.isdigit()):
        assert time.monotonic() < deadline, "a background process outlived its sandbox"
        time.sleep(0.05)  # polling a condition, with a deadline


def test_without_bubblewrap_commands_are_refused_saying_what_to_install(workspace: Path, store: Store) -> None:
    missing = CommandPolicy(bwrap=str(workspace / "no-bwrap-here"))
    with two_users(workspace, store, commands=missing) as users:
        [refused] = users.act("alice", [bash("echo ran > ran.txt")])
    assert refused.error
    assert "apt-get install bubblewrap" in refused.content and "--unsandboxed-commands" in refused.content
    assert not (users.folder("alice") / "ran.txt").exists()


def test_the_operator_can_run_commands_unsandboxed_only_by_saying_so(workspace: Path, store: Store) -> None:
    unconfined = CommandPolicy(sandbox=False, bwrap=str(workspace / "no-bwrap-here"))
    with two_users(workspace, store, commands=unconfined) as users:
        [ran] = users.act("alice", [bash("env; pwd")])
    assert not ran.error
    assert str(users.folder("alice")) in ran.content
    assert all(value not in ran.content for value in SECRETS.values())  # the allowlist holds unsandboxed too


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode("utf-8", "replace")
    except OSError:
        return ""


def test_running_commands_unsandboxed_is_said_out_loud_on_the_command_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in SECRETS}
    env["OPENAI_BASE_URL"] = "http://127.0.0.1:9/v1"  # nothing listens: no model is ever reached
    command = [sys.executable, "-m", "delegate", "run", " ", "--model", "openai:m", "-w", str(tmp_path)]
    quiet = subprocess.run([*command, "--allow-commands"], capture_output=True, text=True, env=env, timeout=120)
    loud = subprocess.run(
        [*command, "--allow-commands", "--unsandboxed-commands"], capture_output=True, text=True, env=env, timeout=120
    )
    assert "WITHOUT a sandbox" not in quiet.stderr
    assert "warning: agents' commands run WITHOUT a sandbox (--unsandboxed-commands)" in loud.stderr
    assert loud.returncode == 2 and "the prompt is empty" in loud.stderr


# --- the sandbox's view is closed (issue 20) ----------------------------------------------------


def _run(command: str, workspace: Workspace) -> CommandResult:
    return asyncio.run(run_command(command, workspace, timeout=60))


def test_a_command_cannot_move_definitions_aside_nor_write_them_nor_the_repository(tmp_path: Path) -> None:
    """`mv .claude .claude_old && mkdir -p .claude/agents` once gave a command fresh, writable
    definition folders: now each closed folder is a read-only mount, which cannot be renamed."""
    root = tmp_path.resolve()
    (root / ".claude" / "agents").mkdir(parents=True)
    (root / ".claude" / "agents" / "explore.md").write_text("the operator's\n")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / ".git" / "config").write_text("[core]\n")
    workspace = Workspace.open(root, allow_commands=True)
    result = _run(
        'mv .claude .claude_old; mv .claude/agents .claude/old; mv .git .git_old; mv "$PWD" "$PWD-moved"; '
        "rm -rf .claude .git; mkdir -p .claude/skills/mine; echo x > .claude/agents/explore.md; "
        "printf '[core]\\n\\tfsmonitor = touch /tmp/owned\\n' >> .git/config; mkdir .git/hooks; "
        "cat .git/HEAD; echo mine > mine.txt; echo done",
        workspace,
    )
    output = result.output
    for moved in (".claude' to '.claude_old", ".git' to '.git_old", f"{root}' to '{root}-moved"):
        assert f"cannot move '{moved}': Device or resource busy" in output, output
    assert "cannot move '.claude/agents' to '.claude/old': Read-only file system" in output
    assert "cannot create .git/config: Read-only file system" in output
    assert "ref: refs/heads/main" in output and output.rstrip().endswith("done")  # .git is readable
    assert sorted(p.name for p in root.iterdir()) == [".claude", ".delegate", ".git", "mine.txt"]
    assert (root / ".claude" / "agents" / "explore.md").read_text() == "the operator's\n"
    assert sorted(p.name for p in (root / ".claude").iterdir()) == ["agents"]
    assert (root / ".git" / "config").read_text() == "[core]\n"
    assert sorted(p.name for p in (root / ".git").iterdir()) == ["HEAD", "config"]


def test_a_missing_definitions_folder_or_repository_cannot_be_created_by_a_command(tmp_path: Path) -> None:
    root = tmp_path.resolve()
    workspace = Workspace.open(root, allow_commands=True)
    result = _run(
        "mkdir -p .claude/agents; git init -q . 2>&1; mkdir .git/hooks; ls -A .claude .git; echo done", workspace
    )
    assert "Read-only file system" in result.output and result.output.rstrip().endswith("done")
    assert list((root / ".claude").iterdir()) == [] and list((root / ".git").iterdir()) == []


def test_a_closed_name_that_is_a_symbolic_link_refuses_commands_saying_what_to_do(tmp_path: Path) -> None:
    root = tmp_path.resolve()
    (root / "elsewhere").mkdir()
    (root / ".claude").symlink_to(root / "elsewhere")
    workspace = Workspace.open(root, allow_commands=True)
    with pytest.raises(ToolError, match=r"\.claude in the workspace is a symbolic link"):
        _run("touch .claude/agents", workspace)
    assert list((root / "elsewhere").iterdir()) == []


def _with_skill(root: Path, elsewhere: Path) -> Workspace:
    for folder, name in ((root / ".delegate" / "skills", "review"), (elsewhere, "notes")):
        (folder / name).mkdir(parents=True)
        (folder / name / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {name}s.\n---\nDo it.\n")
    catalogue = SkillCatalogue.build(root, dirs=[elsewhere])
    assert sorted(catalogue.skills) == ["notes", "review"]
    return Workspace.open(root, allow_commands=True).with_mounts(catalogue.mounts())


def test_commands_run_with_skills_installed_and_read_them_but_never_write_them(tmp_path: Path) -> None:
    """One SKILL.md in the catalogue made every command answer `bwrap: Can't mkdir parents for
    .../.delegate/skills/NAME: Read-only file system`: the mount points are now made first."""
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    workspace = _with_skill(root, tmp_path / "skills")
    result = _run(
        "ls .delegate/skills; head -2 .delegate/skills/notes/SKILL.md; "
        "echo x > .delegate/skills/notes/SKILL.md; mkdir .delegate/skills/new; echo ran",
        workspace,
    )
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[:4] == ["notes", "review", "---", "name: notes"]
    assert result.output.count("Read-only file system") == 2 and lines[-1] == "ran"
    assert (tmp_path / "skills" / "notes" / "SKILL.md").read_text().startswith("---\nname: notes")
    assert not (root / ".delegate" / "skills" / "new").exists()


def test_a_tests_passed_check_holds_with_skills_installed(tmp_path: Path) -> None:
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    workspace = _with_skill(root, tmp_path / "skills")
    criterion = "tests_passed: test -f .delegate/skills/notes/SKILL.md && echo '1 passed in 0.01s'"
    [verdict] = asyncio.run(check_criteria([criterion], workspace, snapshot_before([criterion], workspace)))
    assert (verdict.result, verdict.checked) == ("holds", True), verdict


def test_a_command_whose_sandbox_cannot_start_is_unverified_with_the_reason(tmp_path: Path) -> None:
    """A `tests_passed:` check whose command never ran used to read "does not hold"."""
    root = tmp_path.resolve()
    broken = Workspace.open(root, allow_commands=True).with_mounts([Mount(".delegate/skills/gone", root / "gone")])
    criterion = "tests_passed: true"
    [verdict] = asyncio.run(check_criteria([criterion], broken, snapshot_before([criterion], broken)))
    assert (verdict.result, verdict.checked) == ("UNVERIFIED", False), verdict
    assert verdict.evidence.startswith("the sandbox could not start the command: bwrap: Can't find source path")
    with pytest.raises(ToolError, match="the sandbox could not start the command"):
        _run("true", broken)


def test_a_shared_skill_leaves_every_users_bash_working(workspace: Path, store: Store) -> None:
    skill = workspace / ".delegate" / "skills" / "review"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: review\ndescription: Reviews code.\n---\nReview it.\n")
    with two_users(workspace, store, commands=CommandPolicy()) as users:
        [listed] = users.act("alice", [bash("ls .delegate/skills && echo x > .delegate/skills/review/SKILL.md")])
        [other] = users.act("bob", [bash("echo bob-ran")])
    assert listed.content.splitlines()[0] == "review" and "Read-only file system" in listed.content
    assert not other.error and other.content.startswith("bob-ran")
    assert (skill / "SKILL.md").read_text().endswith("Review it.\n")


def test_a_command_has_no_capability_even_when_the_server_runs_as_root(tmp_path: Path) -> None:
    """bwrap keeps every capability for a caller of uid 0: a root server's command could
    `umount .delegate` and read the store under it, or remount a read-only folder writable."""
    root = tmp_path.resolve()
    (root / ".delegate").mkdir()
    (root / ".delegate" / "delegate.db").write_text("the store")
    (root / ".claude").mkdir()
    workspace = Workspace.open(root, allow_commands=True)
    result = _run(
        "grep CapEff /proc/self/status; umount .delegate 2>&1; mount -o remount,rw,bind .claude 2>&1; "
        "unshare -Urm true 2>&1 || echo no-namespace; cat .delegate/delegate.db 2>&1; touch .claude/x 2>&1",
        workspace,
    )
    assert result.output.splitlines()[0].split() == ["CapEff:", "0000000000000000"]
    assert "no-namespace" in result.output and "the store" not in result.output
    assert "Read-only file system" in result.output and not (root / ".claude" / "x").exists()
