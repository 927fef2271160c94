"""Tool machinery and the built-in workspace tools."""

from ._tool import Tool, ToolContext, ToolFunction, ToolReturn, run_blocking, tool

__all__ = ["Tool", "ToolContext", "ToolFunction", "ToolReturn", "run_blocking", "tool"]
