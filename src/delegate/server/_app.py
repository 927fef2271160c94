"""The FastAPI application of `delegate serve`: the HTTP API under `/api/v1` and the web UI at `/`.

`create_app` builds everything from its arguments; nothing lives at module level, so a test (or a
program embedding the server) builds as many independent apps as it likes:

```python
app = create_app(ServerSettings(runtime=RuntimeSettings(workspace="./ws")))   # the store in ./ws/.delegate
fake = ServerSettings(runtime=RuntimeSettings(workspace=ws), model=lambda name: FunctionModel(answer))
app = create_app(fake, store=store)
uvicorn.run(app, host="127.0.0.1", port=8765)
```

Runs started over HTTP are asyncio tasks of the server's event loop, with a `Runtime` whose user is
the caller, working in the caller's own folder `<workspace>/.delegate/users/<user id>/`; batches
are run by a `BatchWorker` in the same process (unless `run_batches=False`, for a server in front
of separate `delegate batch worker` processes). Everything a client reads
back (run results, events, batch counts) comes from the store, so it holds after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import string
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from .._errors import UserError
from .._store import Store, StoreBusyError
from ..agents import Catalogue, CatalogueWarning
from ..eval import Evals
from ..models import LOCAL_FILE_REFUSED, PROVIDERS, Model, ModelAliases, names_a_local_file, resolve_model
from ..run import Runtime, RuntimeFactory, RuntimeSettings, Takeover, flush_traces, open_store
from ..workspace import Home
from ._agents_stop import router as agents_stop_router
from ._approvals import router as approvals_router
from ._auth import ApiError, SafeJSONResponse, TokenWatch, UserId, error_response
from ._batches import BatchService
from ._batches import router as batches_router
from ._calls import router as calls_router
from ._evals import router as evals_router
from ._files import router as files_router
from ._limits import BodyLimit, Limits
from ._memory import router as memory_router
from ._readiness import ModelReadiness
from ._runs import RunManager
from ._runs import router as runs_router
from ._state import AppState, app_state
from ._threads import router as threads_router

_log = logging.getLogger("delegate.server")

__all__ = ["ModelFactory", "ServerSettings", "create_app"]

_HERE = Path(__file__).parent

ModelFactory = Callable[[str | None], Model]
"""Builds the model of a run from the model string the caller asked for (None: the default)."""


@dataclass(kw_only=True, frozen=True)
class ServerSettings:
    """How the server runs agents: the operator's `runtime` settings (each means for the server's
    runs what it means for `delegate run`), and the server's own.

    `model`, when given, builds each run's model from the model string a request names (tests
    give one that builds a fresh fake per run); otherwise a run's model is the one it names, else
    `runtime.model`. `db` is a database URL; the default is the workspace's own store. `limits`
    says what one client may cost the server (see `Limits`); a run's own limits are
    `runtime.limits`, with those its request names.
    """

    runtime: RuntimeSettings = field(default_factory=RuntimeSettings)
    model: ModelFactory | None = None
    db: str | None = None
    run_batches: bool = True
    version: str = ""
    limits: Limits = field(default_factory=Limits)


def create_app(
    settings: ServerSettings | None = None,
    *,
    store: Store | None = None,
    runtime_factory: RuntimeFactory | None = None,
) -> FastAPI:
    """Build the API and the web UI. `store` (kept open; the caller closes it) overrides
    `settings.db`; `runtime_factory` (default: `settings.runtime.factory`) builds each run's
    runtime, and must record into that store.

    Raises `UserError` for a bad database URL or workspace, before anything listens.
    """
    settings = settings or ServerSettings()
    workspace = Path(settings.runtime.workspace).expanduser().resolve()
    if not workspace.is_dir():
        raise UserError(f"workspace {str(settings.runtime.workspace)!r} is not a folder: create it or give another")
    owns_store = store is None
    if store is None:
        store = open_store(settings.db, workspace)
    operator = replace(settings.runtime, workspace=workspace)
    runtime_for = runtime_factory or _default_runtime_factory(settings.model, operator, store)

    logged: set[CatalogueWarning] = set()

    def catalogue(user_id: str | None = None) -> Catalogue:
        """A user's catalogue: the operator's definitions, shadowed by the user's own, with the
        warnings of the definition and skill files read; each new warning also goes to the server
        log, once."""
        found = operator.catalogue(user_id)
        for warning in set(found.warnings) - logged:
            _log.warning("catalogue: %s", warning)
            logged.add(warning)
        return found

    tokens = TokenWatch(store)
    default_model = settings.model or operator.model
    readiness = ModelReadiness(default_model)
    runs = RunManager(store, runtime_for, limits=settings.limits, ready=readiness.check)

    def usable_types(user_id: str) -> list[str]:
        return catalogue(user_id).visible(allow_commands=operator.allow_commands).names()

    batches = BatchService(
        store,
        runtime_for=runtime_for,
        home_for=lambda user_id: Home.of(operator.workspace_view(user_id).root),
        known_types=usable_types,
        check_model=_model_checker(default_model, ModelAliases.load(operator.root, operator.extensions.model_aliases)),
        max_prompt_chars=settings.limits.max_prompt_chars,
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncGenerator[None]:
        if settings.run_batches:
            await batches.start_worker()
        takeover = asyncio.create_task(state.takeover.watch(), name="delegate-run-takeover")
        revocations = asyncio.create_task(tokens.watch(), name="delegate-token-watch")
        try:
            yield
        finally:
            revocations.cancel()
            takeover.cancel()
            await runs.close()
            await batches.stop_worker()
            if owns_store:
                store.close()
            await asyncio.to_thread(flush_traces)  # the spans of the last runs, before the server exits

    app = FastAPI(
        title="delegate",
        version=settings.version or "0",
        lifespan=lifespan,
        docs_url=None,  # Swagger UI would load its script from a CDN; the schema is enough
        redoc_url=None,
        openapi_url="/api/v1/openapi.json",
        default_response_class=SafeJSONResponse,
    )
    app.state.delegate = state = AppState(  # read by the routes' dependencies: nothing is shared between apps
        store=store,
        runs=runs,
        takeover=Takeover(store, runs),
        batches=batches,
        tokens=tokens,
        catalogue=catalogue,
        skills=operator.skills,
        workspace_for=operator.workspace_view,
        allow_commands=operator.allow_commands,
        limits=settings.limits,
        run_limits=operator.limits,
        evals=Evals(store),
    )
    app.add_middleware(BodyLimit, limits=settings.limits)  # caps a body as a route reads it, after auth
    _error_handlers(app)
    app.include_router(runs_router)
    app.include_router(agents_stop_router)
    app.include_router(calls_router)
    app.include_router(approvals_router)
    app.include_router(agents_router)
    app.include_router(batches_router)
    app.include_router(files_router)
    app.include_router(threads_router)
    app.include_router(evals_router)
    app.include_router(memory_router)
    page = string.Template((_HERE / "templates" / "index.html").read_text(encoding="utf-8"))
    html = page.substitute(version=settings.version or "0")

    @app.get("/", include_in_schema=False)
    async def index() -> HTMLResponse:
        """The web UI: one page, its script and stylesheet served from /static."""
        return HTMLResponse(html, headers=_PAGE_HEADERS)

    app.mount("/static", StaticFiles(directory=_HERE / "static"), name="static")
    return app


agents_router = APIRouter(prefix="/api/v1", tags=["agents"])


@agents_router.get("/agents")
async def agents(request: Request, user_id: UserId) -> dict[str, Any]:
    """The caller's subagent catalogue: built-in types, the operator's definitions, and the
    caller's own (in its workspace), which shadow them by name.

    `available` is false for types that run shell commands when the server does not allow them.
    `warnings` name the definition and skill files skipped or read with problems (`file` relative
    to the folder it came from, `line` when known, `reason`).
    """
    state = app_state(request.app)
    build, allow_commands = state.catalogue, state.allow_commands
    found = await asyncio.to_thread(build, user_id)
    return {
        "agents": [
            d.to_dict() | {"available": allow_commands or not d.requires_commands} for d in found.definitions.values()
        ],
        "warnings": [w.to_dict() for w in found.warnings],
    }


_PAGE_HEADERS = {
    # Nothing but our own files: no inline script, no CDN, no third-party request of any kind.
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def _model_checker(default: str | Model | ModelFactory | None, aliases: ModelAliases) -> Callable[[str], None]:
    """A check that raises `UserError` unless a model string names a model this server can build
    (an alias such as `sonnet` counts as the model it stands for, as in definitions)."""

    def check(spec: str) -> None:
        if callable(default) and not isinstance(default, Model):
            default(spec)
            return
        with contextlib.suppress(UserError):  # not an alias: the checks below say what is wrong
            spec = aliases.resolve(spec)[0]
        provider, _, name = spec.partition(":")
        if names_a_local_file(spec):  # a file of the server's: not for an HTTP user to name
            raise UserError(LOCAL_FILE_REFUSED)
        if not (provider in PROVIDERS and (name or provider == "local")):
            resolve_model(spec)  # raises the error that says what to fix; a good spec builds no client

    return check


def _default_runtime_factory(model: ModelFactory | None, operator: RuntimeSettings, store: Store) -> RuntimeFactory:
    """`operator.factory(store)`, its models built by `model` when the settings give a factory."""
    if model is None:
        return operator.factory(store)

    def build(user_id: str | None, name: str | None) -> Runtime:
        return operator.build(user_id=user_id, model=model(name), store=store)

    return build


def _error_handlers(app: FastAPI) -> None:
    """Every failure answers `{"error": {"code", "message"}}`, the message saying what to fix."""
    from ..batch import BatchNotFoundError, BatchStateError, BatchValidationError

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message, retry_after=exc.retry_after, **exc.extra)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [_problem(e) for e in exc.errors()]
        return error_response(422, "invalid_request", "; ".join(problems), problems=problems)

    @app.exception_handler(StoreBusyError)
    async def store_busy(_: Request, exc: StoreBusyError) -> JSONResponse:
        return error_response(503, "store_busy", str(exc), retry_after=exc.retry_after)

    @app.exception_handler(Exception)
    async def crashed(_: Request, exc: Exception) -> JSONResponse:
        # uvicorn logs it with its traceback; the client gets the API's JSON error, never plain text.
        del exc
        message = "the server failed on this request; it is logged, try again or tell the operator"
        return error_response(500, "internal_error", message)

    @app.exception_handler(UserError)
    async def user_error(_: Request, exc: UserError) -> JSONResponse:
        if isinstance(exc, BatchNotFoundError):
            return error_response(404, "not_found", str(exc))
        if isinstance(exc, BatchStateError):
            return error_response(409, "conflict", str(exc))
        if isinstance(exc, BatchValidationError):
            return error_response(422, "invalid_batch", str(exc), problems=exc.problems)
        return error_response(400, "bad_request", str(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        message = str(exc.detail)
        if exc.status_code == 404:
            message = "no such endpoint: the API is described at /api/v1/openapi.json"
        return error_response(exc.status_code, code, message)


def _problem(error: Any) -> str:
    """One validation error as `where: what`, e.g. `prompt: Field required` or `limit: ...`."""
    loc = [str(part) for part in error.get("loc", ())]
    if loc and loc[0] in ("body", "query", "path", "header"):  # where it was; a field may be named `path`
        loc = loc[1:]
    message = str(error.get("msg", "invalid"))
    if error.get("type") == "json_invalid":
        return f"the body is not valid JSON ({error.get('ctx', {}).get('error', 'parse error')})"
    message = message.removeprefix("Value error, ")
    return f"{'.'.join(loc)}: {message}" if loc else message
