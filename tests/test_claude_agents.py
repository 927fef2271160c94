"""Claude Code agent and skill folders as people write them: forgiving loading, Claude's fields,
model aliases, project context, and a large catalogue that costs the lead little."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from delegate import Catalogue, CommandPolicy, Event, Extensions, ModelAliases, Runtime, UserError
from delegate.models import OpenAIModel, RetryPolicy
from delegate.testing import is_lead
from tests.cli_support import run_cli, scrubbed_env
from tests.loopback_openai import OpenAIServer, Reply

FIXTURE = Path(__file__).parent / "fixtures" / "claude_workspace"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    shutil.copytree(FIXTURE, tmp_path / "ws")
    # a binary file where a definition should be (written here: linters read the fixture folder)
    (tmp_path / "ws/.claude/agents/blob.md").write_bytes(b"---\nname: blob\n\x00\x01\x02\xff\xfe binary\n")
    return tmp_path / "ws"


def reasons(catalogue: Catalogue, file: str) -> list[str]:
    return [w.reason for w in catalogue.warnings if w.file == f".claude/agents/{file}"]


def test_a_public_style_folder_loads_every_readable_file_and_names_the_rest(workspace: Path) -> None:
    catalogue = Catalogue.build(workspace=workspace)
    assert sorted(set(catalogue.names()) - {"general-purpose", "explore", "bash"}) == [
        "architect",
        "bad-model",
        "code-reviewer",
        "inline-mcp",
        "powershell-5.1-expert",
        "seo-meta-optimizer",
    ]
    seo = catalogue.definitions["seo-meta-optimizer"]  # an unquoted "Triggers on: 'x', 'y'"
    assert seo.description.endswith("Triggers on: 'meta tags', 'SEO titles', 'search snippets'")
    [problem] = reasons(catalogue, "seo-meta-optimizer.md")
    assert problem.startswith("front matter is not strict YAML (") and problem.endswith("); read line by line")
    assert [w.line for w in catalogue.warnings if w.file.endswith("seo-meta-optimizer.md")] == [3]
    powershell = catalogue.definitions["powershell-5.1-expert"]  # a dotted name, a block description
    assert powershell.description == (
        "Windows PowerShell 5.1 specialist for legacy automation: modules, remoting and scheduled tasks."
    )
    assert "no front matter" in reasons(catalogue, "no-front-matter.md")[0]
    assert reasons(catalogue, "blob.md") == ["a binary file, not a subagent definition; skipped"]
    assert all(not w.file.startswith("/") and str(workspace) not in str(w) for w in catalogue.warnings)


def test_every_claude_field_is_mapped_or_named_in_a_warning(workspace: Path) -> None:
    catalogue = Catalogue.build(workspace=workspace)
    reviewer = catalogue.definitions["code-reviewer"]
    assert reviewer.description.endswith("maintainability. Continues on an indented line, as people write it.")
    assert reviewer.tools == ["read_file", "grep", "find_files", "bash", "todo_write"]  # TodoWrite is served
    assert reviewer.unavailable_tools == ["WebFetch", "WebSearch"]
    assert reviewer.disallowed_tools == ["write_file", "edit_file"]
    assert (reviewer.max_steps, reviewer.skills, reviewer.mcp_servers) == (12, ["pdf"], ["docs"])
    assert (reviewer.model, reviewer.written_model) == (
        "anthropic:claude-sonnet-4-5-20250929",
        "claude-sonnet-4-5-20250929",
    )
    assert reviewer.permission_mode == "acceptEdits"
    assert reviewer.command_rules.to_dict() == {"allow": ["git diff:*"], "deny": []}
    assert set(reasons(catalogue, "code-reviewer.md")) >= {
        "tool(s) delegate cannot serve: WebFetch, WebSearch; it runs without them",
    }
    assert not any("Bash" in reason for reason in reasons(catalogue, "code-reviewer.md"))
    architect = catalogue.definitions["architect"]  # permissionMode: plan means read-only tools
    assert architect.tools == ["read_file", "list_dir", "find_files", "grep"]
    assert architect.extra == {"category": "engineering", "version": 1.2}
    assert reasons(catalogue, "architect.md") == ["unknown field(s) category, version: kept, not used"]
    assert "defined inline are not started" in reasons(catalogue, "inline-mcp.md")[0]
    bad = catalogue.definitions["bad-model"]  # checked when the catalogue is built, not at task time
    assert (bad.model, bad.max_steps) == ("inherit", 30)
    assert [r.split(":")[0] for r in reasons(catalogue, "bad-model.md")] == [
        "field 'maxTurns'",
        "model 'gpt5-turbo-ultra' is not a model",
    ]


def test_aliases_resolve_through_an_overridable_table(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert ModelAliases().resolve("sonnet") == ("anthropic:claude-sonnet-4-5", True)
    assert ModelAliases().resolve("claude-opus-4-1") == ("anthropic:claude-opus-4-1", True)
    assert ModelAliases().resolve("openai:gpt-4.1") == ("openai:gpt-4.1", False)
    (workspace / ".delegate").mkdir()
    (workspace / ".delegate/models.toml").write_text('[aliases]\nsonnet = "openai:from-file"\nopus = "openai:big"\n')
    monkeypatch.setenv("DELEGATE_MODEL_ALIASES", "opus=openai:from-env")
    table = ModelAliases.load(workspace, ["haiku=openai:from-flag"])
    assert [table.resolve(a)[0] for a in ("sonnet", "opus", "haiku")] == [
        "openai:from-file",
        "openai:from-env",
        "openai:from-flag",
    ]
    with pytest.raises(UserError, match="not alias=provider:model"):
        ModelAliases.load(None, ["sonnet"])
    with pytest.raises(UserError, match="'gpt-4' is not provider:name"):
        ModelAliases.load(None, ["sonnet=gpt-4"])


def test_skills_as_anthropic_writes_them_load_and_a_broken_one_is_named(workspace: Path) -> None:
    runtime = Runtime(workspace=workspace, store=False)
    shown = [str(w) for w in runtime.warnings() if "skills" in w.file]
    assert shown[0].startswith(".claude/skills/brand.guidelines/SKILL.md:3: front matter is not strict YAML (")
    assert shown[1:] == [
        ".claude/skills/brand.guidelines/SKILL.md: unknown field(s) argument-hint: kept, not used",
        ".claude/skills/broken/SKILL.md:1: no front matter: a skill starts with 'name' and 'description' between "
        "'---' lines; skipped",
    ]
    pdf = runtime.warnings  # the public skill with its `license` field loads quietly
    assert not any("pdf" in w.file for w in pdf())


def sonnet_responder(body: dict[str, Any]) -> Reply:
    """Lead: delegate to `seo-meta-optimizer` (model: sonnet), then answer. Subagent: complete."""
    tool_results = [m for m in body["messages"] if m["role"] == "tool"]
    if is_lead(body):
        if not tool_results:
            task = {"subagent_type": "seo-meta-optimizer", "description": "meta tags", "prompt": "Write meta tags."}
            return Reply(tool_calls=[("task", task)])
        return Reply(content=f"done: {tool_results[0]['content'][:200]}")
    return Reply(tool_calls=[("complete", {"summary": "meta tags written", "paths": []})])


async def test_a_sonnet_type_without_an_anthropic_key_runs_on_the_leads_model(workspace: Path) -> None:
    events: list[Event] = []
    (workspace / "AGENTS.md").write_text("Run `make check` before you finish. PROJECT-MARK")
    with OpenAIServer(sonnet_responder) as server:
        model = OpenAIModel("lead-model", base_url=server.base_url, api_key="k", retry=RetryPolicy(attempts=1))
        runtime = Runtime(model=model, workspace=workspace, store=False, sinks=[events.append])
        result = await runtime.run("Optimise the meta tags.")
        await model.aclose()
    assert result.status == "completed"
    [record] = result.subagents
    assert (record.type, record.status, record.summary) == ("seo-meta-optimizer", "completed", "meta tags written")
    assert record.model == "openai:lead-model"
    fallback = [e.data for e in events if e.type == "warning" and e.data.get("subagent_type")]
    assert fallback == [
        {
            "file": ".claude/agents/seo-meta-optimizer.md",
            "line": None,
            "reason": "model 'sonnet' (anthropic:claude-sonnet-4-5) has no ANTHROPIC_API_KEY set: type "
            "'seo-meta-optimizer' runs on the lead's model openai:lead-model",
            "subagent_type": "seo-meta-optimizer",
        }
    ]
    files = {e.data["file"] for e in events if e.type == "warning"}
    assert ".claude/agents/blob.md" in files and ".claude/skills/broken/SKILL.md" in files
    # project context reaches the lead and the subagent, marked as such
    systems = [body["messages"][0]["content"] for body in server.requests]
    assert all('<project-context file="AGENTS.md">' in s and "PROJECT-MARK" in s for s in systems)


def many_agents(folder: Path, count: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (folder / f"agent-{i:03}.md").write_text(
            f"---\nname: specialist-{i:03}\ndescription: Expert number {i} in domain {i % 17} engineering. Use "
            f"PROACTIVELY for topic{i} work, reviews, migrations and incident follow-ups; knows the tooling, the "
            f"pitfalls and the conventions of topic{i} codebases in depth. Triggers on: 'topic{i}', 'area {i}'\n"
            "tools: Read, Grep, Glob\nmodel: inherit\n---\nYou are a specialist.\n"
        )


def skills(folder: Path, count: int) -> None:
    for i in range(count):
        (folder / f"skill-{i}").mkdir(parents=True)
        (folder / f"skill-{i}" / "SKILL.md").write_text(
            f"---\nname: skill-{i}\ndescription: Toolkit number {i} for documents of kind {i}: extracting text and "
            "tables, creating new files, merging and splitting them. Use when the task needs kind "
            f"{i} documents processed, generated or analysed at scale.\nlicense: see LICENSE.txt\n---\nSteps.\n"
        )


def lead_requests(workspace: Path, search: str | None = None) -> list[dict[str, Any]]:
    """The lead's requests when it answers at once, or first calls `tool_search` with `search`."""

    def answer(body: dict[str, Any]) -> Reply:
        if search is not None and len(body["messages"]) == 2:
            return Reply(tool_calls=[("tool_search", {"query": search})])
        return Reply(content="nothing to do")

    with OpenAIServer(answer) as server:
        model = OpenAIModel("m", base_url=server.base_url, api_key="k", retry=RetryPolicy(attempts=1))
        Runtime(model=model, workspace=workspace, store=False).run_sync("Say hello.")
    return server.requests


