"""Enabled skills (spec 002: a subagent loads "the skills that user has enabled, including custom
skills and same-name shadowing"): the operator's defaults, each user's own choices over them, and
a subagent sees only the enabled skills its allowlist permits."""

from __future__ import annotations

import json
from pathlib import Path

from delegate import Extensions, Runtime, Store, Subagent
from delegate.models import ModelRequest, ModelResponse
from delegate.skills import SkillSettings
from delegate.testing import FunctionModel, call, is_lead, reply
from tests.cli_support import run_cli
from tests.test_skills import skill


def index_of(system: str) -> list[str]:
    return sorted(line[2:].split(":")[0] for line in system.splitlines() if ".delegate/skills/" in line)


async def test_a_subagent_sees_only_the_enabled_skills_its_allowlist_permits(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    for name in ("report", "review", "pdf"):
        skill(ws, ".delegate/skills", name, f"The {name} skill.")
    db = f"sqlite:///{tmp_path / 'store.db'}"
    with Store.open(db) as store:
        SkillSettings(store).choose(None, "review", False)  # the operator's default
    seen: dict[str, list[str]] = {}

    def answer(request: ModelRequest) -> ModelResponse:
        if is_lead(request):
            seen["lead"] = index_of(request.system)
            if request.messages[-1].role == "user":
                return call("task", subagent_type="picky", description="look", prompt="/review the code")
            return reply("ok")
        if len(request.messages) == 1:
            seen["picky"], seen["opening"] = index_of(request.system), [m.name or "" for m in request.messages]
            return call("read_file", path=".delegate/skills/review/SKILL.md")
        return call("complete", summary=request.messages[-1].tool_results[0].content)

    picky = Subagent(name="picky", description="Picky.", skills=["review", "pdf"])
    runtime = Runtime(model=FunctionModel(answer), workspace=ws, store=db, subagents=[picky])
    result = await runtime.run("go")
    assert seen["lead"] == ["pdf", "report"]
    assert seen["picky"] == ["pdf"]  # review is disabled; report is not in its allowlist
    assert seen["opening"] == [""]  # `/review` activates nothing: the skill is not there
    assert "is internal state" in result.subagents[0].summary  # nor is its folder mounted: it cannot read it


async def test_a_users_own_skill_shadows_the_operators_and_its_choice_is_its_own(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    skill(ws, ".delegate/skills", "review", "The operator's review.")
    db = f"sqlite:///{tmp_path / 'store.db'}"
    with Store.open(db) as store:
        alice = store.add_user("alice")[0]
        settings = SkillSettings(store)
        settings.choose(None, "review", False)
        settings.choose(alice, "review", True)  # her own choice wins over the default
    own = ws / ".delegate" / "users" / alice
    skill(own, ".delegate/skills", "review", "Alice's own review.")
    systems: list[str] = []

    def answer(request: ModelRequest) -> ModelResponse:
        systems.append(request.system)
        return reply("ok")

    shared = Extensions(shared=ws)
    await Runtime(model=FunctionModel(answer), workspace=own, store=db, user_id=alice, extensions=shared).run("a")
    await Runtime(model=FunctionModel(answer), workspace=ws, store=db).run("b")
    assert "- review: Alice's own review." in systems[0]
    assert index_of(systems[1]) == []  # the local user follows the operator's default


def test_delegate_skills_enables_and_disables_by_default_and_for_one_user(store_url: str, tmp_path: Path) -> None:
    skill(tmp_path, ".delegate/skills", "report", "Writes reports.")
    skill(tmp_path, ".delegate/skills", "review", "Reviews code.")
    at = ["--workspace", str(tmp_path), "--db", store_url]
    assert run_cli(["users", "add", "alice", *at]).returncode == 0
    off = run_cli(["skills", "disable", "report", *at])
    assert off.returncode == 0, off.stderr
    assert "Disabled report by default" in off.stdout
    on = run_cli(["skills", "enable", "report", "--user", "alice", *at])
    assert on.returncode == 0 and "Enabled report for alice" in on.stdout
    rows = {r["name"]: r for r in json.loads(run_cli(["skills", "list", "--json", *at]).stdout)}
    assert (rows["report"]["enabled"], rows["review"]["enabled"]) == (False, True)
    hers = {r["name"]: r for r in json.loads(run_cli(["skills", "list", "--json", "--user", "alice", *at]).stdout)}
    assert (hers["report"]["enabled"], hers["report"]["choice"], hers["report"]["default"]) == (True, True, False)
    listed = run_cli(["skills", "list", *at]).stdout
    assert "off  report: Writes reports." in listed and "on   review: Reviews code." in listed
    unknown = run_cli(["skills", "disable", "nope", *at])
    assert unknown.returncode == 2 and "no skill 'nope' here; the skills are: report, review" in unknown.stderr
