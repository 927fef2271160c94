"""The run page reads trace-first, in a real headless Chromium at a phone's and a laptop's width:
the timeline and the agent tree at the top (above the fold), the final answer once, and nothing
wider than the screen. With `DELEGATE_TEST_SCREENSHOTS=DIR` the views are saved there (how
`bash scripts/screenshots.sh` makes `docs/web-run-390.png` and `docs/web-run-1280.png`)."""

from __future__ import annotations

import os
from itertools import pairwise
from pathlib import Path

import pytest

from tests.test_web_run import (
    FINAL,
    SHOTS,
    browser,
    expect,
    model_server,
    page,
    server,
    start_run,
    store,
    sync_api,
    team,
)

__all__ = ["browser", "model_server", "page", "server", "store", "team"]  # the fixtures, used here too


@pytest.mark.parametrize(("width", "height"), [(390, 844), (1280, 900)])
def test_the_run_page_puts_the_tree_above_the_fold_the_answer_once_and_nothing_wider_than_the_screen(
    page: sync_api.Page, width: int, height: int, tmp_path: Path
) -> None:
    page.set_viewport_size({"width": width, "height": height})
    start_run(page, "How are releases made?")
    expect(page.locator("#agent-tree [data-agent=sub3]")).to_be_visible()
    page.evaluate("window.scrollTo(0, 0)")
    wide = page.evaluate("document.documentElement.scrollWidth")
    assert wide <= width, f"the page is {wide} px wide at {width} px"
    tree = page.locator("#agent-tree").bounding_box()
    timeline = page.locator("#timeline").bounding_box()
    answer = page.locator("#run-final").bounding_box()
    assert tree is not None and timeline is not None and answer is not None
    assert tree["y"] < height, f"the agent tree starts at {tree['y']} px, below the fold ({height} px)"
    assert timeline["y"] < tree["y"] <= answer["y"]  # the trace first, then the answer
    headings = page.get_by_role("heading", name="How releases are made")
    expect(headings).to_have_count(1)  # the answer once (a thread of one turn lists no turns)
    assert FINAL.splitlines()[0].lstrip("# ") == "How releases are made"
    ticks = page.locator("#timeline .tl-tick")
    boxes = [ticks.nth(i).bounding_box() for i in range(ticks.count())]
    edges = [(b["x"], b["x"] + b["width"]) for b in boxes if b is not None]
    assert all(a[1] <= b[0] for a, b in pairwise(edges)), edges  # axis labels apart
    shots = os.environ.get(SHOTS)
    if shots:
        page.screenshot(path=str(Path(shots) / f"web-run-{width}.png"))
