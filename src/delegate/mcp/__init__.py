"""MCP servers' tools, and deferred tools an agent loads with `tool_search`.

Its `__all__` is for extension authors; users import from `delegate` (docs/api.md).
"""

from ._client import MCPServerConfig, MCPTools
from ._config import load_mcp_config, server_config
from ._deferred import LOADED, TOOL_SEARCH, DeferredGate, deferred_index, rank, search_tool

__all__ = [
    "LOADED",
    "TOOL_SEARCH",
    "DeferredGate",
    "MCPServerConfig",
    "MCPTools",
    "deferred_index",
    "load_mcp_config",
    "rank",
    "search_tool",
    "server_config",
]
