"""`delegate serve`: the HTTP API (`/api/v1`) and the web UI (`/`).

Importing this package imports FastAPI; `import delegate` and the CLI never do until `serve` runs.

```python
from delegate.server import ServerSettings, create_app

app = create_app(ServerSettings(workspace="./ws", model="openai:gpt-4.1-mini", limits=Limits()))
uvicorn.Server(uvicorn_config(app)).run()     # with the header and idle timeouts of `limits`
```
"""

from ._app import ModelFactory, RunOptions, RuntimeFactory, ServerSettings, create_app
from ._limits import Limits, uvicorn_config
from ._runs import RunManager

__all__ = [
    "Limits",
    "ModelFactory",
    "RunManager",
    "RunOptions",
    "RuntimeFactory",
    "ServerSettings",
    "create_app",
    "uvicorn_config",
]