def tool(body: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t["function"] for t in body["tools"] if t["function"]["name"] == name)


@pytest.mark.parametrize("count", [160, 500])
def test_a_large_catalogue_keeps_the_first_request_small_and_every_type_reachable(tmp_path: Path, count: int) -> None:
    many_agents(tmp_path / ".claude/agents", count)
    skills(tmp_path / ".claude/skills", 12)
    first, second = lead_requests(tmp_path, search="agent:specialist-042")
    assert len(json.dumps(first).encode()) <= 32_000
    task = tool(first, "task")
    assert all(f"specialist-{i:03}" in task["description"] for i in range(count))
    assert "enum" not in task["parameters"]["properties"]["subagent_type"]
    assert 'call tool_search with "agent:<name>"' in task["description"]
    found = next(m["content"] for m in second["messages"] if m["role"] == "tool")
    assert "- specialist-042: Expert number 42" in found and "Triggers on: 'topic42', 'area 42'" in found


def test_a_small_catalogue_keeps_full_descriptions_and_the_enum(tmp_path: Path) -> None:
    many_agents(tmp_path / ".claude/agents", 3)
    [body] = lead_requests(tmp_path)
    task = tool(body, "task")
    assert "Triggers on: 'topic2', 'area 2'" in task["description"]
    assert task["parameters"]["properties"]["subagent_type"]["enum"][-1] == "specialist-002"
    assert "tool_search" not in {t["function"]["name"] for t in body["tools"]}


