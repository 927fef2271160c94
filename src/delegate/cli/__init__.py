"""The `delegate` command line."""

from __future__ import annotations


def main() -> None:
    from . import _agents, _batch, _demo, _serve
    from ._main import app

    _agents.register(app)
    _batch.register(app)
    _serve.register(app)
    _demo.register(app)
    app()


__all__ = ["main"]
