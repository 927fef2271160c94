"""Subagent definitions: Markdown files, Claude's format, precedence, and clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from delegate import Catalogue, Subagent
from delegate.agents import tools_for


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_markdown_definitions_load_with_every_field(tmp_path: Path) -> None:
    write(
        tmp_path / ".delegate/agents/reviewer.md",
        "---\nname: reviewer\ndescription: Reviews diffs.\ntools: [read_file, grep]\n"
        "disallowed_tools: [grep]\nmodel: openai:cheap\nmax_steps: 7\ntimeout: 30\n"
        "token_budget: 5000\nskills: [style]\nfirst_tool_choice: [read_file, grep]\n---\nYou review.\n",
    )
    definition = Catalogue.build(workspace=tmp_path).definitions["reviewer"]
    assert (definition.tools, definition.disallowed_tools, definition.model) == (
        ["read_file", "grep"],
        ["grep"],
        "openai:cheap",
    )
    assert (definition.max_steps, definition.timeout, definition.token_budget, definition.skills) == (
        7,
        30.0,
        5000,
        ["style"],
    )
    assert definition.instructions == "You review."
    assert definition.first_tool_choice == ["read_file", "grep"]
    assert tools_for(definition, ["read_file", "write_file"], ["read_file", "grep", "write_file"]) == ["read_file"]


def test_claude_agent_files_load_with_tool_names_mapped(tmp_path: Path) -> None:
    write(
        tmp_path / ".claude/agents/finder.md",
        "---\nname: finder\ndescription: Finds things.\n"
        "tools: Read, Grep, Glob, LS, WebSearch\ncolor: blue\n---\nFind.\n",
    )
    definition = Catalogue.build(workspace=tmp_path).definitions["finder"]
    assert definition.tools == ["read_file", "grep", "find_files", "list_dir"]


def test_later_sources_shadow_earlier_ones(tmp_path: Path) -> None:
    write(tmp_path / ".claude/agents/a.md", "---\nname: explore\ndescription: from claude\n---\n")
    write(tmp_path / ".delegate/agents/a.md", "---\nname: explore\ndescription: from delegate\n---\n")
    extra = tmp_path / "more"
    write(extra / "a.md", "---\nname: explore\ndescription: from --agents\n---\n")
    assert Catalogue.build(workspace=tmp_path).definitions["explore"].description == "from delegate"
    catalogue = Catalogue.build(workspace=tmp_path, agent_dirs=[extra])
    assert catalogue.definitions["explore"].description == "from --agents"
    code = Catalogue.build(
        workspace=tmp_path, agent_dirs=[extra], subagents=[Subagent(name="explore", description="code")]
    )
    assert code.definitions["explore"].description == "code"


@pytest.mark.parametrize(
    ("text", "message", "loaded"),
    [
        ("no front matter", "no front matter", False),
        ("---\nname: x\ndescription: [unclosed\n---\n", "not strict YAML", True),
        ("---\ndescription: d\n---\n", "no 'name' field; named 'bad'", True),
        ("---\nname: x\n---\n", "field 'description'", False),
        ("---\nname: x\ndescription: d\nmax_steps: 0\n---\n", "field 'max_steps'", True),
        ("---\nname: x\ndescription: d\ntimeout: soon\n---\n", "field 'timeout'", True),
        ("---\nname: x\ndescription: d\nbogus: 1\n---\n", "unknown field(s) bogus", True),
        ("---\nname: 'has space'\ndescription: d\n---\n", "is not valid", False),
    ],
)
def test_a_malformed_definition_is_a_warning_naming_the_file_and_the_reason(
    tmp_path: Path, text: str, message: str, loaded: bool
) -> None:
    write(tmp_path / ".delegate/agents/bad.md", text)
    catalogue = Catalogue.build(workspace=tmp_path)
    assert [w.file for w in catalogue.warnings] == [".delegate/agents/bad.md"]
    assert message in catalogue.warnings[0].reason
    assert str(tmp_path) not in str(catalogue.warnings[0])
    assert len(catalogue) == 3 + loaded  # the built-ins, and the file when it could be read


def test_inherited_tools_drop_task_and_an_explicit_list_never_gets_it() -> None:
    parent = ["read_file", "task", "batch_task", "write_file"]
    available = [*parent, "ask_user", "complete"]
    assert tools_for(Subagent(name="a", description="d"), parent, available) == ["read_file", "write_file"]
    explicit = Subagent(name="b", description="d", tools=["task", "ask_user", "read_file"])
    assert tools_for(explicit, parent, available) == ["ask_user", "read_file"]


def test_agents_list_shows_the_catalogue(tmp_path: Path) -> None:
    write(tmp_path / ".delegate/agents/r.md", "---\nname: reviewer\ndescription: Reviews.\n---\n")
    done = subprocess.run(
        [sys.executable, "-m", "delegate", "agents", "list", "--json", "--workspace", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    names = [row["name"] for row in json.loads(done.stdout)]
    assert names == ["general-purpose", "explore", "bash", "reviewer"]
    write(tmp_path / ".delegate/agents/z.md", "---\nname: z\n---\n")
    done = subprocess.run(
        [sys.executable, "-m", "delegate", "agents", "list", "--workspace", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and "reviewer" in done.stdout
    assert "warning: .delegate/agents/z.md: field 'description'" in done.stderr


def test_a_tool_name_no_tool_has_is_a_warning_naming_the_type_not_a_silent_drop(tmp_path: Path) -> None:
    """`tools: [red_file]` used to run the type without `read_file` and say nothing. Tools given in
    code (to any type), MCP tools, `bash` without commands and the per-run tools are not unknown."""
    from delegate import Runtime, tool
    from delegate.testing import FunctionModel, reply

    @tool
    def lookup(word: str) -> str:
        """Look a word up."""
        return word

    (tmp_path / ".delegate" / "agents").mkdir(parents=True)
    (tmp_path / ".delegate" / "agents" / "typo.md").write_text(
        "---\nname: typo\ndescription: d\ntools: [red_file, read_file, lookup, bash, list_uploaded_files]\n---\nx\n"
    )
    rt = Runtime(
        model=FunctionModel(lambda r: reply("done")),
        workspace=tmp_path,
        store=False,
        subagents=[
            Subagent(name="given", description="d", tools=[lookup]),
            Subagent(name="coded", description="d", tools=["grpe", "mcp__docs__search", "tool_search"]),
        ],
    )
    said = [(w.file, w.reason.split(",")[0]) for w in rt.warnings()]
    assert said == [
        (".delegate/agents/typo.md", "type 'typo' names tool(s) red_file"),
        ("code", "type 'coded' names tool(s) grpe"),
    ]
    assert "runs without them" in str(rt.warnings()[0]) and rt.run_sync("hi").warnings == [
        str(w) for w in rt.warnings()
    ]