def test_agents_show_prints_a_definition_as_resolved(workspace: Path) -> None:
    done = run_cli(["agents", "show", "code-reviewer", "--json", "--model-alias", "sonnet=openai:x"], cwd=workspace)
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    assert row["source"] == ".claude/agents/code-reviewer.md"
    assert row["tools"] == ["read_file", "grep", "find_files", "bash", "todo_write"]
    assert row["unavailable_tools"] == ["WebFetch", "WebSearch"]
    assert (row["max_steps"], row["timeout"]) == (12, 600.0)
    assert row["command_rules"] == {"allow": ["git diff:*"], "deny": []}
    assert len(row["warnings"]) == 2
    shown = run_cli(["agents", "show", "seo-meta-optimizer", "--model-alias", "sonnet=openai:gpt-4.1"], cwd=workspace)
    assert "model:             sonnet → openai:gpt-4.1" in shown.stdout
    reviewer = run_cli(["agents", "show", "code-reviewer"], cwd=workspace)
    assert "commands allowed:  git diff:*" in reviewer.stdout
    missing = run_cli(["agents", "show", "nope"], cwd=workspace)
    assert missing.returncode == 2 and "no subagent type 'nope'; available: general-purpose" in missing.stderr


def test_agents_list_json_keeps_stdout_clean_and_warns_on_stderr(workspace: Path) -> None:
    done = run_cli(["agents", "list", "--json"], cwd=workspace)
    assert done.returncode == 0
    assert "powershell-5.1-expert" in [row["name"] for row in json.loads(done.stdout)]
    assert "warning: .claude/agents/blob.md: a binary file" in done.stderr


