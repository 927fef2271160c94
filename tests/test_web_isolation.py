"""The run page in a real headless Chromium shows what overlay subagents changed: a diff per file of
the one that merged, and the conflict of the one that did not, with where its version is."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from delegate import Store
from delegate.testing import is_lead
from tests.loopback_openai import Reply
from tests.test_server_web import CHROMIUM
from tests.test_server_web import browser as browser
from tests.test_web_run import first_user_text, model_server, page, server, shoot, start_run, store  # noqa: F401

sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package (pip install playwright)")
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's Chromium at /usr/bin/chromium (apt-get install -y chromium)"
)
expect = sync_api.expect


class Editors:
    """The lead writes `notes.md`, then starts two overlay subagents at once; each reads it, then
    (once both have read it) rewrites it and adds a file of its own, then completes."""

    def __init__(self) -> None:
        self.both_read = threading.Barrier(2, timeout=60)
        self.scan_may_finish = threading.Event()  # what the shared fixtures release at the end

    def __call__(self, body: dict[str, Any]) -> Reply:
        turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if is_lead(body):
            if turns == 0:
                return Reply(tool_calls=[("write_file", {"path": "notes.md", "content": "# Notes\n\nthe draft\n"})])
            if turns == 1:
                task = {"subagent_type": "general-purpose", "description": "edit", "isolation": "overlay"}
                return Reply(tool_calls=[("task", task | {"prompts": ["edit A", "edit B"]})])
            return Reply(content="Both finished.")
        name = first_user_text(body).split()[-1]
        if turns == 0:
            return Reply(tool_calls=[("read_file", {"path": "notes.md"})])
        if turns == 1:
            self.both_read.wait()
            writes = [
                ("write_file", {"path": "notes.md", "content": f"# Notes\n\nedited by {name}\n"}),
                ("write_file", {"path": f"by-{name}.md", "content": f"{name}\n"}),
            ]
            return Reply(tool_calls=writes)
        return Reply(tool_calls=[("complete", {"summary": f"{name} edited the notes", "paths": ["notes.md"]})])


@pytest.fixture
def team() -> Editors:
    return Editors()


def test_a_subagent_s_changes_show_a_diff_per_file_and_the_other_s_conflict(
    page: sync_api.Page,  # noqa: F811 - the fixture
    store: Store,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    start_run(page, "Edit the notes twice")
    (run,) = store.list_runs(None)
    records = {r.id: r for r in store.subagent_records(run.id)}
    merged = next(agent for agent, r in records.items() if not r.conflicts)
    refused = next(agent for agent in records if agent != merged)
    changes = page.locator("#agent-detail .changes")

    page.click(f"#timeline [data-agent={merged}]")
    expect(changes.locator("h4")).to_have_text("Changes (merged into the workspace)")
    expect(changes.locator("details.change")).to_have_count(2)
    created = changes.locator("details.change").nth(0)  # in path order: by-X.md, then notes.md
    expect(created.locator(".op")).to_have_text("create")
    winner = created.get_attribute("data-path")
    assert winner in ("by-A.md", "by-B.md")
    notes = changes.locator('details.change[data-path="notes.md"]')
    expect(notes.locator(".op")).to_have_text("modify")
    notes.locator("summary").click()
    expect(notes.locator(".diff-del")).to_have_text(["-the draft\n"])
    expect(notes.locator(".diff-add")).to_have_text([f"+edited by {winner[3]}\n"])
    shoot(page, tmp_path, "web-changes.png")

    page.click(f"#timeline [data-agent={refused}]")
    expect(changes.locator("h4")).to_contain_text("not merged")
    conflict = changes.locator('li.conflict[data-path="notes.md"]')
    expect(conflict).to_contain_text("changed in the workspace since the subagent first saw it")
    expect(conflict).to_contain_text("its version: subagent-results/")
