"""What one HTTP client may cost `delegate serve`: body size, slow clients, prompt length, live runs.

Each finding of issue 9 reproduced against the real server (uvicorn on loopback, a real SQLite
store): a 300 MB unauthenticated body used to be parsed before the token was checked; slow clients
were never timed out; nothing capped prompts or a user's live runs.
"""

from __future__ import annotations

import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from delegate import RunLimits, Store, UserError
from delegate.server import Limits
from tests.security.server_support import Gate, api, closed_by_server, live_server, raw_request, read_answer
from tests.test_server_cli import free_port, serve, wait_until_up


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.for_workspace(tmp_path) as opened:
        yield opened


@pytest.fixture
def token(store: Store) -> str:
    return store.add_user("alice")[1]


def test_a_300_mb_body_without_a_token_is_refused_413_before_it_is_read(tmp_path: Path, store: Store) -> None:
    with live_server(tmp_path, store) as server:
        # Only the headers go out: the server answers without waiting for (or reading) the body.
        head = b"POST /api/v1/runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        status, headers, body = raw_request(server, head + b"Content-Length: 314572800\r\n\r\n")
    assert status == 413
    assert body["error"]["code"] == "body_too_large"
    assert "8 MB" in body["error"]["message"]
    assert headers["content-type"] == "application/json"


def test_a_streamed_body_is_refused_413_as_soon_as_it_passes_the_cap(tmp_path: Path, store: Store, token: str) -> None:
    sent: list[int] = []

    def chunks() -> Iterator[bytes]:
        for _ in range(64):  # 64 MB, if the server read it all
            sent.append(1)
            yield b"x" * (1 << 20)

    with live_server(tmp_path, store, limits=Limits(max_body_bytes=2 << 20)) as server, api(server, token) as client:
        response = client.post("/runs", content=chunks(), headers={"Content-Type": "application/json"})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "body_too_large"
    assert "2 MB" in response.json()["error"]["message"]
    assert len(sent) < 64


def test_a_body_under_the_cap_reaches_the_route_as_before(tmp_path: Path, store: Store, token: str) -> None:
    with live_server(tmp_path, store, limits=Limits(max_body_bytes=4096)) as server, api(server, token) as client:
        response = client.post("/runs", json={"prompt": "x" * 3000})
        assert response.status_code == 202, response.text
        run_id = response.json()["run_id"]
        assert client.get(f"/runs/{run_id}").json()["prompt"] == "x" * 3000