def test_a_type_naming_an_mcp_server_gets_that_servers_tools_besides_its_own() -> None:
    from delegate.agents import Subagent, tools_for

    docs_only = Subagent(name="d", description="d", tools=["read_file"], mcp_servers=["docs"])
    available = ["read_file", "write_file", "mcp__docs__search", "mcp__docs__fetch", "mcp__github__issue"]
    assert tools_for(docs_only, ["read_file"], available) == ["read_file", "mcp__docs__search", "mcp__docs__fetch"]


def test_delegate_run_prints_the_warnings_on_stderr_and_runs(workspace: Path) -> None:
    def answer(body: dict[str, Any]) -> Reply:
        reply = sonnet_responder(body)
        return Reply(content="all good") if reply.content.startswith("done") else reply

    with OpenAIServer(answer) as server:
        env = scrubbed_env()
        env |= {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "k"}
        done = subprocess.run(
            [sys.executable, "-m", "delegate", "run", "hello", "--model", "openai:m", "--json"],
            capture_output=True,
            text=True,
            cwd=workspace,
            env=env,
        )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["final"] == "all good"
    assert "warning: .claude/agents/no-front-matter.md:1: no front matter" in done.stderr
    assert "warning: model 'sonnet' (anthropic:claude-sonnet-4-5) has no ANTHROPIC_API_KEY set" in done.stderr


async def test_a_type_from_an_operators_folder_gets_the_mcp_server_it_defines_inline_for_itself_alone(
    tmp_path: Path,
) -> None:
    from delegate.models import ModelRequest, ModelResponse
    from delegate.testing import FunctionModel, call, reply

    server = Path(__file__).with_name("mcp_server.py")
    operator = tmp_path / "operator-agents"
    operator.mkdir()
    (operator / "adder.md").write_text(
        "---\nname: adder\ndescription: Adds numbers.\ntools: Read\nmcpServers:\n"
        f"  - tiny:\n      command: {sys.executable}\n      args: [{server}]\n---\nAdd.\n"
    )
    (tmp_path / "ws").mkdir()
    offered: dict[str, set[str]] = {}

    def answer(request: ModelRequest) -> ModelResponse:
        names = {t.name for t in request.tools}
        if is_lead(request):
            offered.setdefault("lead", names)
            if len(request.messages) == 1:
                return call("task", subagent_type="adder", description="add", prompt="2 + 40")
            return reply("done")
        offered.setdefault("adder", names)
        if len(request.messages) == 1:
            return call("mcp__tiny__add", a=2, b=40)
        return call("complete", summary=request.messages[-1].tool_results[0].content)

    async with Runtime(
        model=FunctionModel(answer),
        workspace=tmp_path / "ws",
        store=False,
        extensions=Extensions(agents_dirs=[operator]),
    ) as rt:
        result = await rt.run("Add 2 and 40.")
    assert result.subagents[0].summary == "42"
    assert "mcp__tiny__add" in offered["adder"] and "read_file" in offered["adder"]
    assert not any(name.startswith("mcp__") for name in offered["lead"])


