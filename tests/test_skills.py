"""Skills: found in an index, activated by reading SKILL.md or by a `/name` task, narrowing tools
only once active, and limited per subagent type by its allowlist."""

from __future__ import annotations

from pathlib import Path

import pytest

from delegate import Extensions, Runtime, UserError, WorkspaceError
from delegate.agents import Subagent
from delegate.models import ModelRequest, ModelResponse
from delegate.skills import SkillCatalogue
from delegate.testing import FunctionModel, call, is_lead, reply
from delegate.workspace import Workspace


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def skill(root: Path, folder: str, name: str, description: str, tools: str | None = None, body: str = "Do it.") -> None:
    allowed = f"allowed-tools: {tools}\n" if tools is not None else ""
    write(root / folder / name / "SKILL.md", f"---\nname: {name}\ndescription: {description}\n{allowed}---\n{body}\n")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    skill(tmp_path, ".delegate/skills", "report", "Writes reports.", "[read_file, write_file]", "Use headings.")
    skill(tmp_path, ".delegate/skills", "review", "Reviews code.")
    skill(tmp_path, ".claude/skills", "pdf", "Reads PDFs.", "Read, Grep")
    return tmp_path


def test_the_catalogue_reads_every_source_and_the_users_own_shadow_the_shared(root: Path) -> None:
    alice_root = root / ".delegate/users/alice"
    skill(alice_root, ".delegate/skills", "review", "Alice's own review.")
    shared = SkillCatalogue.build(root)
    alice = SkillCatalogue.build(root, own=alice_root)
    assert sorted(shared.skills) == ["pdf", "report", "review"]
    assert shared.skills["review"].description == "Reviews code."
    assert alice.skills["review"].description == "Alice's own review."
    assert alice.skills["review"].path == ".delegate/skills/review/SKILL.md"  # where her agents see it
    assert alice.skills["review"].folder == alice_root / ".delegate/skills/review"
    assert shared.skills["pdf"].allowed_tools == ("read_file", "grep")  # Claude's names mapped
    assert shared.skills["report"].body == "Use headings."


def test_claude_tool_names_in_a_delegate_skill_are_mapped_and_unknown_names_are_warned_about(tmp_path: Path) -> None:
    tools = "Read, Edit, Glob, LS, Bash(git diff:*), WebFetch, red_file, mcp__docs__search"
    skill(tmp_path, ".delegate/skills", "fix", "Fixes code.", tools)
    catalogue = SkillCatalogue.build(tmp_path)
    allowed = catalogue.skills["fix"].allowed_tools
    assert allowed == ("read_file", "edit_file", "find_files", "list_dir", "bash", "red_file", "mcp__docs__search")
    reasons = [w.reason for w in catalogue.warnings]
    assert [w.file for w in catalogue.warnings] == [".delegate/skills/fix/SKILL.md"] * 3
    assert "Bash(git diff:*) lets the skill keep bash, but its pattern is not enforced by a skill" in reasons[0]
    assert reasons[1] == "allowed-tools: delegate has no tool(s) WebFetch; left out"
    assert reasons[2].startswith("allowed-tools: 'red_file' is no built-in tool or Claude Code tool name; kept")


async def test_an_active_skill_that_allows_claudes_read_keeps_read_file(tmp_path: Path) -> None:
    skill(tmp_path, ".delegate/skills", "notes", "Takes notes.", "Read, Write")
    turns = iter([call("read_file", path=".delegate/skills/notes/SKILL.md"), reply("ok")])
    model = FunctionModel(lambda request: next(turns))
    await Runtime(model=model, workspace=tmp_path, store=False, extensions=Extensions(builtin_subagents=False)).run(
        "take notes"
    )
    assert sorted(t.name for t in model.requests[1].tools) == ["read_file", "write_file"]


