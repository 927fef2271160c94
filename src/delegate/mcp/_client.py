"""Tools served by MCP servers, given to agents like any other `Tool`.

```python
servers = MCPTools([
    MCPServerConfig("github", command=["github-mcp-server", "stdio"], env={"GITHUB_TOKEN": token}),
    MCPServerConfig("docs", url="http://127.0.0.1:8000/mcp"),
])
tools = await servers.load()    # mcp__github__create_issue, mcp__docs__search, ... (servers.failed: those left out)
rt = Runtime(model=..., tools=tools)
...
await servers.aclose()
```

Each MCP tool becomes `mcp__<server>__<tool>` (Claude Code's names), with the server's description
and input schema; the server validates the arguments. A call's content comes back as text, and a
result the server marks as an error raises `ToolError`, which the model reads.

A session to a server stays open between calls, and one session serves concurrent calls. Sessions
belong to the event loop that opened them (anyio task groups cannot move between loops), so there
is one set per running loop: tools loaded under one `asyncio.run` and called under another open
their own sessions there. Each session is opened, held and closed by one background task of its
loop, so `aclose` may be called from any task of that loop; a loop that shuts down without
`aclose` cancels those tasks, and that closes the sessions too (a stdio server is stopped).

`mcp` is imported when a session opens, never when this module is imported.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import importlib
import json
import logging
import re
import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterable
from contextlib import AsyncExitStack
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast

from .._errors import ToolError, UserError
from ..models import Progress, watched
from ..tools import Tool, ToolContext, ToolReturn
from ..workspace import state_hidden_argv

if TYPE_CHECKING:
    from mcp import Client
    from mcp.client._transport import Transport
    from mcp.shared.dispatcher import ProgressFnT
    from mcp_types import CallToolResult, ContentBlock
    from mcp_types import Tool as RemoteTool

__all__ = ["MCPServerConfig", "MCPTools", "mcp_tool_name"]

logger = logging.getLogger("delegate.mcp")

MAX_TOOL_NAME = 64
"""The longest tool name the providers accept (OpenAI and Anthropic: `^[a-zA-Z0-9_-]{1,64}$`)."""

MAX_PAGES = 1000
"""A server whose tool listing has more pages than this is assumed to be paging in circles."""

_SERVER_NAME = re.compile(r"[A-Za-z0-9_-]+")
_NOT_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_STDERR_TAIL = 2000


@dataclass(frozen=True)
class MCPServerConfig:
    """An MCP server: started by `command` and spoken to over stdio, or reached at `url` over
    streamable HTTP. Give exactly one of the two.

    `env` is added to the small environment mcp passes a stdio server (PATH, HOME, USER, SHELL,
    TERM, LOGNAME), so secrets are passed on purpose; `cwd` is where the command runs. `headers`
    go with every HTTP request (an `Authorization` token, say). `connect_timeout` bounds how long
    a server may take to start and answer the handshake.
    """

    name: str
    _: KW_ONLY
    command: list[str] | None = None
    url: str | None = None
    env: dict[str, str] | None = None
    cwd: str | Path | None = None
    headers: dict[str, str] | None = None
    connect_timeout: float = 30.0

    def __post_init__(self) -> None:
        _check_name(self.name)
        where = f"MCP server {self.name!r}"
        if self.command is not None and self.url is not None:
            raise UserError(
                f"{where} has both a command and a url; give `command` to start a local server "
                "over stdio, or `url` to reach a running one over streamable HTTP, not both"
            )
        if self.command is None and self.url is None:
            raise UserError(
                f"{where} needs `command` (a local server started over stdio, such as "
                "['npx', '-y', '@modelcontextprotocol/server-everything']) or `url` (a server's streamable "
                "HTTP endpoint, such as 'http://127.0.0.1:8000/mcp')"
            )
        if self.command is not None:
            _check_command(where, self.command)
            _check_strings(where, "env", self.env)
            if self.headers is not None:
                raise UserError(f"{where}: `headers` are sent to a url, but this server is started by a command")
        else:
            _check_url(where, self.url)
            _check_strings(where, "headers", self.headers)
            if self.env is not None or self.cwd is not None:
                raise UserError(
                    f"{where}: `env` and `cwd` apply to a server started by a command, not to one reached "
                    "at a url; remove them, or start the server with `command`"
                )
        if not self.connect_timeout > 0:
            raise UserError(f"{where}: connect_timeout must be a positive number of seconds")


def _check_name(name: object) -> None:
    if isinstance(name, str) and _SERVER_NAME.fullmatch(name):
        return
    suggestion = _NOT_NAME_CHARS.sub("_", str(name)).strip("_") or "server"
    raise UserError(
        f"MCP server name {name!r} may hold only letters, digits, '-' and '_' (it becomes part of "
        f"tool names such as mcp__{suggestion}__search); use a name such as {suggestion!r}"
    )


def _check_command(where: str, command: object) -> None:
    if isinstance(command, str):
        raise UserError(
            f"{where}: command must be a list of strings (the program and its arguments), "
            f"such as {shlex.split(command)!r}, not one string"
        )
    if not isinstance(command, list) or not command:
        raise UserError(f"{where}: command must be a non-empty list: the program, then its arguments")
    items: list[object] = list(command)  # pyright: ignore[reportUnknownArgumentType]
    if not all(isinstance(item, str) for item in items) or not items[0]:
        raise UserError(f"{where}: command must be a list of strings, starting with the program to run")


def _check_url(where: str, url: object) -> None:
    if not isinstance(url, str) or not re.match(r"https?://[^/\s]+", url):
        raise UserError(
            f"{where}: url {url!r} is not an http:// or https:// URL; give the server's streamable "
            "HTTP endpoint, such as 'http://127.0.0.1:8000/mcp'"
        )


def _check_strings(where: str, field: str, value: object) -> None:
    if value is None:
        return
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str)
        for k, v in value.items()  # pyright: ignore[reportUnknownVariableType]
    ):
        raise UserError(f"{where}: `{field}` must map strings to strings")


def mcp_tool_name(server: str, tool: str) -> str:
    """The name an agent sees for `tool` of `server`: `mcp__<server>__<tool>`.

    A tool name with characters the providers refuse, or too long, gets them replaced and a
    short hash of the real name added, so two tools of one server never share a name.
    """
    name = f"mcp__{server}__{tool}"
    clean = _NOT_NAME_CHARS.sub("_", name)
    if clean == name and len(name) <= MAX_TOOL_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{clean[: MAX_TOOL_NAME - 9]}_{digest}"


class MCPTools:
    """The tools of some MCP servers. `load()` connects and lists them (leaving out, in `failed`,
    those that cannot be used); `aclose()` disconnects."""

    def __init__(self, servers: Iterable[MCPServerConfig], *, workspaces: Iterable[Path] = ()) -> None:
        self.servers = list(servers)
        self.workspaces = [Path(w).resolve() for w in workspaces]
        """Folders whose `.delegate/` no server may be given (see `exposed_state`): a server whose
        command line or `cwd` names one of them is not started, and `load` reports it failed."""
        seen: set[str] = set()
        for server in self.servers:
            if not isinstance(server, MCPServerConfig):  # pyright: ignore[reportUnnecessaryIsInstance]
                raise UserError(f"MCPTools takes MCPServerConfig objects, not {type(server).__name__}")
            if server.name in seen:
                raise UserError(f"two MCP servers are named {server.name!r}; give each server its own name")
            seen.add(server.name)
        self._connections: dict[asyncio.AbstractEventLoop, dict[str, _Connection]] = {}
        self._view: list[str] | None = None
        """The bwrap prefix that starts each stdio server with `.delegate/` out of its reach
        (`state_hidden_argv`); None until `load`, or where bwrap cannot run (then `exposed_state`)."""
        self.failed: dict[str, str] = {}
        """The servers the last `load` left out, by name: why each could not be used."""

    def __repr__(self) -> str:
        return f"MCPTools({[s.name for s in self.servers]!r})"

    async def load(self) -> list[Tool]:
        """Connect to every server and list its tools, as `Tool`s named `mcp__<server>__<tool>`.

        A server that cannot be started, reached or listed is left out, as Claude Code does: the
        tools of the others are returned, and `failed` names each one left out with the reason
        (also logged, at INFO). So is one that would be given internal state (`exposed_state`),
        never started.
        """
        if self._view is None and self.workspaces and any(s.command is not None for s in self.servers):
            self._view = await asyncio.to_thread(_state_hidden, self.workspaces)
        failed: dict[str, str] = {}
        if self._view is None:
            failed = {s.name: why for s in self.servers if (why := exposed_state(s, self.workspaces)) is not None}
        started = [s for s in self.servers if s.name not in failed]
        listings = await asyncio.gather(*(self._server_tools(s) for s in started), return_exceptions=True)
        tools: list[Tool] = []
        for server, listing in zip(started, listings, strict=True):
            if isinstance(listing, UserError):
                failed[server.name] = str(listing)
                logger.info("%s; going on without its tools", listing)
            elif isinstance(listing, BaseException):
                raise listing
            else:
                tools += listing
        self.failed = failed
        return tools

    async def aclose(self) -> None:
        """Close the sessions of the running event loop (a stdio server is stopped)."""
        held = self._connections.pop(asyncio.get_running_loop(), {})
        await asyncio.gather(*(connection.close() for connection in held.values()))

    async def _server_tools(self, server: MCPServerConfig) -> list[Tool]:
        client = await self._client(server)
        remote: list[RemoteTool] = []
        cursor: str | None = None
        try:
            for _ in range(MAX_PAGES):
                page = await client.list_tools(cursor=cursor)
                remote += page.tools
                if not page.next_cursor or page.next_cursor == cursor:
                    break
                cursor = page.next_cursor
        except Exception as exc:
            raise UserError(f"MCP server {server.name!r} could not list its tools: {_describe(exc)}") from exc
        return [self._tool(server, item) for item in remote]

    def _tool(self, server: MCPServerConfig, remote: RemoteTool) -> Tool:
        remote_name = remote.name

        async def call(ctx: ToolContext, arguments: dict[str, Any]) -> ToolReturn:
            return await self._call(server, remote_name, arguments)

        parameters = dict(remote.input_schema)
        parameters.setdefault("type", "object")
        parameters.setdefault("properties", {})
        return Tool(
            name=mcp_tool_name(server.name, remote.name),
            description=remote.description
            or remote.title
            or f"The tool {remote.name} of the MCP server {server.name}.",
            parameters=parameters,
            function=call,
        )

    async def _call(self, server: MCPServerConfig, tool: str, arguments: dict[str, Any]) -> ToolReturn:
        try:
            connection = await self._connection(server)
            client = await connection.client()
        except UserError as exc:
            raise ToolError(str(exc)) from exc
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED

        try:
            result = await client.call_tool(tool, arguments, progress_callback=_marks(watched()))
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:
                raise ToolError(f"MCP server {server.name!r} answered {tool} with an error: {exc.message}") from exc
            connection.retire()  # the next call opens a new session
            raise ToolError(
                f"the connection to MCP server {server.name!r} was lost during {tool} ({exc.message}); "
                "a new call reconnects"
            ) from exc
        except ValueError as exc:  # an answer that does not fit the protocol or the tool's output schema
            raise ToolError(f"MCP server {server.name!r} gave a bad answer to {tool}: {_describe(exc)}") from exc
        except Exception as exc:
            connection.retire()
            raise ToolError(f"MCP server {server.name!r} failed to run {tool}: {_describe(exc)}") from exc
        text = result_text(result)
        if result.is_error:
            raise ToolError(text or f"{tool} failed and the MCP server {server.name!r} said no more")
        return ToolReturn(content=text, data=result.structured_content)

    async def _client(self, server: MCPServerConfig) -> Client:
        return await (await self._connection(server)).client()

    async def _connection(self, server: MCPServerConfig) -> _Connection:
        """The session to `server` of the running loop, opened on first use (or after it was lost)."""
        await _import_mcp()
        loop = asyncio.get_running_loop()
        for other in list(self._connections):  # a snapshot: worker threads may run loops of their own
            if other.is_closed():
                self._connections.pop(other, None)
        held = self._connections.setdefault(loop, {})
        connection = held.get(server.name)
        if connection is None or connection.retired:
            connection = held[server.name] = _Connection(server, self._view)
        return connection


def _marks(call: Progress | None) -> ProgressFnT | None:
    """What the server's progress notifications for a call do: mark the call's progress, for its
    idle watchdog (they come on the session's reader, outside the call's own context)."""
    if call is None:
        return None

    async def mark(progress: float, total: float | None, message: str | None) -> None:
        call.mark()

    return mark


def _state_hidden(workspaces: list[Path]) -> list[str] | None:
    """The bwrap prefix that hides the workspaces' `.delegate/` from a stdio server, or None (said
    in the log) where bwrap cannot run here: servers are then refused as `exposed_state` says."""
    try:
        return state_hidden_argv(workspaces)
    except ToolError as exc:
        logger.warning(
            "MCP servers run outside any sandbox (%s): one given the workspace's root, or a folder above it, "
            "is not started",
            exc,
        )
        return None


HIDDEN = ".delegate"
"""The folder of internal state (the store, every run, users' token hashes, their workspaces)."""


def exposed_state(server: MCPServerConfig, workspaces: Iterable[Path]) -> str | None:
    """Why `server` must not be started, or None: its `cwd`, or a path among its arguments (a
    `--flag=VALUE`'s value too; relative ones from where it would run), is a folder from which
    `.delegate/` can be read: one of `workspaces`, a folder above one, a folder that holds a
    `.delegate`, or one inside it. A server runs as the operator's user, outside the sandbox that
    gives commands an empty `.delegate` (the official filesystem server given the workspace root
    lists and reads it), so the file tools' hidden paths are never offered to it."""
    if server.command is None:
        return None
    base = Path(server.cwd).expanduser() if server.cwd is not None else Path.cwd()
    named = [("cwd", str(server.cwd))] if server.cwd is not None else []
    for argument in server.command[1:]:
        value = argument.partition("=")[2] if argument.startswith("-") and "=" in argument else argument
        if value and not value.startswith("-"):
            named.append(("argument", value))
    roots = list(workspaces)
    for where, value in named:
        try:
            path = (base / Path(value).expanduser()).resolve()
            what = _state_in(path, roots)
        except (OSError, RuntimeError, ValueError):
            continue
        if what is not None:
            inside = f"{roots[0]}/<folder>" if roots else "a folder of the workspace"
            return (
                f"MCP server {server.name!r} is not started: its {where} {value!r} is {what}, and a server "
                f"runs outside the sandbox, so it would read {HIDDEN}/ (the store, every run, users' token "
                f"hashes); give it a folder inside the workspace that holds no {HIDDEN} ({inside}), or no path"
            )
    return None


def _state_in(path: Path, roots: list[Path]) -> str | None:
    if HIDDEN in path.parts:
        return f"inside a {HIDDEN} folder"
    for root in roots:
        if path == root:
            return "the workspace root"
        if root.is_relative_to(path):
            return "a folder that holds the workspace"
    if (path / HIDDEN).exists():
        return f"a folder that holds {HIDDEN}"
    return None


class _Connection:
    """One session to one server, opened, held and closed by one task of the loop it serves.

    anyio's task groups (inside mcp's transports) must be entered and left by the same task; a
    background task that owns the exit stack lets any other task of the loop use and close it.
    """

    def __init__(self, server: MCPServerConfig, view: list[str] | None = None) -> None:
        loop = asyncio.get_running_loop()
        self.server = server
        self.view = view
        self._ready: asyncio.Future[Client] = loop.create_future()
        self._stop = asyncio.Event()
        self._task = loop.create_task(self._own(), name=f"delegate: MCP server {server.name}")

    @property
    def retired(self) -> bool:
        return self._stop.is_set() or self._task.done()

    async def client(self) -> Client:
        # Shielded: a caller cancelled while waiting must not cancel the connection others wait on.
        return await asyncio.shield(self._ready)

    def retire(self) -> None:
        self._stop.set()

    async def close(self) -> None:
        self._stop.set()
        await asyncio.shield(self._task)

    async def _own(self) -> None:
        errlog = _stderr_file() if self.server.command is not None else None
        try:
            async with AsyncExitStack() as stack:
                client = await self._open(stack, errlog)
                self._ready.set_result(client)
                await self._stop.wait()
        except Exception as exc:
            if not self._ready.done():
                self._ready.set_exception(UserError(_unreachable(self.server, exc, errlog)))
            else:
                logger.debug("closing the session to MCP server %r failed: %s", self.server.name, _describe(exc))
        finally:
            self._stop.set()
            if not self._ready.done():
                self._ready.cancel()
            if errlog is not None:
                errlog.close()

    async def _open(self, stack: AsyncExitStack, errlog: TextIO | None) -> Client:
        from mcp import Client

        transport = await _transport(self.server, stack, errlog, self.view)
        try:
            async with asyncio.timeout(self.server.connect_timeout):
                return await stack.enter_async_context(Client(transport))
        except TimeoutError:
            raise TimeoutError(f"no answer to the handshake within {self.server.connect_timeout:g}s") from None


async def _import_mcp() -> None:
    """Import mcp off the event loop (it takes about a second), or say how to install it."""
    if "mcp" in sys.modules:
        return
    try:
        await asyncio.to_thread(importlib.import_module, "mcp")
    except ImportError as exc:
        raise UserError(f"MCP servers need the mcp package ({exc}): pip install 'delegate[mcp]'") from exc


async def _transport(
    server: MCPServerConfig, stack: AsyncExitStack, errlog: TextIO | None, view: list[str] | None = None
) -> Transport:
    """How to reach `server`: a stdio server is started (in `view`, a bwrap prefix, when given)."""
    if server.command is not None:
        from mcp.client.stdio import StdioServerParameters, stdio_client

        program = server.command[0]
        if server.cwd is not None and "/" in program:
            program = str(Path(server.cwd).expanduser() / program)
        if view and shutil.which(program, path=(server.env or {}).get("PATH")) is None:
            raise FileNotFoundError(server.command[0])  # said as such, not as bwrap's failure to run it
        program, *args = [*view, *server.command] if view else server.command
        params = StdioServerParameters(command=program, args=args, env=server.env, cwd=server.cwd)
        return stdio_client(params, errlog=errlog) if errlog is not None else stdio_client(params)
    assert server.url is not None
    from mcp.client.streamable_http import streamable_http_client

    if not server.headers:
        return streamable_http_client(server.url)
    import httpx2

    # mcp's own defaults: a server may hold a response stream open for long.
    timeout = httpx2.Timeout(30.0, read=300.0)
    http = await stack.enter_async_context(httpx2.AsyncClient(headers=server.headers, timeout=timeout))
    return streamable_http_client(server.url, http_client=http)


def _stderr_file() -> TextIO | None:
    """Where a stdio server's stderr goes: a file (it needs a descriptor) whose end explains a
    failed start. Not the terminal, where a server's logging would break the progress display."""
    try:
        return cast(TextIO, tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace"))
    except OSError:
        return None


def _unreachable(server: MCPServerConfig, exc: BaseException, errlog: TextIO | None) -> str:
    if server.command is not None:
        what = f"could not be started with {shlex.join(server.command)}"
        if isinstance(exc, FileNotFoundError):
            return f"MCP server {server.name!r} {what}: {server.command[0]!r} was not found; check the command"
    else:
        what = f"could not be reached at {server.url}"
    message = f"MCP server {server.name!r} {what}: {_describe(exc)}"
    said = _tail(errlog)
    return f"{message}; it wrote: {said}" if said else message


def _tail(errlog: TextIO | None) -> str:
    if errlog is None:
        return ""
    try:
        errlog.flush()
        errlog.seek(0)
        text = errlog.read()
    except (OSError, ValueError):
        return ""
    text = " ".join(text.split())
    return text if len(text) <= _STDERR_TAIL else "..." + text[-_STDERR_TAIL:]


def _describe(exc: BaseException) -> str:
    """An exception as one line, looking through anyio's exception groups to what went wrong."""
    if isinstance(exc, BaseExceptionGroup):
        group = cast(BaseExceptionGroup[BaseException], exc)
        return "; ".join(_describe(inner) for inner in group.exceptions)
    text = str(exc)
    if isinstance(exc, OSError | TimeoutError) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def result_text(result: CallToolResult) -> str:
    """A tool result as the model reads it: its text, with a short note for each image, audio clip
    or resource, or its structured content when it has no text."""
    parts = [_block_text(block) for block in result.content]
    text = "\n".join(part for part in parts if part)
    if not any(block.type == "text" for block in result.content) and result.structured_content is not None:
        structured = json.dumps(result.structured_content, ensure_ascii=False, default=str)
        text = f"{text}\n{structured}" if text else structured
    return text


def _block_text(block: ContentBlock) -> str:
    match block.type:
        case "text":
            return block.text
        case "image" | "audio":
            return f"[{block.mime_type}, {_decoded_size(block.data):,} bytes]"
        case "resource_link":
            return f"[resource {block.uri}]"
        case "resource":
            from mcp_types import TextResourceContents

            resource = block.resource
            if isinstance(resource, TextResourceContents):
                return f"[resource {resource.uri}]\n{resource.text}"
            kind = resource.mime_type or "binary"
            return f"[resource {resource.uri}, {kind}, {_decoded_size(resource.blob):,} bytes]"


def _decoded_size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data) * 3 // 4
