"""No request body is read or parsed before its token is checked, and a bad body is a 4xx, never a 500.

Findings of issue 20 reproduced against the real server (uvicorn on loopback, a real SQLite store):
a 7.6 MB body naming `\\ud800` was parsed and walked on the event loop before the token was checked
(0.8 s each, another user's `GET /runs` at p95 5.9 s under 40 of them); a deeply nested body with
such an escape raised `RecursionError`, an unauthenticated 500 with a traceback in the log.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from delegate import Store
from tests.security.server_support import api, closed_by_server, live_server, read_answer

BODY_ROUTES = ["/api/v1/runs", "/api/v1/batches", "/api/v1/batches/batch_x/retry"]
DEEP = 100_000
HUGE = b'{"prompt": "' + b"x" * 7_600_000 + b'\\ud800"}'  # under the 8 MB cap


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.for_workspace(tmp_path) as opened:
        yield opened


@pytest.fixture
def token(store: Store) -> str:
    return store.add_user("alice")[1]


@pytest.fixture
def server_errors() -> Iterator[list[logging.LogRecord]]:
    """What the server logs at ERROR (uvicorn's 'Exception in ASGI application' with its traceback)."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(logging.ERROR)
    loggers = [logging.getLogger(name) for name in ("uvicorn.error", "delegate.server")]
    for logger in loggers:
        logger.addHandler(handler)
    yield records
    for logger in loggers:
        logger.removeHandler(handler)


@pytest.mark.parametrize("path", BODY_ROUTES)
@pytest.mark.parametrize("authorization", [b"", b"Authorization: Bearer not-a-token\r\n"])
def test_a_body_without_a_good_token_is_answered_401_before_it_is_even_sent(
    tmp_path: Path, store: Store, path: str, authorization: bytes
) -> None:
    # Only the headers of a 7.6 MB body go out: the answer comes without one byte of the body,
    # so the server cannot have read (or parsed) it; the connection is closed, never read on.
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(HUGE)}\r\n"
    with live_server(tmp_path, store) as server, socket.create_connection(("127.0.0.1", server.port), 30) as sock:
        sock.sendall(head.encode() + authorization + b"\r\n")
        status, headers, body = read_answer(sock)
        assert closed_by_server(sock)
    assert status == 401
    assert body["error"]["code"] == "unauthorized"
    assert headers["connection"] == "close"


@pytest.mark.parametrize(
    "body",
    [
        b'{"prompt": "\\ud800 alone"}',
        b"[" * DEEP + b'"\\ud800"' + b"]" * DEEP,
        b'{"a": ' * DEEP + b"1" + b"}" * DEEP,
        b'{"prompt": ',
        b'{"prompt": 5}',
        b'{"prompt": "\xff\xfe"}',
    ],
    ids=["surrogate", "deep-list-with-surrogate", "deep-object", "not-json", "wrong-type", "not-utf-8"],
)
def test_a_bad_body_without_a_token_answers_401_not_its_parse_error(
    tmp_path: Path, store: Store, server_errors: list[logging.LogRecord], body: bytes
) -> None:
    with live_server(tmp_path, store) as server, api(server, None) as client:
        for path in ("/runs", "/batches"):
            response = client.post(path, content=body, headers={"Content-Type": "application/json"})
            assert response.status_code == 401, response.text
            assert response.json()["error"]["code"] == "unauthorized"
    assert server_errors == []


@pytest.mark.parametrize(
    ("path", "body", "status", "says"),
    [
        ("/runs", b"[" * DEEP + b'"\\ud800"' + b"]" * DEEP, 422, "the body nests arrays and objects deeper than 200"),
        ("/batches", b'{"a": ' * DEEP + b"1" + b"}" * DEEP, 422, "the body nests arrays and objects deeper than 200"),
        ("/runs", HUGE, 422, "prompt: the text holds an unpaired surrogate"),
        ("/batches", b'{"type": "explore", "items": [[[{"k": "\\udc00"}]]]}', 422, "items[0][0][0].k: the text"),
        ("/runs", b'{"prompt": ', 422, "the body is not valid JSON"),
        ("/runs", b"", 422, "the body is empty: send a JSON object (see /api/v1/openapi.json)"),
        ("/runs", b'{"prompt": 5}', 422, "prompt: Input should be a valid string"),
        ("/runs", b'["prompt"]', 422, "Input should be a valid dictionary"),
        ("/runs", b"null", 422, "Input should be a valid dictionary"),
        ("/batches", b'{"type": "explore", "items": 3}', 422, "items: Input should be a valid list"),
        ("/batches/batch_x/retry", b'{"key": []}', 422, "key: Input should be a valid string"),
        ("/runs", b'{"prompt": "\xff"}', 400, "the body is not valid UTF-8 (byte 0xff at 12)"),
    ],
)
def test_a_bad_body_with_a_token_answers_a_4xx_json_error_and_logs_no_traceback(
    tmp_path: Path,
    store: Store,
    token: str,
    server_errors: list[logging.LogRecord],
    path: str,
    body: bytes,
    status: int,
    says: str,
) -> None:
    with live_server(tmp_path, store) as server, api(server, token) as client:
        response = client.post(path, content=body, headers={"Content-Type": "application/json"})
        assert response.status_code == status, response.text[:500]
        assert response.headers["content-type"] == "application/json"
        error = response.json()["error"]
        assert error["code"] == ("bad_request" if status == 400 else "invalid_request")
        assert error["message"].startswith(says), error["message"]
        assert client.get("/runs").json()["runs"] == []
    assert server_errors == []


def test_the_bodies_routes_read_after_the_token_are_still_described_in_openapi(tmp_path: Path, store: Store) -> None:
    with live_server(tmp_path, store) as server, api(server, None) as client:
        paths = client.get("/openapi.json").json()["paths"]
    run = paths["/api/v1/runs"]["post"]["requestBody"]
    assert run["required"] is True
    schema = run["content"]["application/json"]["schema"]
    assert {"prompt", "workflow"} <= set(schema["properties"])  # one of the two, checked by the route
    assert "filename" in str(schema["properties"]["uploaded_files"])  # the nested model, inlined
    assert (
        "items"
        in paths["/api/v1/batches"]["post"]["requestBody"]["content"]["application/json"]["schema"]["properties"]
    )
    assert paths["/api/v1/batches/{batch_id}/retry"]["post"]["requestBody"]["required"] is False


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        (b"[" * DEEP + b"]" * DEEP, 422, "the body nests arrays and objects deeper than 200"),
        (b'{"reason": "\\ud800"}', 422, "reason: the text holds an unpaired surrogate"),
        (b'{"reason": 5}', 422, "reason: Input should be a valid string"),
        (b'{"reason": "\xff"}', 400, "the body is not valid UTF-8"),
    ],
    ids=["deep", "surrogate", "wrong-type", "not-utf-8"],
)
def test_a_bad_body_to_stop_a_subagent_answers_a_4xx_json_error_and_logs_no_traceback(
    tmp_path: Path,
    store: Store,
    token: str,
    server_errors: list[logging.LogRecord],
    body: bytes,
    status: int,
    says: str,
) -> None:
    # The stop route read its body by hand, with `json.loads` on the event loop: a deep body was
    # a `RecursionError`, a 500 with a traceback, before the run was even looked up.
    with live_server(tmp_path, store) as server, api(server, token) as client:
        response = client.post("/runs/run_x/agents/sub1/stop", content=body)
        assert response.status_code == status, response.text[:500]
        assert response.headers["content-type"] == "application/json"
        assert response.json()["error"]["message"].startswith(says), response.json()
    assert server_errors == []
