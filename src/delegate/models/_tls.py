"""The certificates the provider SDKs' clients verify servers with, loaded once a process.

Each SDK client loads them itself (80-200 ms on a busy machine) when it is built, and a client is
built per event loop on the first request: counted in that request's time, the first call of
every process looked that much slower than the model is. A model loads them (and imports its SDK)
when it is built instead, and hands them to each client; they are read once a process, as the
environment (`SSL_CERT_FILE`, `SSL_CERT_DIR`) says when first asked.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import ssl


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The SDKs' default TLS context (`httpx2`'s, which both SDKs use), built once; and the async
    backend their connections open sockets with, which `anyio` imports on the first connection
    (a tenth of a second)."""
    import httpx2  # the SDKs' HTTP library: imported with them

    with contextlib.suppress(ImportError):  # anyio's own module: a later anyio may name it otherwise
        importlib.import_module("anyio._backends._asyncio")
    return httpx2.create_ssl_context()


__all__ = ["tls_context"]
