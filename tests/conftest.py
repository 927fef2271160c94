"""Fixtures and settings shared by the whole suite.

Two guards hold for every test, without asking (both autouse):

- `clean_env`: no provider key, model setting, tracing endpoint or delegate setting of the
  developer's reaches the test's own process (the CLI under test gets
  `tests.cli_support.scrubbed_env()`). `DELEGATE_TEST_*` (the suite's own switches) stay.
- `models_on_loopback_only`: a request of the OpenAI or Anthropic SDK (whoever built the client,
  with whatever base URL) to a host that is not loopback (127.0.0.0/8, ::1, localhost) is refused,
  and the test fails even if the code under test caught the refusal; so does a process the test
  starts whose environment would send a provider key beyond loopback.
"""

from __future__ import annotations

import importlib
import ipaddress
import os
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from hypothesis import settings

pytest_plugins = ["pytester", "tests.conftest_store", "tests.durable_support"]

# Every test's files (`tmp_path`: workspaces, SQLite stores, layers) go to RAM when this machine
# has a tmpfs with room for them: making a file there costs 20 us against 450 us on these
# machines' disk, and the suite makes hundreds of thousands (a fifth of the time of the
# file-heavy modules). Set PYTEST_DEBUG_TEMPROOT (or pass --basetemp) to choose another place.
SHM = Path("/dev/shm")
SHM_ROOM = 4 * 2**30
"""Bytes free a tmpfs must have to hold the suite's files (the last three runs' are kept)."""


def _files_in_ram() -> None:
    if "PYTEST_DEBUG_TEMPROOT" in os.environ or not os.access(SHM, os.W_OK):
        return
    free = os.statvfs(SHM)
    if free.f_bavail * free.f_frsize >= SHM_ROOM:
        os.environ["PYTEST_DEBUG_TEMPROOT"] = str(SHM)


_files_in_ram()

# CI draws the same examples on every run, so a landing never hangs on a lucky draw; a developer's
# plain `pytest` explores new ones each time (that is how the symlink-loop escape was found).
settings.register_profile("ci", derandomize=True, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

SCRUBBED = ("OPENAI_", "ANTHROPIC_", "OTEL_", "DELEGATE_")
"""Prefixes of the variables no test inherits from the developer's environment."""
KEPT = ("DELEGATE_TEST_",)
"""Prefixes of the suite's own switches (`DELEGATE_TEST_PG`, `DELEGATE_TEST_LOCAL`), kept."""
PROVIDERS = {"OPENAI_API_KEY": "OPENAI_BASE_URL", "ANTHROPIC_API_KEY": "ANTHROPIC_BASE_URL"}
"""Each provider's key, and the variable that says where the key is sent."""


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(SCRUBBED) and not name.startswith(KEPT):
            monkeypatch.delenv(name)


class RemoteModelRefused(BaseException):
    """A test tried to reach a model beyond loopback. Not an `Exception`, so that no `except
    Exception` of the code under test (a retry policy, a subagent's crash handler) takes it for a
    model's failure and goes on; the test fails at its teardown all the same if one caught it."""


def is_loopback(host: str | None) -> bool:
    """Whether `host` (a name or an address, IPv6 with or without brackets) is this machine."""
    if not host:
        return False
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def remote_model_in(env: Mapping[str, str]) -> str | None:
    """The base URL beyond loopback that a process with `env` would send a provider key to (the
    provider's own service when no base URL is set), or None."""
    for key, base in PROVIDERS.items():
        url = env.get(base) or ""
        if (env.get(key) or url) and not is_loopback(urlsplit(url).hostname):
            return f"{base}={url!r}" if url else f"{key} with no {base} (the provider's own service)"
    return None


@pytest.fixture(autouse=True)
def models_on_loopback_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    refused: list[str] = []

    def refuse(where: str) -> RemoteModelRefused:
        refused.append(where)
        return RemoteModelRefused(f"a test may not reach a model beyond loopback: {where}")

    # Every request of both SDKs passes through `_prepare_url` (the base URL joined to the path),
    # however its client was built: `OpenAIModel(base_url=...)`, `client=`, or the SDK directly.
    for module in ("openai._base_client", "anthropic._base_client"):
        base: Any = importlib.import_module(module).BaseClient
        original = base._prepare_url

        def guarded(self: Any, url: str, _original: Any = original) -> Any:
            prepared = _original(self, url)
            if not is_loopback(prepared.host):
                raise refuse(str(prepared))
            return prepared

        monkeypatch.setattr(base, "_prepare_url", guarded)

    popen_init = subprocess.Popen.__init__

    def checked_popen(self: Any, *args: Any, **kwargs: Any) -> None:
        env = kwargs.get("env")
        remote = remote_model_in(os.environ if env is None else env)
        if remote is not None:
            raise refuse(f"a process started with {remote}")
        popen_init(self, *args, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", checked_popen)
    yield
    if refused:
        pytest.fail("a test tried to reach a model beyond loopback: " + "; ".join(refused), pytrace=False)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An empty workspace folder (a test module that needs one set up otherwise defines its own)."""
    root = tmp_path / "ws"
    root.mkdir()
    return root