def test_a_client_that_never_finishes_its_headers_is_disconnected(tmp_path: Path, store: Store) -> None:
    with live_server(tmp_path, store, limits=Limits(header_timeout=0.5)) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(b"GET /api/v1/runs HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            assert closed_by_server(sock)
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            assert closed_by_server(sock)  # one that connects and says nothing, too


def test_after_an_answer_the_next_requests_headers_have_a_deadline_too(
    tmp_path: Path, store: Store, token: str
) -> None:
    limits = Limits(header_timeout=0.5, idle_timeout=60)
    with (
        live_server(tmp_path, store, limits=limits) as server,
        socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock,
    ):
        sock.sendall(f"GET /api/v1/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
        status, _, body = read_answer(sock)
        assert (status, body["runs"]) == (200, [])
        sock.sendall(b"GET /api/v1/runs HTTP/1.1\r\nHost: x\r\n")  # and then nothing more
        assert closed_by_server(sock)


def test_headers_past_16_kb_are_refused_and_the_connection_closed(tmp_path: Path, store: Store, token: str) -> None:
    def head(filler: int) -> bytes:
        lines = b"".join(b"X-Filler-%d: %s\r\n" % (n, b"a" * 1000) for n in range(filler))
        return b"GET /api/v1/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n%s\r\n" % (token.encode(), lines)

    def refused(sock: socket.socket) -> bytes:
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer  # the server closed the connection after it

    with live_server(tmp_path, store) as server:
        for sent in (head(20), head(20)[:-2]):  # 20 KB of headers on a new connection, ended or still coming
            with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
                sock.sendall(sent)
                assert refused(sock).startswith(b"HTTP/1.1 400 ")
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(head(12))  # 12 KB pass, and on the same connection 20 KB are refused
            status, _, body = read_answer(sock)
            assert (status, body["runs"]) == (200, [])
            sock.sendall(head(20))
            assert refused(sock).startswith(b"HTTP/1.1 400 ")


def test_a_body_that_stalls_answers_408(tmp_path: Path, store: Store, token: str) -> None:
    with live_server(tmp_path, store, limits=Limits(idle_timeout=0.5)) as server:
        head = (
            b"POST /api/v1/runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n"
            b"Authorization: Bearer " + token.encode() + b"\r\n\r\n"
        )
        status, _, body = raw_request(server, head + b'{"prompt": ')
    assert status == 408
    assert body["error"]["code"] == "request_timeout"


def test_a_prompt_past_the_limit_answers_422_and_stores_nothing(tmp_path: Path, store: Store, token: str) -> None:
    with live_server(tmp_path, store, limits=Limits(max_prompt_chars=1000)) as server, api(server, token) as client:
        response = client.post("/runs", json={"prompt": "y" * 1001})
        assert response.status_code == 422
        assert response.json()["error"]["code"] == "invalid_request"
        assert "1,001 characters" in response.json()["error"]["message"]
        item = {"key": "a", "prompt": "y" * 1001}
        batch = client.post("/batches", json={"subagent_type": "general-purpose", "items": [item]})
        assert batch.status_code == 422
        assert "items[0].prompt" in batch.json()["error"]["message"]
        assert client.get("/runs").json()["runs"] == []
        assert client.get("/batches").json()["batches"] == []


def test_a_user_past_the_live_run_cap_gets_429_while_others_still_start(tmp_path: Path, store: Store) -> None:
    alice, bob = store.add_user("alice")[1], store.add_user("bob")[1]
    gate = Gate()
    limits = Limits(max_live_runs_per_user=2)
    with live_server(tmp_path, store, limits=limits, gate=gate) as server:
        with api(server, alice) as client:
            started = [client.post("/runs", json={"prompt": f"run {n}"}) for n in range(2)]
            assert [r.status_code for r in started] == [202, 202]
            refused = client.post("/runs", json={"prompt": "one more"})
            assert refused.status_code == 429
            assert refused.json()["error"]["code"] == "too_many_runs"
            assert refused.headers["retry-after"].isdigit()
        with api(server, bob) as client:
            assert client.post("/runs", json={"prompt": "bob's own"}).status_code == 202
        gate.release()
        with api(server, alice) as client:
            for response in started:
                events = client.get(f"/runs/{response.json()['run_id']}/events").text  # ends with the run
                assert "event: run.completed" in events
            assert client.post("/runs", json={"prompt": "room again"}).status_code == 202


@pytest.mark.parametrize(
    ("path", "where"),
    [
        ("/runs?offset=99999999999999999999999", "offset"),
        ("/runs/x/events?after=99999999999999999999", "after"),
        ("/batches?offset=99999999999999999999", "offset"),
        ("/batches/x/items?offset=99999999999999999999", "offset"),
        ("/runs?limit=1e3", "limit"),
    ],
)
def test_out_of_range_query_numbers_answer_422_saying_which(
    tmp_path: Path, store: Store, token: str, path: str, where: str
) -> None:
    with live_server(tmp_path, store) as server, api(server, token) as client:
        response = client.get(path)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_request"
    assert response.json()["error"]["message"].startswith(f"{where}:")


@pytest.mark.parametrize(
    ("path", "body", "status", "where"),
    [
        ("/runs", b'{"prompt": "\\ud800 alone"}', 422, "prompt"),
        ("/batches", b'{"type": "explore", "items": [{"key": "\\udfff", "prompt": "x"}]}', 422, "items[0].key"),
        ("/batches", b'{"type": "explore", "title": "\\ud83d", "items": []}', 422, "title"),
        ("/runs", b'{"prompt": "\xff\xfe"}', 400, "the body is not valid UTF-8"),
    ],
)
def test_text_that_is_not_unicode_answers_a_json_error_not_a_crash(
    tmp_path: Path, store: Store, token: str, path: str, body: bytes, status: int, where: str
) -> None:
    with live_server(tmp_path, store) as server, api(server, token) as client:
        response = client.post(path, content=body, headers={"Content-Type": "application/json"})
        assert response.status_code == status, response.text
        assert response.json()["error"]["message"].startswith(where)
        assert client.get("/runs").json()["runs"] == []
        pair = b'{"prompt": "\\ud83d\\ude00 a pair is fine"}'
        emoji = client.post("/runs", content=pair, headers={"Content-Type": "application/json"})
        assert emoji.status_code == 202, emoji.text


def test_a_token_with_bytes_past_ascii_is_unknown_not_a_crash(tmp_path: Path, store: Store) -> None:
    with live_server(tmp_path, store) as server:
        request = b"GET /api/v1/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xe9\xff\r\n\r\n"
        status, _, body = raw_request(server, request)
    assert status == 401
    assert body["error"]["code"] == "unauthorized"


def test_a_damaged_row_answers_the_json_500_not_plain_text(tmp_path: Path, store: Store, token: str) -> None:
    with live_server(tmp_path, store) as server, api(server, token) as client:
        run_id = client.post("/runs", json={"prompt": "hello"}).json()["run_id"]
        client.get(f"/runs/{run_id}/events")  # to its end
        with store.write() as conn:
            conn.exec_driver_sql("UPDATE runs SET usage = 'not json'")
        response = client.get("/runs")
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["code"] == "internal_error"


def test_limits_that_make_no_sense_are_refused() -> None:
    with pytest.raises(UserError, match="max_body_bytes must be at least 1"):
        Limits(max_body_bytes=0)
    with pytest.raises(UserError, match="header_timeout must be a positive"):
        Limits(header_timeout=0)


def test_streams_of_other_clients_are_unaffected_by_a_refused_body(tmp_path: Path, store: Store, token: str) -> None:
    with live_server(tmp_path, store, limits=Limits(max_body_bytes=1024)) as server, api(server, token) as client:
        assert client.post("/runs", content=b"x" * 2048).status_code == 413
        assert client.get("/runs").status_code == 200


def test_the_limits_are_flags_of_delegate_serve(tmp_path: Path, token: str) -> None:
    port = free_port()
    flags = ["--max-body-mb", "0.01", "--max-prompt-chars", "50", "--max-live-runs", "1", "--header-timeout", "0.5"]
    process = serve("--port", str(port), "--workspace", str(tmp_path), "--no-worker", "--model", "openai:x", *flags)
    try:
        wait_until_up(f"http://127.0.0.1:{port}/", process)
        url = f"http://127.0.0.1:{port}/api/v1/runs"
        headers = {"Authorization": f"Bearer {token}"}
        too_large = httpx2.post(url, content=b"x" * 20_000, headers=headers, timeout=60)
        too_long = httpx2.post(url, json={"prompt": "z" * 51}, headers=headers, timeout=60)
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\n")
            hung_up = closed_by_server(sock)
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
    assert too_large.status_code == 413
    assert "0.01 MB" not in too_large.json()["error"]["message"]  # said in bytes below 1 MB
    assert "10486 bytes" in too_large.json()["error"]["message"]
    assert too_long.status_code == 422
    assert hung_up


def test_a_limit_that_makes_no_sense_is_a_usage_error(tmp_path: Path) -> None:
    process = serve("--workspace", str(tmp_path), "--max-live-runs", "0")
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 2
    assert "--max-live-runs" in stderr


def test_a_last_event_id_of_digits_past_ascii_resumes_from_the_start_not_a_crash(
    tmp_path: Path, store: Store, token: str
) -> None:
    # `"\xb2".isdigit()` (superscript two) is true and `int("\xb2")` raises: an event stream
    # asked for with `Last-Event-ID: \xb2` was a 500 with a traceback.
    with live_server(tmp_path, store) as server, api(server, token) as client:
        run_id = client.post("/runs", json={"prompt": "hello"}).json()["run_id"]
        whole = client.get(f"/runs/{run_id}/events").text  # to its end
        request = (
            f"GET /api/v1/runs/{run_id}/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n".encode()
            + b"Last-Event-ID: \xb2\r\nConnection: close\r\n\r\n"
        )
        with socket.create_connection(("127.0.0.1", server.port), 30) as sock:
            sock.sendall(request)
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
    assert b"run.completed" in answer and "run.completed" in whole


def test_a_request_may_lower_the_operators_run_limits_but_never_raise_them(
    tmp_path: Path, store: Store, token: str
) -> None:
    # The operator's `RunLimits` were defaults a request replaced: `{"cost_budget": 1e9}` lifted
    # the operator's dollar cap, `{"max_parallel": 1000}` its 4 subagents at once.
    operator = RunLimits(cost_budget=0.5, token_budget=10_000, max_requests=5, max_parallel=4)
    asked = {"cost_budget": 1e9, "token_budget": 10**12, "max_requests": 10**9, "max_parallel": 1000}
    lower = {"cost_budget": 0.1, "token_budget": 100, "max_requests": 2, "max_parallel": 2}
    with live_server(tmp_path, store, run_limits=operator) as server, api(server, token) as client:
        raised = client.post("/runs", json={"prompt": "hello", **asked}).json()["run_id"]
        lowered = client.post("/runs", json={"prompt": "hello", **lower}).json()["run_id"]
        kept = {name: getattr(operator, name) for name in asked}
        for run_id, expected in ((raised, kept), (lowered, lower)):
            client.get(f"/runs/{run_id}/events")  # to its end
            limits = store.get_run(run_id).limits  # type: ignore[union-attr]
            assert limits is not None
            assert {name: limits[name] for name in asked} == expected