async def test_project_context_is_bounded_marked_and_a_type_can_opt_out(tmp_path: Path) -> None:
    from delegate import Subagent
    from delegate.models import ModelRequest, ModelResponse
    from delegate.testing import FunctionModel, call, reply

    (tmp_path / ".claude").mkdir()
    (tmp_path / "CLAUDE.md").write_text("Use tabs. " + "x" * 20_000)
    (tmp_path / ".claude/CLAUDE.md").write_text("Never push.")
    (tmp_path / "AGENTS.md").symlink_to("/etc/hostname")  # a link out of the workspace is left out
    quiet = Subagent(name="quiet", description="Works without project notes.", project_context=False)
    systems: dict[str, str] = {}

    def answer(request: ModelRequest) -> ModelResponse:
        if is_lead(request):
            systems.setdefault("lead", request.system)
            if len(request.messages) == 1:
                return call("task", subagent_type="quiet", description="q", prompt="go")
            return reply("done")
        systems.setdefault("quiet", request.system)
        return call("complete", summary="ok")

    async with Runtime(model=FunctionModel(answer), workspace=tmp_path, subagents=[quiet], store=False) as rt:
        await rt.run("Go.")
    lead = systems["lead"]
    assert '<project-context file="CLAUDE.md">\nUse tabs. xxx' in lead
    assert "[... 12010 more characters: read CLAUDE.md with read_file]" in lead
    assert '<project-context file=".claude/CLAUDE.md">\nNever push.\n</project-context>' in lead
    assert 'file="AGENTS.md"' not in lead
    assert "project-context" not in systems["quiet"]


def test_an_empty_tools_line_inherits_as_claude_code_does(tmp_path: Path) -> None:
    agents = tmp_path / ".claude/agents"
    agents.mkdir(parents=True)
    (agents / "a.md").write_text("---\nname: a\ndescription: Note: inherits.\ntools:\n---\n")
    (agents / "b.md").write_text("---\nname: b\ndescription: Strict YAML.\ntools:\n---\n")
    catalogue = Catalogue.build(workspace=tmp_path)
    assert (catalogue.definitions["a"].tools, catalogue.definitions["b"].tools) == (None, None)


async def test_bash_rules_of_a_claude_type_decide_which_commands_it_may_run(tmp_path: Path) -> None:
    from delegate.models import ModelRequest, ModelResponse
    from delegate.testing import FunctionModel, call, reply

    agents = tmp_path / ".claude/agents"
    agents.mkdir(parents=True)
    (agents / "echoer.md").write_text(
        "---\nname: echoer\ndescription: Echoes.\ntools: Read, Bash(echo:*), Bash(printf ok)\n"
        "disallowedTools: Bash(echo secret:*)\n---\nEcho.\n"
    )
    commands = [
        "echo hi && printf ok",  # each part allowed
        "echo hi; ls",  # ls is not
        "echo secret plans",  # refused by the deny rule
        "echo $(id)",  # cannot be checked
    ]
    outputs: list[str] = []

    def answer(request: ModelRequest) -> ModelResponse:
        if is_lead(request):
            if len(request.messages) == 1:
                return call("task", subagent_type="echoer", description="echo", prompt="Echo.")
            return reply("done")
        done = len(outputs)
        if done:
            outputs[-1] = request.messages[-1].tool_results[0].content
        if done == len(commands):
            return call("complete", summary="echoed")
        outputs.append("")
        return call("bash", command=commands[done])

    async with Runtime(model=FunctionModel(answer), workspace=tmp_path, store=False, commands=CommandPolicy()) as rt:
        await rt.run("Echo.")
    assert outputs[0].startswith("hi\nok")
    assert outputs[1] == (
        "Error: the command was not run: 'ls' is not among the commands this subagent type may run: "
        "Bash(echo:*), Bash(printf ok)"
    )
    assert outputs[2].endswith("'echo secret plans' is refused by this subagent type's rule Bash(echo secret:*)")
    assert "command substitution" in outputs[3]
    assert not (tmp_path / "secret").exists()


