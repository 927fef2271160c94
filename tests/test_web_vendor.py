"""The page's vendored libraries (markdown-it and DOMPurify, `server/static/vendor/`): each file is
the one its NOTICE (the folder's README.md) names, by version and sha256, with its licences beside
it; the server serves them, and the page loads them in Chromium under its Content-Security-Policy."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import httpx2
import pytest

import delegate.server
from tests.loopback_server import LiveServer
from tests.test_server_web import CHROMIUM, sync_api
from tests.test_server_web import browser as browser  # the module's Chromium (a fixture)
from tests.test_server_web import page as page  # the page of a live server (a fixture)
from tests.test_server_web import server as server  # a live server (a fixture)
from tests.test_server_web import store as store  # its store (a fixture)

VENDOR = Path(delegate.server.__file__).parent / "static" / "vendor"
LICENCE_TEXT = {  # words every copy of the licence has
    "MIT": "Permission is hereby granted, free of charge",
    "BSD-2-Clause": "Redistribution and use in source and binary forms",
    "Apache-2.0": "Apache License",
    "MPL-2.0": "Mozilla Public License Version 2.0",
}


def carries_its_licences(expression: str, files: list[str]) -> bool:
    """Whether the files hold the text of each licence of `expression` ("MIT", "A OR B")."""
    texts = [(VENDOR / name).read_text(encoding="utf-8") for name in files]
    return all(any(LICENCE_TEXT[licence] in text for text in texts) for licence in expression.split(" OR "))


def notice_tables() -> list[list[dict[str, str]]]:
    """The Markdown tables of the NOTICE, each a list of rows keyed by the table's header."""
    tables: list[list[dict[str, str]]] = []
    header: list[str] | None = None
    for line in (VENDOR / "README.md").read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            tables.append([])
        elif not set("".join(cells)) <= set("-:"):
            tables[-1].append(dict(zip(header, cells, strict=True)))
    return tables


def libraries() -> list[dict[str, str]]:
    return notice_tables()[0]


def test_each_vendored_file_is_the_one_its_notice_names_with_its_licences_beside_it() -> None:
    libs, bundled = notice_tables()
    assert [lib["package"] for lib in libs] == ["markdown-it", "dompurify"]
    for lib in libs:
        content = (VENDOR / lib["file here"]).read_bytes()
        assert hashlib.sha256(content).hexdigest() == lib["sha256 of the file"], lib["file here"]
        assert re.fullmatch(r"\d+\.\d+\.\d+", lib["version"])
        assert carries_its_licences(lib["licence"], lib["licence files"].split()), lib["package"]
    purify = (VENDOR / "purify.min.js").read_text(encoding="utf-8")
    assert purify.startswith(f"/*! @license DOMPurify {libs[1]['version']} ")  # its own banner says so
    assert {row["bundled in"] for row in bundled} == {"markdown-it.umd.min.js"}
    for row in bundled:
        assert carries_its_licences(row["licence"], [row["licence file"]]), row["package"]
    named = {n for lib in libs for n in [lib["file here"], *lib["licence files"].split()]}
    named |= {row["licence file"] for row in bundled}
    assert {p.name for p in VENDOR.iterdir()} == named | {"README.md"}  # nothing here the NOTICE leaves out


def test_the_server_serves_the_vendored_files_and_the_page_names_them_before_its_renderer(server: LiveServer) -> None:
    with httpx2.Client(base_url=server.url, timeout=30) as client:
        index = client.get("/")
        scripts = re.findall(r'<script src="(/static/[^"?]+)', index.text)
        for lib in libraries():
            served = client.get(f"/static/vendor/{lib['file here']}")
            assert served.status_code == 200
            assert served.content == (VENDOR / lib["file here"]).read_bytes()
            assert "javascript" in served.headers["content-type"]
    assert "script-src 'self'" in index.headers["content-security-policy"]
    assert scripts[:3] == [
        "/static/vendor/markdown-it.umd.min.js",
        "/static/vendor/purify.min.js",
        "/static/markdown.js",
    ]


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's Chromium at /usr/bin/chromium")
def test_the_page_runs_the_vendored_libraries_of_the_versions_its_notice_names(page: sync_api.Page) -> None:
    found = page.evaluate(
        """() => ({
            purify: DOMPurify.version,
            supported: DOMPurify.isSupported,
            markdownit: typeof markdownit,
            html: Markdown.render("**hi** <b>x</b> https://example.com").innerHTML,
        })"""
    )
    assert found["purify"] == libraries()[1]["version"]
    assert (found["supported"], found["markdownit"]) == (True, "function")
    assert found["html"] == (
        '<p><strong>hi</strong> &lt;b&gt;x&lt;/b&gt; <a href="https://example.com" '
        'rel="noopener noreferrer nofollow" target="_blank">https://example.com</a></p>\n'
    )
