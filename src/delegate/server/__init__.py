"""`delegate serve`: the HTTP API (`/api/v1`) and the web UI (`/`).

Importing this package imports FastAPI; `import delegate` and the CLI never do until `serve` runs.

```python
from delegate import RuntimeSettings
from delegate.server import ServerSettings, create_app

runtime = RuntimeSettings(workspace="./ws", model="openai:gpt-4.1-mini")
app = create_app(ServerSettings(runtime=runtime, limits=Limits()))
uvicorn.Server(uvicorn_config(app)).run()     # with the header and idle timeouts of `limits`
```

Its `__all__` is for extension authors; users import from `delegate` (docs/api.md).
"""

from ._app import ModelFactory, ServerSettings, create_app
from ._limits import Limits, uvicorn_config
from ._runs import RunManager

__all__ = [
    "Limits",
    "ModelFactory",
    "RunManager",
    "ServerSettings",
    "create_app",
    "uvicorn_config",
]
