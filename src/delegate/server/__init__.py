"""`delegate serve`: the HTTP API (`/api/v1`) and the web UI (`/`).

Importing this package imports FastAPI; `import delegate` and the CLI never do until `serve` runs.

```python
from delegate.server import ServerSettings, create_app

app = create_app(ServerSettings(workspace="./ws", model="openai:gpt-4.1-mini"))
```
"""

from ._app import ModelFactory, RunOptions, RuntimeFactory, ServerSettings, create_app

__all__ = ["ModelFactory", "RunOptions", "RuntimeFactory", "ServerSettings", "create_app"]
