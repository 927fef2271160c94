"""Approving and denying from the web page, in a real headless Chromium: the run view shows the
call that waits (its tool and arguments) with Approve and Deny buttons; a click decides it and
the run goes on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from delegate import Extensions, Permissions, RuntimeSettings, Store
from delegate.server import ServerSettings, create_app
from tests.approvals_support import Writers
from tests.loopback_openai import OpenAIServer
from tests.loopback_server import LiveServer
from tests.test_server_web import CHROMIUM, sign_in
from tests.test_server_web import browser as browser  # the module's Chromium (a fixture)

sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package (pip install playwright)")
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's Chromium at /usr/bin/chromium (apt-get install -y chromium)"
)
expect = sync_api.expect


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.for_workspace(tmp_path) as opened:
        yield opened


@pytest.fixture
def page(
    browser: sync_api.Browser, tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> Iterator[sync_api.Page]:
    with OpenAIServer(Writers("a.md", "b.md")) as model_server:
        monkeypatch.setenv("OPENAI_BASE_URL", model_server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        ask = Extensions(permissions=Permissions(ask=["Write"]))
        runtime = RuntimeSettings(workspace=tmp_path, model="openai:loopback-model", extensions=ask)
        with LiveServer(create_app(ServerSettings(runtime=runtime), store=store)) as server:
            context = browser.new_context(viewport={"width": 1280, "height": 1000})
            opened = context.new_page()
            errors: list[str] = []
            opened.on("pageerror", lambda exc: errors.append(str(exc)))
            opened.goto(f"{server.url}/")
            sign_in(opened, store.add_user("alice")[1])
            yield opened
            context.close()
            assert errors == [], errors


def test_a_person_approves_one_call_and_denies_another_from_the_run_view(page: sync_api.Page, tmp_path: Path) -> None:
    page.fill("#prompt", "write the notes")
    page.click("#start-run")
    expect(page.locator("#run-status")).to_have_text("waiting", timeout=30_000)
    cards = page.locator("#approvals .approval")
    expect(cards).to_have_count(2, timeout=30_000)
    first = page.locator("#approvals .approval", has_text='"a.md"')
    second = page.locator("#approvals .approval", has_text='"b.md"')
    expect(first.locator(".approval-arguments")).to_contain_text('"content": "notes for a.md')
    second.get_by_label("Reason").fill("b is not needed")  # typed first: kept through the refresh a decision brings
    first.get_by_role("button", name="Approve").click()
    expect(cards).to_have_count(1)
    expect(second.get_by_label("Reason")).to_have_value("b is not needed")
    second.get_by_role("button", name="Deny").click()
    expect(page.locator("#run-status")).to_have_text("completed", timeout=30_000)
    expect(page.locator("#approvals")).to_be_hidden()
    expect(page.locator("#run-final")).to_contain_text("b is not needed")
    user_root = next((tmp_path / ".delegate" / "users").iterdir())
    assert (user_root / "a.md").exists() and not (user_root / "b.md").exists()