def first_sentence(i: int) -> str:
    """A generated type's first sentence: 40 to 160 characters, by its number (a catalogue's mix)."""
    words = f"Reviews topic{i} code for correctness, speed and safety, and writes up each finding with its file"
    length = 40 + (i * 37) % 121
    return (words * 3)[:length].rstrip(" ,")


def test_150_types_each_get_the_first_sentence_of_their_description_within_32_kb_the_longest_cut_at_a_word(
    tmp_path: Path,
) -> None:
    folder = tmp_path / ".claude/agents"
    folder.mkdir(parents=True)
    for i in range(150):
        description = f"{first_sentence(i)}. Use PROACTIVELY after changes to topic{i}; knows its conventions in depth."
        (folder / f"agent-{i:03}.md").write_text(
            f"---\nname: specialist-{i:03}\ndescription: {description}\ntools: Read, Grep\n---\nYou review.\n"
        )
    [first] = lead_requests(tmp_path)
    assert len(json.dumps(first).encode()) <= 32_000
    listing = tool(first, "task")["description"]
    assert max(len(first_sentence(i)) for i in range(150)) == 160
    lines = {line.split(": ", 1)[0]: line.split(": ", 1)[1] for line in listing.splitlines() if ": " in line}
    shown = {i: lines[f"- specialist-{i:03}"] for i in range(150)}
    whole = [i for i in range(150) if shown[i] == first_sentence(i)]
    assert len(whole) >= 100  # most whole; the room the short ones leave goes to the long ones
    for i in set(range(150)) - set(whole):  # the longest cut at a word, marked, and still long
        assert shown[i].endswith("…") and first_sentence(i).startswith(shown[i][:-1]), shown[i]
        assert len(shown[i]) >= 100, shown[i]
    assert "Use PROACTIVELY" not in listing  # the rest is a tool_search away


def test_agents_list_is_one_line_per_type_and_long_is_the_table(tmp_path: Path) -> None:
    many_agents(tmp_path / ".claude/agents", 137)
    short = run_cli(["agents", "list"], cwd=tmp_path, env=scrubbed_env() | {"COLUMNS": "200"})
    lines = short.stdout.splitlines()
    assert len(lines) == 3 + 137  # the built-in types and each definition, a line each
    assert lines[3 + 42].split()[:1] == ["specialist-042"]
    assert "Expert number 42 in domain 8 engineering" in lines[3 + 42] and "PROACTIVELY" not in lines[3 + 42]
    table = run_cli(["agents", "list", "--long"], cwd=tmp_path, env=scrubbed_env() | {"COLUMNS": "200"})
    assert "source" in table.stdout and ".claude/agents/agent-042.md" in table.stdout
    assert len(table.stdout.splitlines()) > len(lines)


