"""`EngineSettings`: where work executes, parsed from `--engine` or `DELEGATE_ENGINE`.

Two engines, one seam:

- `embedded` (the default): everything runs in the process that asked for it; batches are served by
  the in-process batch worker (`delegate.batch.BatchWorker`), with no server to run.
- `temporal://HOST:PORT[/NAMESPACE][?queue=NAME&heartbeat=SECONDS]`: work is scheduled on a
  Temporal server and executed by `delegate worker` processes on any number of machines. `queue`
  is the task queue every worker of this deployment serves (default `delegate`); `heartbeat` is
  how long a silent worker keeps its work before Temporal gives it to another (default 30 s).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qs, urlsplit

from .._errors import UserError, require_extra

ENGINE_ENV = "DELEGATE_ENGINE"
"""The environment variable that names the engine when no `--engine` is given."""

EngineKind = Literal["embedded", "temporal"]


@dataclass(frozen=True, kw_only=True, slots=True)
class EngineSettings:
    """Which engine runs the work, and how to reach it. Frozen; passed whole."""

    kind: EngineKind = "embedded"
    address: str = ""
    """`host:port` of the Temporal frontend (temporal only)."""
    namespace: str = "default"
    task_queue: str = "delegate"
    heartbeat_timeout: float = 30.0
    """Seconds a worker may go silent before Temporal retries its work on another worker."""

    @property
    def temporal(self) -> bool:
        return self.kind == "temporal"

    @classmethod
    def parse(cls, value: str | None) -> EngineSettings:
        """`embedded` (or nothing), or a `temporal://` URL; a `UserError` saying what to fix otherwise."""
        if value is None or value.strip() in ("", "embedded"):
            return cls()
        url = urlsplit(value.strip())
        if url.scheme != "temporal":
            raise UserError(f"engine {value!r} is not known: use `embedded` or `temporal://HOST:PORT[/NAMESPACE]`")
        try:
            port = url.port
        except ValueError:
            port = None
        if not url.hostname or port is None:
            raise UserError(f"engine {value!r} names no host and port: write `temporal://HOST:PORT[/NAMESPACE]`")
        namespace = url.path.strip("/") or "default"
        if "/" in namespace:
            raise UserError(f"engine {value!r}: a namespace is one name, as `temporal://HOST:PORT/NAMESPACE`")
        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        unknown = set(query) - {"queue", "heartbeat"}
        if unknown:
            raise UserError(
                f"engine {value!r}: unknown option(s) {', '.join(sorted(unknown))}; known: queue, heartbeat"
            )
        try:
            heartbeat = float(query.get("heartbeat", "30"))
        except ValueError:
            heartbeat = 0.0
        if not heartbeat > 0:
            raise UserError(f"engine {value!r}: heartbeat must be a positive number of seconds")
        require_extra("temporalio", "temporal", f"engine {value!r}")
        host = f"[{url.hostname}]" if ":" in url.hostname else url.hostname
        return cls(
            kind="temporal",
            address=f"{host}:{port}",
            namespace=namespace,
            task_queue=query.get("queue") or "delegate",
            heartbeat_timeout=heartbeat,
        )

    @classmethod
    def from_env(cls, value: str | None = None) -> EngineSettings:
        """`value` when given, else `DELEGATE_ENGINE`, else the embedded engine."""
        return cls.parse(value if value is not None else os.environ.get(ENGINE_ENV))

    def __str__(self) -> str:
        if not self.temporal:
            return "embedded"
        options = [f"queue={self.task_queue}"] if self.task_queue != "delegate" else []
        if self.heartbeat_timeout != 30.0:
            options.append(f"heartbeat={self.heartbeat_timeout:g}")
        return f"temporal://{self.address}/{self.namespace}" + (f"?{'&'.join(options)}" if options else "")
