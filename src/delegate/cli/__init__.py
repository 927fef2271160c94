"""The `delegate` command line."""

from __future__ import annotations


def main() -> None:
    from ._main import app

    app()


__all__ = ["main"]
