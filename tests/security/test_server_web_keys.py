"""The web page sends ids and item keys so that none can turn into another request (headless Chromium).

The finding of issue 9: the Retry button of an item keyed `..` called `/batches/B/items/../retry`,
which the browser resolves to `/batches/B/retry`: it retried every failed item of the batch.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from delegate import RuntimeSettings, Store
from delegate.models import ModelRequest, ModelResponse
from delegate.server import ServerSettings, create_app
from delegate.testing import FunctionModel
from tests.loopback_server import LiveServer

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's Chromium at /usr/bin/chromium (apt-get install -y chromium)"
)
sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package (pip install playwright)")

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
KEYS = ["..", ".", "a/../b", "plain"]


def falls_over(request: ModelRequest) -> ModelResponse:
    raise RuntimeError(f"the model fell over on {request.messages[0].text}")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[LiveServer, str]]:
    settings = ServerSettings(runtime=RuntimeSettings(workspace=tmp_path), model=lambda _: FunctionModel(falls_over))
    with Store.for_workspace(tmp_path) as store:
        _, token = store.add_user("alice")
        with LiveServer(create_app(settings, store=store)) as server:
            yield server, token


def failed_batch(server: LiveServer, token: str) -> str:
    """A batch whose every item failed (one attempt each), through the API."""
    headers = {"Authorization": f"Bearer {token}"}
    with httpx2.Client(base_url=f"{server.url}/api/v1", headers=headers, timeout=60) as api:
        items = [{"key": key, "prompt": f"item {key}"} for key in KEYS]
        body = {"subagent_type": "general-purpose", "items": items, "max_attempts": 1, "title": "Keys"}
        batch_id = api.post("/batches", json=body).json()["id"]
        with api.stream("GET", f"/batches/{batch_id}/events") as response:
            last = [json.loads(e.data) for e in httpx2.EventSource(response) if e.event == "batch.status"][-1]
        assert last["counts"]["failed"] == len(KEYS)
        return batch_id


def item_attempts(server: LiveServer, token: str, batch_id: str) -> dict[str, tuple[str, int]]:
    headers = {"Authorization": f"Bearer {token}"}
    with httpx2.Client(base_url=f"{server.url}/api/v1", headers=headers, timeout=60) as api:
        items = api.get(f"/batches/{batch_id}/items").json()["items"]
    return {i["key"]: (i["status"], i["attempts"]) for i in items}


@pytest.fixture(scope="module")
def browser() -> Iterator[sync_api.Browser]:
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield launched
        launched.close()


@pytest.mark.parametrize("key", ["..", ".", "a/../b"])
def test_retrying_an_item_whose_key_is_a_dot_segment_retries_that_item_alone(
    browser: sync_api.Browser, served: tuple[LiveServer, str], key: str
) -> None:
    server, token = served
    batch_id = failed_batch(server, token)
    context = browser.new_context()
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{server.url}/")
    page.fill("#token", token)
    page.click("text=Save token")
    page.goto(f"{server.url}/#/batches/{batch_id}")
    row = page.locator("#item-table tbody tr").filter(has=page.get_by_text(key, exact=True))
    sync_api.expect(row).to_have_count(1)

    with page.expect_response(lambda r: r.request.method == "POST" and "/retry" in r.url) as answer:
        row.get_by_role("button", name="Retry").click()
    response = answer.value
    assert response.status == 200
    assert response.url == f"{server.url}/api/v1/batches/{batch_id}/retry"
    assert json.loads(response.request.post_data or "") == {"key": key}
    assert response.json()["retried"] == 1

    others = {k: v for k, v in item_attempts(server, token, batch_id).items() if k != key}
    assert others == {k: ("failed", 1) for k in KEYS if k != key}  # not one of them went again
    context.close()
    assert errors == []


def test_a_batch_opened_from_the_list_shows_its_items(
    browser: sync_api.Browser, served: tuple[LiveServer, str]
) -> None:
    server, token = served
    batch_id = failed_batch(server, token)
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{server.url}/")
    page.fill("#token", token)
    page.click("text=Save token")
    page.click("nav >> text=Batches")
    page.locator("#batch-table tbody tr", has_text="Keys").click()
    sync_api.expect(page).to_have_url(f"{server.url}/#/batches/{batch_id}")
    sync_api.expect(page.locator("#item-table tbody tr")).to_have_count(len(KEYS))
    context.close()
