"""Stopping one subagent through the real server: `POST /api/v1/runs/{id}/agents/{agent_id}/stop`
(owner-scoped), and the Stop button of a running agent in the web page, in a real headless Chromium."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from delegate import Store
from delegate.models import ModelRequest, ModelResponse
from delegate.testing import call, is_lead, reply
from tests.durable_support import wait_for
from tests.loopback_server import LiveServer
from tests.test_server_api import client, serving
from tests.test_server_web import CHROMIUM, sign_in
from tests.test_server_web import browser as browser  # the module's Chromium (a fixture)

TWO_JOBS = {"subagent_type": "general-purpose", "description": "two jobs", "prompts": ["job quick", "job slow"]}


async def quick_and_slow(request: ModelRequest) -> ModelResponse:
    """The lead starts a quick and a slow subagent (in the foreground), then answers with what
    they gave back; the slow one works until it is stopped."""
    if is_lead(request):
        if len(request.messages) == 1:
            return call("task", **TWO_JOBS)
        return reply(request.messages[-1].tool_results[0].content)
    if request.messages[-1].role == "user":
        return call("list_dir", path=".")
    if "slow" in request.messages[0].text:
        await asyncio.sleep(120)  # until stopped
    return call("complete", summary=f"did {request.messages[0].text}")


async def in_the_background(request: ModelRequest) -> ModelResponse:
    """`quick_and_slow` with both subagents in the background: the lead answers at once, the run
    waits for them, and the lead's last answer gives what the notices said."""
    if not is_lead(request):
        return await quick_and_slow(request)
    answered = sum(1 for m in request.messages if m.role == "assistant")
    if answered == 0:
        return call("task", **TWO_JOBS, run_in_background=True)
    if answered == 1:
        return reply("started both")
    return reply("\n".join(m.text for m in request.messages if m.name == "task_notification"))


@pytest.fixture
def server(workspace: Path, store: Store) -> Iterator[LiveServer]:
    with serving(workspace, store, quick_and_slow) as running:
        yield running


def slow_one_works(store: Store, run_id: str) -> bool:
    return any(e.type == "model.request" and e.agent_id == "sub2" and e.data["step"] == 2 for e in store.events(run_id))


def test_the_owner_stops_one_subagent_over_http_and_its_sibling_completes(
    server: LiveServer, store: Store, tokens: dict[str, str]
) -> None:
    with client(server, tokens["alice"]) as alice, client(server, tokens["bob"]) as bob:
        run_id = alice.post("/runs", json={"prompt": "do two jobs"}).json()["run_id"]
        wait_for(lambda: slow_one_works(store, run_id), what="the slow subagent's second turn")

        assert bob.post(f"/runs/{run_id}/agents/sub2/stop").status_code == 404  # another user's run
        assert alice.post(f"/runs/{run_id}/agents/lead/stop").status_code == 400
        stopped = alice.post(f"/runs/{run_id}/agents/sub2/stop", json={"reason": "enough"})
        assert stopped.status_code == 202 and stopped.json()["stop_requested"] is True

        run = wait_for(lambda: (r := alice.get(f"/runs/{run_id}").json())["status"] != "running" and r)
        assert run["status"] == "completed"
        quick, slow = run["subagents"]
        assert (quick["status"], slow["status"], slow["stop_reason"]) == ("completed", "cancelled", "stopped")
        assert slow["error"] == "stopped: enough"
        assert "[cancelled]" in run["final"] and "stopped: enough" in run["final"]  # the lead got it
        again = alice.post(f"/runs/{run_id}/agents/sub2/stop")
        assert again.status_code == 409 and "not running" in again.json()["error"]["message"]


sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package (pip install playwright)")


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's Chromium at /usr/bin/chromium")
def test_the_stop_button_of_a_running_background_subagent_stops_it_and_the_run_goes_on(
    browser: sync_api.Browser, workspace: Path, store: Store
) -> None:
    with serving(workspace, store, in_the_background) as server:
        stop_from_the_page(browser, server, store)


def stop_from_the_page(browser: sync_api.Browser, server: LiveServer, store: Store) -> None:
    expect = sync_api.expect
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{server.url}/")
    sign_in(page, store.add_user("alice")[1])
    page.fill("#prompt", "do two jobs")
    page.click("#start-run")

    stop = page.locator("[data-agent=sub2] > .node button.stop-agent")
    expect(stop).to_be_visible(timeout=30_000)
    expect(page.locator("[data-agent=lead] > .node button.stop-agent")).to_have_count(0)  # the lead has none
    expect(page.locator("[data-agent=sub2] > .node .badge.background")).to_be_visible()
    expect(page.locator("#timeline [data-agent=sub2]")).to_contain_text("background")
    stop.click()

    expect(page.locator("#run-status")).to_have_text("completed", timeout=30_000)
    expect(page.locator("[data-agent=sub2] > .node .badge.cancelled")).to_be_visible()
    expect(page.locator("[data-agent=sub1] > .node .badge.completed")).to_be_visible()
    expect(page.locator("button.stop-agent")).to_have_count(0)  # nothing runs any more
    expect(page.locator("#run-final")).to_contain_text("stopped from the web page")
    context.close()
    assert errors == [], errors
