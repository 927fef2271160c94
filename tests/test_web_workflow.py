"""A workflow on the run page, in a real headless Chromium against a real server: its agents
grouped by phase with counts, its count line and phases, and its script with each line that
started agents marked with what they did."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from delegate import RuntimeSettings, Store
from delegate.server import ServerSettings, create_app
from tests.loopback_openai import OpenAIServer, Reply
from tests.loopback_server import LiveServer
from tests.test_server_web import CHROMIUM, sign_in
from tests.test_server_web import browser as browser  # the module's Chromium (a fixture)

sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package (pip install playwright)")
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's Chromium at /usr/bin/chromium (apt-get install -y chromium)"
)
expect = sync_api.expect

SCRIPT = """\
phase("gather")
found = parallel([call("find " + str(i), label="find " + str(i)) for i in range(3)])
phase("check")
checked = agent("check all", label="checker", acceptance=["file:README.md exists"])
len(found)
"""


def completing(body: dict[str, Any]) -> Reply:
    task = next(m["content"] for m in body["messages"] if m["role"] == "user")
    return Reply(tool_calls=[("complete", {"summary": f"did {task}"})])


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[LiveServer, Store]]:
    with OpenAIServer(completing) as models, Store.for_workspace(tmp_path) as store:
        monkeypatch.setenv("OPENAI_BASE_URL", models.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        settings = ServerSettings(runtime=RuntimeSettings(workspace=tmp_path, model="openai:loopback-model"))
        with LiveServer(create_app(settings, store=store)) as running:
            yield running, store


def test_the_run_page_shows_a_workflows_phases_counts_and_script_lines(
    browser: sync_api.Browser, served: tuple[LiveServer, Store], tmp_path: Path
) -> None:
    server, store = served
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{server.url}/")
    sign_in(page, store.add_user("alice")[1])
    started = page.evaluate("(script) => api('POST', '/runs', {prompt: 'check the project', workflow: script})", SCRIPT)
    run_id = started["run_id"]
    page.goto(f"{server.url}/#/runs/{run_id}")
    expect(page.locator("#run-status")).to_have_text("completed", timeout=30_000)

    gather = page.locator('#agent-tree [data-phase="gather"]')
    expect(gather.locator(".phase-node")).to_contain_text("3 agents: 3 completed", timeout=10_000)
    expect(gather.locator("[data-agent]")).to_have_count(3)
    check = page.locator('#agent-tree [data-phase="check"]')
    expect(check.locator("[data-agent]")).to_have_count(1)
    expect(check.locator(".phase-node")).to_contain_text("1 agent: 1 completed")

    box = page.locator("#run-workflow")
    expect(box).to_be_visible(timeout=10_000)
    expect(box.locator(".workflow-line")).to_contain_text("Script completed. 4 agents: 4 completed")
    expect(box.locator(".workflow-phases tbody tr")).to_have_count(2)
    lines = box.locator(".script-line")
    expect(lines).to_have_count(5)
    expect(lines.nth(1)).to_contain_text("← 3 agents: 3 completed")
    expect(lines.nth(3)).to_contain_text("← 1 agent: 1 completed")
    expect(lines.nth(0)).not_to_contain_text("←")
    page.screenshot(path=str(tmp_path / "workflow.png"), full_page=True)
    context.close()
    assert errors == [], errors
