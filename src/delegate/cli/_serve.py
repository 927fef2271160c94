"""`delegate serve`: the HTTP API and the web UI, on one port.

FastAPI and uvicorn are imported only when the command runs, so `delegate --help` stays fast.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path
from typing import Annotated

import typer

from ._common import (
    MaxDepth,
    OperatorFlags,
    StallTimeout,
    checked_workspace,
    default_model,
    fail,
    operator_flags,
    stall_seconds,
    store_option,
    tune_collector,
)


def register(app: typer.Typer) -> None:
    """Add the `serve` command to the `delegate` app."""
    app.command()(serve)


@operator_flags
def serve(
    host: Annotated[str, typer.Option("--host", help="The address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="The port to listen on.")] = 8765,
    workspace: Annotated[
        Path, typer.Option("--workspace", "-w", help="The workspace folder (default: the current folder).")
    ] = Path("."),
    db: Annotated[
        str | None,
        typer.Option("--db", help="Database URL (default: DELEGATE_DB, else SQLite in <workspace>/.delegate/)."),
    ] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Default model of runs, provider:name.")] = None,
    worker: Annotated[
        bool,
        typer.Option(
            "--worker/--no-worker",
            help="Run batch items in this process (--no-worker: leave them to `delegate batch worker`).",
        ),
    ] = True,
    max_body_mb: Annotated[
        float, typer.Option("--max-body-mb", min=0.001, help="The largest request body, in MB (413 past it).")
    ] = 8.0,
    header_timeout: Annotated[
        float, typer.Option("--header-timeout", min=0.1, help="Seconds a client has to send a request's headers.")
    ] = 10.0,
    idle_timeout: Annotated[
        float,
        typer.Option("--idle-timeout", min=0.1, help="Seconds a request body may stall (408) or a connection idle."),
    ] = 15.0,
    max_prompt_chars: Annotated[
        int, typer.Option("--max-prompt-chars", min=1, help="The longest prompt of a run or batch item (422).")
    ] = 200_000,
    max_live_runs: Annotated[
        int, typer.Option("--max-live-runs", min=1, help="Runs one user may have going at once (429 past it).")
    ] = 8,
    approval_timeout: Annotated[
        float | None,
        typer.Option(
            "--approval-timeout",
            min=0.001,
            help="Seconds a call under an --ask rule waits for a decision before it is denied (default: no limit; "
            "a run may ask for its own).",
        ),
    ] = None,
    stall_timeout: StallTimeout = None,
    max_depth: MaxDepth = None,
    *,
    flags: OperatorFlags,
) -> None:
    """Serve the HTTP API (/api/v1) and the web UI (/). Users sign in with `delegate users add` tokens.

    Each user works in a folder of its own, <workspace>/.delegate/users/<user id>/ (docs/http.md).
    """
    flags.embedded_only("serve")
    from .._config import DEFAULT_STALL_TIMEOUT, RunLimits
    from .._errors import UserError, require_extra

    require_extra("fastapi", "serve", "delegate serve")
    require_extra("uvicorn", "serve", "delegate serve")
    checked_workspace(workspace, create=True)
    chosen = default_model(model, what="runs that name no model")
    sock = _bind(host, port)
    limits = RunLimits(
        approval_timeout=approval_timeout,
        stall_timeout=stall_seconds(stall_timeout, DEFAULT_STALL_TIMEOUT),
        max_depth=max_depth or 1,
    )
    try:
        import uvicorn

        from ..server import Limits, ServerSettings, create_app, uvicorn_config

        settings = ServerSettings(
            runtime=flags.settings(workspace, model=model, limits=limits),
            db=store_option(db),
            run_batches=worker,
            version=_version(),
            limits=Limits(
                max_body_bytes=round(max_body_mb * 1024 * 1024),
                header_timeout=header_timeout,
                idle_timeout=idle_timeout,
                max_prompt_chars=max_prompt_chars,
                max_live_runs_per_user=max_live_runs,
            ),
        )
        app = create_app(settings)
    except UserError as exc:
        sock.close()
        fail(str(exc))
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    typer.echo(f"delegate serving {workspace.resolve()} at http://{shown}:{bound_port}/  (Ctrl+C stops)", err=True)
    if model is None:
        from ..models import default_model_spec

        default = chosen or os.environ.get("DELEGATE_MODEL") or default_model_spec()
        typer.echo(f"Runs use {default} unless a request names a model.", err=True)
    typer.echo("Sign in with a token from `delegate users add NAME`.", err=True)
    config = uvicorn_config(app, timeout_graceful_shutdown=5)
    tune_collector()
    with contextlib.suppress(KeyboardInterrupt):  # uvicorn re-raises Ctrl+C once it has shut down
        uvicorn.Server(config).run(sockets=[sock])


def _bind(host: str, port: int) -> socket.socket:
    """Take the port (and listen on it) before anything else starts, so a busy port is a clear usage
    error (exit 2)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        fail(f"cannot listen on {host!r}: {exc.strerror}; pass an address such as 127.0.0.1 with --host")
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        # Listening from here, so a client that connects as soon as the address is printed waits in
        # the backlog until uvicorn accepts, instead of being refused.
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        fail(f"cannot listen on {host}:{port} ({exc.strerror}): pass another --port, or stop what uses it")
    sock.set_inheritable(True)
    return sock


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("delegate")
    except PackageNotFoundError:
        return "0"
