"""MCP servers from a JSON file in the format Claude Code and Claude Desktop use (`.mcp.json`):

```json
{"mcpServers": {
  "github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"], "env": {"GITHUB_TOKEN": "..."}},
  "docs": {"type": "http", "url": "http://127.0.0.1:8000/mcp", "headers": {"Authorization": "Bearer ..."}}
}}
```
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

from .._errors import UserError
from ._client import MCPServerConfig


def load_mcp_config(path: str | Path) -> list[MCPServerConfig]:
    """The servers of an `mcpServers` file; a `UserError` naming the file and the server otherwise."""
    file = Path(path)
    try:
        data: object = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"{file}: cannot read MCP config: {exc.strerror}") from None
    except ValueError as exc:
        raise UserError(f"{file}: not valid JSON: {exc}") from None
    servers = cast(dict[str, Any], data).get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise UserError(f'{file}: expected an object with "mcpServers": {{"<name>": {{"command": ...}}}}')
    configs: list[MCPServerConfig] = []
    for name, entry in cast(dict[str, Any], servers).items():
        if not isinstance(entry, dict):
            raise UserError(f"{file}: server {name!r} must be an object with a command or a url")
        configs.append(_server(file, name, cast(dict[str, Any], entry)))
    return configs


def server_config(name: str, entry: dict[str, Any], where: str) -> MCPServerConfig:
    """One `mcpServers` entry as a config; a `UserError` starting with `where` otherwise."""
    return _server(Path(where), name, entry)


def _server(file: Path, name: str, entry: dict[str, Any]) -> MCPServerConfig:
    unknown = set(entry) - {"type", "command", "args", "env", "cwd", "url", "headers"}
    if unknown:
        raise UserError(f"{file}: server {name!r}: unknown field(s) {', '.join(sorted(unknown))}")
    command = entry.get("command")
    args = entry.get("args", [])
    if command is not None and (not isinstance(command, str) or not isinstance(args, list)):
        raise UserError(f'{file}: server {name!r}: "command" is a string and "args" a list of strings')
    try:
        return MCPServerConfig(
            name,
            command=None if command is None else [command, *cast(list[str], args)],
            url=entry.get("url"),
            env=entry.get("env"),
            cwd=entry.get("cwd"),
            headers=entry.get("headers"),
        )
    except UserError as exc:
        raise UserError(f"{file}: {exc}") from None
