"""`delegate serve` as a user starts it: a real process on a loopback port; and the lazy imports."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2

from delegate import Store

# The `serve` command on a typer app of its own, as `delegate` registers it.
SERVE = (
    "import typer\n"
    "from delegate.cli._serve import register\n"
    "app = typer.Typer()\n"
    "app.callback()(lambda: None)\n"
    "register(app)\n"
    "app()\n"
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "DELEGATE_MODEL": "local"}  # named: its stdout is no terminal
    env.pop("DELEGATE_DB", None)
    return subprocess.Popen(
        [sys.executable, "-c", SERVE, "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def wait_until_up(url: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"serve exited early: {process.communicate()}")
        try:
            httpx2.get(url, timeout=10)
            return
        except httpx2.TransportError:
            time.sleep(0.1)
    raise AssertionError("serve did not answer within 60 s")


def test_importing_delegate_and_its_help_never_import_the_web_stack() -> None:
    check = (
        "import sys, delegate, delegate.cli._main, delegate.cli._serve\n"
        "heavy = sorted(m for m in ('fastapi', 'uvicorn', 'starlette', 'delegate.server') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", check], check=True)
    helped = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", SERVE, "serve", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "--port" in helped.stdout and "--workspace" in helped.stdout
    imported = {line.split("|")[-1].strip() for line in helped.stderr.splitlines()}
    assert not {"fastapi", "uvicorn", "starlette"} & imported


def test_serve_answers_on_its_port_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    with Store.for_workspace(tmp_path) as store:
        _, token = store.add_user("alice")
    port = free_port()
    process = serve("--port", str(port), "--workspace", str(tmp_path), "--no-worker")
    try:
        wait_until_up(f"http://127.0.0.1:{port}/", process)
        page = httpx2.get(f"http://127.0.0.1:{port}/", timeout=60)
        runs = httpx2.get(
            f"http://127.0.0.1:{port}/api/v1/runs", headers={"Authorization": f"Bearer {token}"}, timeout=60
        )
        refused = httpx2.get(f"http://127.0.0.1:{port}/api/v1/runs", timeout=60)
    finally:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    assert page.status_code == 200 and "<title>delegate</title>" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert runs.json() == {"runs": [], "offset": 0}
    assert refused.status_code == 401
    assert f"http://127.0.0.1:{port}/" in stderr
    assert process.returncode == 0


def test_serve_answers_a_client_that_connects_as_soon_as_it_prints_its_address(tmp_path: Path) -> None:
    """The address is printed once the port listens: a client that connects at once is answered
    (when the app is ready), never refused."""
    process = serve("--port", "0", "--workspace", str(tmp_path), "--no-worker")
    try:
        assert process.stderr is not None
        line = ""
        while " at http://" not in line:
            line = process.stderr.readline()
            assert line, "serve exited without printing its address"
        url = line.split(" at ")[1].split()[0]
        process.send_signal(signal.SIGSTOP)  # held where it printed the address, before the app started
        try:
            host, port = url.removeprefix("http://").rstrip("/").split(":")
            with socket.create_connection((host, int(port)), timeout=60):
                pass  # accepted by the kernel: the port listens already
        finally:
            process.send_signal(signal.SIGCONT)
        page = httpx2.get(url, timeout=60)  # no retry: the first request gets through
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
    assert page.status_code == 200 and "<title>delegate</title>" in page.text
    assert process.returncode == 0


def test_serve_on_a_busy_port_or_a_missing_workspace_is_a_usage_error(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        taken = serve("--port", str(port), "--workspace", str(tmp_path), "--no-worker")
        _, stderr = taken.communicate(timeout=30)
    assert taken.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in stderr and "--port" in stderr

    (tmp_path / "a-file").write_text("")
    missing = serve("--workspace", str(tmp_path / "a-file"))  # a missing folder is made; a file is refused
    _, stderr = missing.communicate(timeout=30)
    assert missing.returncode == 2
    assert "is not a folder" in stderr

    bad_db = serve("--workspace", str(tmp_path), "--db", "mysql://x/y", "--port", str(free_port()))
    _, stderr = bad_db.communicate(timeout=30)
    assert bad_db.returncode == 2
    assert "unsupported database" in stderr
