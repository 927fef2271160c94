"""Pricing any model: a model behind a base URL (a gateway, a proxy, this suite's loopback server)
is priced by its provider's table unless the operator says otherwise, from `--price`,
`DELEGATE_PRICES` or `serve`'s settings; the figure is `genai-prices`' own, and each record says
which price it was charged at."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest
from genai_prices import Usage as Tokens
from genai_prices import calc_price

from delegate import Extensions, RuntimeSettings, Store, UserError
from delegate.models._prices import ModelPrices, Pricing, parse_price
from delegate.server import ServerSettings, create_app
from delegate.testing import is_lead
from tests.cli_support import run_cli, scrubbed_env
from tests.loopback_openai import OpenAIServer, Reply
from tests.loopback_server import LiveServer


def table_price(model: str, provider: str, input_tokens: int, output_tokens: int) -> float:
    """What `genai-prices` itself says `input_tokens` and `output_tokens` cost on `model`."""
    tokens = Tokens(input_tokens=input_tokens, output_tokens=output_tokens)
    return float(calc_price(tokens, model, provider_id=provider).total_price)


def delegating(body: dict[str, Any]) -> Reply:
    """The lead delegates once, then answers; the subagent completes at once (10 + 5 tokens each)."""
    if is_lead(body):
        if body["messages"][-1]["role"] == "user":
            call = {"subagent_type": "general-purpose", "description": "look", "prompt": "Look around."}
            return Reply(tool_calls=[("task", call)])
        return Reply(content="Done.")
    return Reply(tool_calls=[("complete", {"summary": "Looked."})])


def run_json(tmp_path: Path, server: OpenAIServer, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    env = scrubbed_env() | {"OPENAI_BASE_URL": server.base_url, **(env or {})}
    done = run_cli(["run", "Look around.", "--json", "-w", str(tmp_path), *args], env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_an_openai_model_behind_a_loopback_base_url_is_priced_by_openais_table(tmp_path: Path) -> None:
    with OpenAIServer(delegating) as server:
        result = run_json(tmp_path, server, "--model", "openai:gpt-4.1-mini")
    # three requests of 10 input and 5 output tokens: the lead's two and the subagent's one
    assert result["usage"]["cost_usd"] == pytest.approx(table_price("gpt-4.1-mini", "openai", 30, 15))
    [sub] = result["subagents"]
    assert sub["pricing"] == "genai-prices:openai"
    assert sub["usage"]["cost_usd"] == pytest.approx(table_price("gpt-4.1-mini", "openai", 10, 5))


def test_a_gateway_model_priced_from_the_cli_costs_what_genai_prices_says_for_the_named_provider(
    tmp_path: Path,
) -> None:
    """A Claude model served through an OpenAI-compatible gateway: OpenAI's table does not know
    it (cost unknown) until `--price` names Anthropic's."""
    with OpenAIServer(delegating) as server:
        unpriced = run_json(tmp_path, server, "--model", "openai:claude-sonnet-4-5")
        priced = run_json(tmp_path, server, "--model", "openai:claude-sonnet-4-5", "--price", "anthropic")
    assert unpriced["usage"]["cost_usd"] is None
    assert priced["usage"]["cost_usd"] == pytest.approx(table_price("claude-sonnet-4-5", "anthropic", 30, 15))
    assert priced["subagents"][0]["pricing"] == "genai-prices:anthropic"


def test_a_price_per_million_tokens_from_the_environment_or_a_flag_prices_every_request(tmp_path: Path) -> None:
    with OpenAIServer(delegating) as server:
        from_env = run_json(
            tmp_path, server, "--model", "openai:my-model", env={"DELEGATE_PRICES": "openai:my-model=usd:2/8"}
        )
        flag_wins = run_json(
            tmp_path,
            server,
            "--model",
            "openai:my-model",
            "--price",
            "openai:my-model=none",
            env={"DELEGATE_PRICES": "usd:2/8"},
        )
    assert from_env["usage"]["cost_usd"] == pytest.approx((30 * 2 + 15 * 8) / 1e6)
    assert from_env["subagents"][0]["pricing"] == "usd-per-million:2/8/2"
    assert flag_wins["usage"]["cost_usd"] is None and flag_wins["subagents"][0]["pricing"] is None


def test_a_bad_price_is_one_line_saying_what_a_price_is(tmp_path: Path) -> None:
    done = run_cli(["run", "hi", "--model", "openai:m", "--price", "usd:cheap", "-w", str(tmp_path)])
    assert done.returncode == 2
    assert "is not usd:IN/OUT[/CACHED], e.g. usd:0.4/1.6/0.1" in done.stderr
    with pytest.raises(UserError, match="is not a price: write a provider of genai-prices' table"):
        ModelPrices.load(["openai:m=nobody"])


def test_cached_tokens_are_charged_at_their_own_price_and_once() -> None:
    from delegate._usage import Usage
    from delegate.models._prices import request_cost

    usage = Usage(input_tokens=1_000_000, output_tokens=0, cache_read_tokens=400_000)
    own = parse_price("usd:1/2/0.5", "test")
    assert own is not None
    assert request_cost(own, usage) == pytest.approx(0.6 + 0.2)  # OpenAI's input includes the cached tokens
    assert request_cost(Pricing(per_million=(1, 2, 0.5), cache_apart=True), usage) == pytest.approx(1.0 + 0.2)


def test_serve_settings_price_a_model_behind_a_base_url_as_genai_prices_does(
    workspace: Path, store: Store, tokens: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with OpenAIServer(delegating) as model_server:
        monkeypatch.setenv("OPENAI_BASE_URL", model_server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        settings = RuntimeSettings(
            workspace=workspace,
            model="openai:claude-sonnet-4-5",
            extensions=Extensions(model_prices={"openai:claude-sonnet-4-5": "anthropic"}),
        )
        app = create_app(ServerSettings(runtime=settings, run_batches=False), store=store)
        with LiveServer(app) as server:
            headers = {"Authorization": f"Bearer {tokens['alice']}"}
            with httpx2.Client(base_url=f"{server.url}/api/v1", headers=headers, timeout=60) as api:
                started = api.post("/runs", json={"prompt": "Look around."})
                assert started.status_code == 202, started.text
                run_id = started.json()["run_id"]
                deadline = time.monotonic() + 60
                while (run := api.get(f"/runs/{run_id}").json())["status"] == "running":
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
    assert run["status"] == "completed", run
    expected = table_price("claude-sonnet-4-5", "anthropic", 30, 15)
    assert run["usage"]["cost_usd"] == pytest.approx(expected)
    assert run["subagents"][0]["pricing"] == "genai-prices:anthropic"
