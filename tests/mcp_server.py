"""A tiny MCP server for the tests, built on mcp's own server API.

`python tests/mcp_server.py` serves over stdio; `python tests/mcp_server.py --http PORT` serves
streamable HTTP at http://127.0.0.1:PORT/mcp.
"""

from __future__ import annotations

import sys

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("tiny", log_level="WARNING")


@server.tool()
async def add(a: int, b: int) -> int:
    """Add two integers."""
    await anyio.sleep(0.1)  # slow enough that calls run one after another would show
    return a + b


@server.tool()
def shout(text: str) -> str:
    """Repeat the text in capitals."""
    return text.upper() + "!"


@server.tool()
def fail(reason: str) -> str:
    """Always fails, saying why."""
    raise ToolError(reason)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