@pytest.mark.parametrize(
    ("text", "message", "loaded"),
    [
        ("no front matter", "no front matter", False),
        ("---\nname: x\n---\n", "field 'description'", False),
        ("---\nname: 'bad name'\ndescription: d\n---\n", "field 'name'", False),
        ("---\nname: x\ndescription: d\nallowed-tools: {a: 1}\n---\n", "field 'allowed-tools'", True),
        ("---\nname: x\ndescription: Use when: a, b\n---\n", "not strict YAML", True),
    ],
)
def test_a_malformed_skill_is_a_warning_naming_the_file(tmp_path: Path, text: str, message: str, loaded: bool) -> None:
    write(tmp_path / ".delegate/skills/x/SKILL.md", text)
    skills = SkillCatalogue.build(tmp_path)
    assert [w.file for w in skills.warnings] == [".delegate/skills/x/SKILL.md"]
    assert message in skills.warnings[0].reason
    assert len(skills) == loaded


def test_a_skills_folder_outside_the_workspace_is_seen_read_only_inside_it(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    skill(tmp_path, "elsewhere", "notes", "Takes notes.")
    catalogue = SkillCatalogue.build(tmp_path / "ws", dirs=[tmp_path / "elsewhere"])
    view = Workspace.open(tmp_path / "ws").with_mounts(catalogue.mounts())
    assert view.resolve(".delegate/skills/notes/SKILL.md") == (tmp_path / "elsewhere/notes/SKILL.md").resolve()
    with pytest.raises(WorkspaceError, match="read-only"):
        view.resolve(".delegate/skills/notes/SKILL.md", write=True)


def test_a_missing_skills_folder_is_an_error_that_names_it(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        SkillCatalogue.build(tmp_path, dirs=[tmp_path / "nope"])


async def test_the_index_is_in_the_prompt_and_reading_a_skill_narrows_tools_from_then_on(root: Path) -> None:
    turns = iter([call("read_file", path=".delegate/skills/report/SKILL.md"), call("grep", pattern="x"), reply("ok")])
    model = FunctionModel(lambda request: next(turns))
    rt = Runtime(model=model, workspace=root, store=False, extensions=Extensions(builtin_subagents=False))
    await rt.run("write the report")
    first, second, third = model.requests
    assert "- report: Writes reports. (.delegate/skills/report/SKILL.md)" in first.system
    assert "Use headings." not in first.system  # only the index, until it is read
    assert "grep" in {t.name for t in first.tools}  # a skill never read narrows nothing
    assert sorted(t.name for t in second.tools) == ["read_file", "write_file"]
    refused = third.messages[-1].tool_results[0]
    assert refused.is_error and "not among the tools the active skill(s) report allow" in refused.content


async def test_a_slash_task_activates_its_skill_with_its_body(root: Path) -> None:
    model = FunctionModel(lambda request: reply("ok"))
    await Runtime(model=model, workspace=root, store=False, extensions=Extensions(builtin_subagents=False)).run(
        "/report the Q3 numbers"
    )
    [request] = model.requests
    assert [m.name for m in request.messages] == ["skill:report", None]
    assert request.messages[0].hidden and "Use headings." in request.messages[0].text
    assert sorted(t.name for t in request.tools) == ["read_file", "write_file"]


async def test_a_subagents_allowlist_scopes_what_it_finds_and_activates(root: Path) -> None:
    types = [
        Subagent(name="all", description="Every skill."),
        Subagent(name="none", description="No skill.", skills=[]),
        Subagent(name="pdf-only", description="Only pdf.", skills=["pdf"]),
    ]

    def answer(request: ModelRequest) -> ModelResponse:
        if not is_lead(request):
            return call("complete", summary="done")
        if len(request.messages) > 1:
            return reply("done")
        tasks = [call("task", subagent_type=t.name, description=t.name, prompt="/report now") for t in types]
        return ModelResponse(parts=[c.parts[0] for c in tasks])

    model = FunctionModel(answer)
    await Runtime(
        model=model, workspace=root, store=False, subagents=types, extensions=Extensions(builtin_subagents=False)
    ).run("go")
    subs = [r for r in model.requests if not is_lead(r)]
    assert len(subs) == 3
    by_index = {("report:" in r.system, "pdf:" in r.system, r.messages[0].name): r for r in subs}
    assert set(by_index) == {(True, True, "skill:report"), (False, False, None), (False, True, None)}
    everything = by_index[(True, True, "skill:report")]
    assert sorted(t.name for t in everything.tools) == ["complete", "read_file", "write_file"]
    assert "grep" in {t.name for t in by_index[(False, True, None)].tools}  # /report is plain text to it
