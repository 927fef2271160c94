"""A tiny MCP server for the tests, built on mcp's own server API.

`python tests/mcp_server.py` serves over stdio; `--http PORT` serves streamable HTTP at
http://127.0.0.1:PORT/mcp instead; `--paged` lists the tools one per page, as a server with many
tools would; `--root DIR` (or `--root=DIR`) adds `list_root`, listing DIR as a filesystem server
would; `--stalls` adds `hang` (answers late, with no progress meanwhile) and `report` (reports
progress as it works), for the idle watchdog. Other arguments are ignored (the tests tag their
servers' command lines with them).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ListToolsResult, PaginatedRequestParams


class PagedServer(MCPServer):
    """Lists one tool a page, the cursor being the index of the next one."""

    async def _handle_list_tools(self, ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
        tools = await self.list_tools()
        start = int(params.cursor) if params is not None and params.cursor else 0
        following = str(start + 1) if start + 1 < len(tools) else None
        return ListToolsResult(tools=tools[start : start + 1], next_cursor=following)


server = (PagedServer if "--paged" in sys.argv else MCPServer)("tiny", log_level="WARNING")


@server.tool()
async def add(a: int, b: int) -> int:
    """Add two integers."""
    await anyio.sleep(0.1)  # slow enough that calls run one after another would show
    return a + b


_arrived = 0
_all_arrived = anyio.Event()


@server.tool()
async def meet(party: int) -> int:
    """Wait until `party` calls of meet are running at once (at most 30 s); say how many came."""
    global _arrived
    _arrived += 1
    if _arrived >= party:
        _all_arrived.set()
    with anyio.move_on_after(30):  # calls served one after another would each wait alone
        await _all_arrived.wait()
    return _arrived


@server.tool()
def shout(text: str) -> str:
    """Repeat the text in capitals."""
    return text.upper() + "!"


@server.tool()
def fail(reason: str) -> str:
    """Always fails, saying why."""
    raise ToolError(reason)


def _root() -> str | None:
    for i, arg in enumerate(sys.argv):
        if arg == "--root" and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
        if arg.startswith("--root="):
            return arg.removeprefix("--root=")
    return None


if "--stalls" in sys.argv:

    @server.tool()
    async def hang(seconds: float) -> str:
        """Answer after `seconds`, with no progress meanwhile (a stuck call)."""
        await anyio.sleep(seconds)
        return "woke up"

    @server.tool()
    async def report(seconds: float, every: float, ctx: Context) -> str:
        """Work for `seconds`, reporting progress every `every` seconds."""
        steps = max(1, round(seconds / every))
        for step in range(steps):
            await anyio.sleep(every)
            await ctx.report_progress(step + 1, steps)
        return f"done in {steps} steps"


ROOT = _root()
if ROOT is not None:

    @server.tool()
    def list_root() -> str:
        """List the folder this server was given, as a filesystem server does."""
        return "\n".join(sorted(os.listdir(ROOT)))


if __name__ == "__main__":
    if "--http" in sys.argv:
        port = int(sys.argv[sys.argv.index("--http") + 1])
        server.run("streamable-http", host="127.0.0.1", port=port)
    else:
        server.run()