def test_a_project_mcp_json_is_read_by_default(tmp_path: Path) -> None:
    server_file = Path(__file__).with_name("mcp_server.py")
    config = {"mcpServers": {"tiny": {"command": sys.executable, "args": [str(server_file)]}}}
    (tmp_path / ".mcp.json").write_text(json.dumps(config))
    with OpenAIServer(lambda body: Reply(content="done")) as server:
        env = scrubbed_env() | {"OPENAI_BASE_URL": server.base_url}
        done = run_cli(["run", "shout", "--model", "openai:m", "--json"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "mcp__tiny__shout" in json.dumps(server.requests[0])  # offered to the lead, no --mcp-config given


def test_delegate_run_reads_user_level_agents_and_skills_which_the_project_shadows(tmp_path: Path) -> None:
    home, workspace = tmp_path / "home", tmp_path / "ws"
    (home / "agents").mkdir(parents=True)
    (home / "skills" / "tidy").mkdir(parents=True)
    (home / "agents" / "helper.md").write_text("---\nname: helper\ndescription: USER-LEVEL helper.\n---\nHelp.\n")
    (home / "agents" / "shared.md").write_text("---\nname: shared\ndescription: USER-LEVEL shared.\n---\nHi.\n")
    (home / "skills" / "tidy" / "SKILL.md").write_text("---\nname: tidy\ndescription: TIDY-SKILL.\n---\nSteps.\n")
    (workspace / ".claude" / "agents").mkdir(parents=True)
    (workspace / ".claude" / "agents" / "shared.md").write_text(
        "---\nname: shared\ndescription: PROJECT shared.\n---\n"
    )
    with OpenAIServer(lambda body: Reply(content="done")) as server:
        env = scrubbed_env() | {"OPENAI_BASE_URL": server.base_url, "CLAUDE_CONFIG_DIR": str(home)}
        done = run_cli(["run", "go", "--model", "openai:m", "--json"], env, workspace)
        listed = run_cli(["agents", "list", "--json"], env, workspace)
    assert done.returncode == 0, done.stderr
    first = json.dumps(server.requests[0])
    assert "USER-LEVEL helper" in first and "TIDY-SKILL" in first
    assert "PROJECT shared" in first and "USER-LEVEL shared" not in first  # the project's shadows the user's
    sources = {row["name"]: row["source"] for row in json.loads(listed.stdout)}
    assert sources["helper"] == "~/.claude/agents/helper.md" and sources["shared"] == ".claude/agents/shared.md"


def real_looking_agents(folder: Path, count: int = 162) -> list[str]:
    """`count` definitions shaped as public collections write them: three-word names, a long first
    sentence with a dash, "Use PROACTIVELY ...", and an `<example>` with quotes."""
    areas = ["backend", "frontend", "mobile", "database", "security", "devops", "cloud", "data", "ml", "api"]
    areas += ["graphql", "kubernetes", "terraform", "python", "typescript", "rust", "golang", "java", "react"]
    roles = ["architect", "engineer", "reviewer", "specialist", "expert", "auditor", "optimizer", "debugger"]
    names = [f"{a}-{b}-{r}" for a in areas for b in areas for r in roles if a != b][::16][:count]
    folder.mkdir(parents=True)
    for name in names:
        a, b, role = name.split("-")
        description = (
            f"Expert {a} {role} specializing in {b} systems — designs, reviews and hardens {a} code paths, with "
            f"deep knowledge of {b} conventions, idioms, failure modes and tooling. Use PROACTIVELY when working "
            f"on {a} or {b} changes. <example>user: 'Review my {a} change' assistant: “I'll use {name}.”</example>"
        )
        (folder / f"{name}.md").write_text(
            f"---\nname: {name}\ndescription: >-\n  {description}\ntools: Read, Grep, Glob, Bash\nmodel: sonnet\n---\n"
            f"You are a senior {a} {role}.\n"
        )
    return names


def test_162_real_looking_definitions_keep_the_first_request_within_32_kb_each_type_choosable(tmp_path: Path) -> None:
    names = real_looking_agents(tmp_path / ".claude/agents")
    assert len(names) == 162
    first, second = lead_requests(tmp_path, search=f"agent:{names[40]}")
    assert len(json.dumps(first).encode()) <= 32_000
    listing = tool(first, "task")["description"]
    for name in names:  # every type by name, with enough of its description to be chosen by
        line = next(line for line in listing.splitlines() if line.startswith(f"- {name}: "))
        assert len(line.removeprefix(f"- {name}: ").split()) >= 8, line
    found = next(m["content"] for m in second["messages"] if m["role"] == "tool")
    assert "Use PROACTIVELY" in found  # the rest of its description is a tool_search away


def test_agents_show_prints_its_own_warnings_once_and_no_other_files(workspace: Path) -> None:
    done = run_cli(["agents", "show", "code-reviewer"], cwd=workspace)
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stdout.splitlines() if line.startswith("warning:")]
    assert len(warnings) == len(set(warnings)) == 2, warnings
    assert all(".claude/agents/code-reviewer.md" in line for line in warnings), warnings
    assert "blob.md" not in done.stdout + done.stderr  # another file's warning is `agents list`'s to say
