"""OpenTelemetry traces of runs and batch items, in the GenAI semantic conventions.

Tracing is on when the standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, the `otel` extra is installed, and neither
`OTEL_SDK_DISABLED=true` nor `OTEL_TRACES_EXPORTER=none` says otherwise. The SDK and its OTLP/HTTP
exporter read the other `OTEL_*` variables themselves (headers, timeout, sampler, batch sizes,
`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`); the service's name is also the OpenInference
project name, so Phoenix files the traces under it.

Spans are made from the runtime's events, after the fact and with the events' own timestamps, so
the loop itself knows nothing of tracing: an event sink (`EventSpans`, one per run or batch item)
opens a span on each start event and ends it on the matching end event:

    invoke_agent {name}   agent.started → agent.completed     (the lead, each subagent)
      chat {model}        model.request → model.response
      execute_tool {name} tool.started  → tool.completed
        invoke_agent ...  a subagent's span is a child of the `task` call that started it
                          (a follow-up's, of its `task_message` call; a background subagent's
                          outlives the call, and says `delegate.subagent.background`; a
                          nested one's hangs under its parent's `task` call, and every
                          subagent's says `delegate.subagent.depth`)
    workflow {description}  workflow.started → workflow.completed (under the lead's `workflow`
                            call, or the root of a run that is a workflow)
      phase {name}          its first agent or `phase()` → the workflow's end (ending at its
                            last agent's end)
        invoke_agent ...    each agent of the workflow, under its phase (or the workflow)

Each span also carries the OpenInference attributes trace viewers such as Arize Phoenix read
(`openinference.span.kind` AGENT / LLM / TOOL, `llm.model_name`, `llm.token_count.*`, `tool.name`).

Message content (prompts, answers, the messages of each model call, tool arguments and results)
is left out unless `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`. With it, the sink
reads the objects behind the events (`Event.detail`: the request, the answer, the whole tool
result) and sets them in both conventions: `gen_ai.input.messages`, `gen_ai.output.messages`,
`gen_ai.system_instructions` (JSON in the GenAI message shape) and `input.value`, `output.value`,
`llm.input_messages.*`, `llm.output_messages.*`. Each text is cut at `TEXT_LIMIT` characters and
each list of messages keeps its newest that fit in `CONTENT_LIMIT` (see `_Content`).

Nothing here imports opentelemetry until tracing is on: without the variable, a runtime has no
tracing sink at all.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from .._events import Event, EventSink
from .._messages import MediaPart, Message, ReasoningPart, TextPart, ToolCallPart, ToolResultPart
from .._text import safe_text

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

    from ..loop import AgentResult
    from ..models import ModelRequest, ModelResponse

_log = logging.getLogger("delegate.tracing")

CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
PROJECT_NAME = "openinference.project.name"
"""The resource attribute OpenInference tools (Arize Phoenix) put a trace's project in: the service's
name (`OTEL_SERVICE_NAME`, default `delegate`) unless `OTEL_RESOURCE_ATTRIBUTES` names one."""
_QUEUE_SIZE = 65_536
TEXT_LIMIT = 16_384
"""The most characters of one text a span keeps (a prompt, a message's text, a tool's arguments'
string, a tool's result): a longer one is cut, `… [cut: N characters in all]` after it."""
CONTENT_LIMIT = 65_536
"""About the most characters of one content attribute: a list of messages keeps its newest that fit
(`delegate.content.omitted_messages` counts those left out), one message or a tool's arguments
past it has its texts cut shorter."""


def wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the environment asks for traces (an OTLP endpoint set, the SDK not disabled)."""
    if not (environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        return False
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() != "none"


class Tracing:
    """The process's span exporter: one `TracerProvider` with a batching OTLP/HTTP exporter."""

    def __init__(self, provider: TracerProvider, *, capture_content: bool) -> None:
        self.provider = provider
        self.tracer: Tracer = provider.get_tracer("delegate")
        self.capture_content = capture_content

    def spans(self) -> EventSpans:
        """A fresh sink for one run (or one batch item): its agent and call ids are its own."""
        return EventSpans(self.tracer, capture_content=self.capture_content)

    def flush(self) -> None:
        self.provider.force_flush(timeout_millis=10_000)


_ENV = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    CAPTURE_CONTENT,
)
_lock = threading.Lock()
_built: dict[tuple[str | None, ...], Tracing | None] = {}


def from_env() -> Tracing | None:
    """The process's `Tracing` when the environment asks for it, built on first use; else None.

    The exporter is per process (like the environment it is configured by), so every runtime of a
    server shares one batch queue and one export thread; a changed environment gets its own.
    """
    key = tuple(os.environ.get(name) for name in _ENV)
    if key in _built:
        return _built[key]
    with _lock:
        if key not in _built:
            _built[key] = _build() if wanted() else None
        return _built[key]


def sinks() -> list[EventSink]:
    """The tracing sink for one run or batch item, or none when tracing is off."""
    tracing = from_env()
    return [tracing.spans()] if tracing is not None else []


def flush_traces() -> None:
    """Send the spans still queued (before the process exits). A no-op when tracing is off."""
    for tracing in list(_built.values()):
        if tracing is not None:
            tracing.flush()


def _build() -> Tracing | None:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        _log.warning(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but OpenTelemetry is not installed, so no traces are sent: "
            "install it with `pip install 'delegate[otel]'`"
        )
        return None
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "delegate"}))
    if PROJECT_NAME not in resource.attributes:  # Arize Phoenix files traces by it, else under `default`
        resource = resource.merge(Resource({PROJECT_NAME: str(resource.attributes[SERVICE_NAME])}))
    provider = TracerProvider(resource=resource)  # shuts down (flushing) at exit
    # A fan-out of a thousand subagents makes thousands of spans at once: a deeper queue than the
    # SDK's 2,048 (OTEL_BSP_MAX_QUEUE_SIZE still decides when it is set) keeps them from being dropped.
    queue = None if os.environ.get("OTEL_BSP_MAX_QUEUE_SIZE") else _QUEUE_SIZE
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(), max_queue_size=queue))
    capture = os.environ.get(CAPTURE_CONTENT, "").strip().lower() == "true"
    return Tracing(provider, capture_content=capture)


def _ns(ts: float) -> int:
    return int(ts * 1e9)


def _provider(model: str) -> str:
    """`gen_ai.provider.name` of a model string: `openai:gpt-4.1` → `openai`."""
    provider, sep, _ = model.partition(":")
    return provider if sep else model


def _request_model(model: str) -> str:
    """`gen_ai.request.model` of a model string: `openai:gpt-4.1` → `gpt-4.1`."""
    return model.partition(":")[2] or model


def _content(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _set_usage(span: Span, event: Event) -> None:
    usage = cast(dict[str, Any], event.data.get("usage") or {})
    tokens_in, tokens_out = int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))
    span.set_attribute("gen_ai.usage.input_tokens", tokens_in)
    span.set_attribute("gen_ai.usage.output_tokens", tokens_out)
    span.set_attribute("llm.token_count.prompt", tokens_in)
    span.set_attribute("llm.token_count.completion", tokens_out)
    span.set_attribute("llm.token_count.total", tokens_in + tokens_out)
    cached = int(usage.get("cache_read_tokens", 0))
    if cached:
        span.set_attribute("gen_ai.usage.cache_read.input_tokens", cached)
        span.set_attribute("llm.token_count.prompt_details.cache_read", cached)
    cost = usage.get("cost_usd")
    if isinstance(cost, (int, float)):  # a model without a price: no cost attribute, never a guess
        span.set_attribute("llm.cost.total", float(cost))


def _cut(text: str, limit: int = TEXT_LIMIT) -> str:
    """`text` made safe to export, cut to `limit` characters with a note of its whole size."""
    text = safe_text(text)
    return text if len(text) <= limit else f"{text[:limit]}… [cut: {len(text):,} characters in all]"


def _cut_values(arguments: Mapping[str, Any], limit: int) -> dict[str, Any]:
    return {k: _cut(v, limit) if isinstance(v, str) else v for k, v in arguments.items()}


def _arguments(arguments: Mapping[str, Any]) -> str:
    """A tool call's arguments as JSON, each string argument cut, in about `CONTENT_LIMIT`."""
    text = _content(_cut_values(arguments, TEXT_LIMIT))
    if len(text) > CONTENT_LIMIT:
        text = _content(_cut_values(arguments, max(256, CONTENT_LIMIT // (2 * max(1, len(arguments))))))
    return text


def _genai_part(part: Any, limit: int) -> dict[str, Any]:
    """One message part in the GenAI conventions' message shape."""
    if isinstance(part, TextPart):
        return {"type": "text", "content": _cut(part.text, limit)}
    if isinstance(part, ToolCallPart):
        return {"type": "tool_call", "id": part.id, "name": part.name, "arguments": _cut_values(part.arguments, limit)}
    if isinstance(part, ToolResultPart):
        return {"type": "tool_call_response", "id": part.tool_call_id, "response": _cut(part.content, limit)}
    if isinstance(part, ReasoningPart):
        return {"type": "reasoning", "content": _cut(part.text, limit)}
    if isinstance(part, MediaPart):  # the bytes are left out: their type and name say what was sent
        media: dict[str, Any] = {"type": "uri" if part.url else "media", "mime_type": part.media_type}
        if part.url:
            media["uri"] = part.url
        if part.name:
            media["name"] = part.name
        return media
    return {"type": str(getattr(part, "kind", "unknown"))}


def _genai_message(message: Message, limit: int = TEXT_LIMIT) -> dict[str, Any]:
    return {"role": message.role, "parts": [_genai_part(p, limit) for p in message.parts]}


class _Content:
    """A list of messages as one span attribute: the newest messages whose JSON fits in
    `CONTENT_LIMIT` (at least the newest one, its texts cut shorter if it alone is past it)."""

    def __init__(self, messages: list[Message]) -> None:
        kept: list[tuple[dict[str, Any], str]] = []
        size = 2
        for message in reversed(messages):
            shaped = _genai_message(message)
            text = _content(shaped)
            if not kept and len(text) > CONTENT_LIMIT:
                limit = max(256, CONTENT_LIMIT // (2 * max(1, len(message.parts))))
                shaped = _genai_message(message, limit)
                text = _content(shaped)
            if kept and size + len(text) + 1 > CONTENT_LIMIT:
                break
            kept.append((shaped, text))
            size += len(text) + 1
        kept.reverse()
        self.messages = [shaped for shaped, _ in kept]
        self.json = "[" + ",".join(text for _, text in kept) + "]"
        self.omitted = len(messages) - len(kept)


def _openinference(prefix: str, messages: list[dict[str, Any]], first: int = 0) -> dict[str, Any]:
    """GenAI-shaped messages as OpenInference's flattened `{prefix}.{i}.message.*` attributes: a
    message's texts joined as its `content`, its tool calls as `tool_calls`, each tool result a
    `tool` message of its own."""
    out: dict[str, Any] = {}
    i = first
    for message in messages:
        parts = cast(list[dict[str, Any]], message["parts"])
        results = [p for p in parts if p["type"] == "tool_call_response"]
        for result in results:
            at = f"{prefix}.{i}.message"
            out |= {f"{at}.role": "tool", f"{at}.content": result["response"], f"{at}.tool_call_id": result["id"]}
            i += 1
        others = [p for p in parts if p["type"] != "tool_call_response"]
        if results and not others:
            continue
        at = f"{prefix}.{i}.message"
        out[f"{at}.role"] = message["role"]
        texts = [str(p["content"]) for p in others if p["type"] == "text"]
        if texts:
            out[f"{at}.content"] = "".join(texts)
        for j, call in enumerate(p for p in others if p["type"] == "tool_call"):
            call_at = f"{at}.tool_calls.{j}.tool_call"
            out[f"{call_at}.id"] = call["id"]
            out[f"{call_at}.function.name"] = call["name"]
            out[f"{call_at}.function.arguments"] = _content(call["arguments"])
        i += 1
    return out


_FINISH = {"end_turn": "stop", "tool_use": "tool_call", "max_tokens": "length"}


def _answer(response: ModelResponse) -> dict[str, Any]:
    """A model's answer as a GenAI output message (in `CONTENT_LIMIT`, as `_Content` bounds one)."""
    shaped = _Content([Message(role="assistant", parts=list(response.parts))]).messages[0]
    shaped["finish_reason"] = "tool_call" if response.tool_calls else _FINISH.get(response.finish_reason, "stop")
    return shaped


def _final(result: AgentResult) -> str:
    """What an agent ended with: its answer, or what its stopping tool delivered (`complete`'s summary)."""
    returned = result.stop_return
    if returned is not None:
        summary = getattr(returned.data, "summary", None)
        return summary if isinstance(summary, str) else returned.content
    return result.final


class EventSpans:
    """An event sink that turns one run's start/end event pairs into spans."""

    def __init__(self, tracer: Tracer, *, capture_content: bool) -> None:
        from opentelemetry import trace

        self._otel = trace
        self._tracer = tracer
        self._capture = capture_content
        self._agents: dict[str, Span] = {}
        self._models: dict[str, str] = {}
        self._chats: dict[str, Span] = {}
        self._tools: dict[tuple[str, str], Span] = {}
        self._started_by: dict[str, tuple[str | None, str | None]] = {}
        """Per subagent, the agent and tool call that started it (from `subagent.started`), or
        its last follow-up (`subagent.message`)."""
        self._kinds: dict[str, tuple[bool, int]] = {}
        """Per subagent, whether it runs in the background and which follow-up it is on."""
        self._depths: dict[str, int] = {}
        """Per subagent, its depth below the lead (`subagent.started`): `delegate.subagent.depth`."""
        self._workflows: dict[str, Span] = {}
        """Each workflow of the run by the lead's tool call id (`""`: the run is a workflow)."""
        self._phases: dict[tuple[str, str], tuple[Span, float]] = {}
        """Each workflow phase (by workflow and name), with the end of its last agent so far."""
        self._in_phase: dict[str, tuple[str, str]] = {}
        """The workflow phase each of its agents belongs to."""
        self._handlers: dict[str, Callable[[Event], None]] = {
            "subagent.started": self._subagent_started,
            "subagent.message": self._subagent_message,
            "agent.started": self._agent_started,
            "agent.completed": self._agent_completed,
            "model.request": self._chat_started,
            "model.response": self._chat_completed,
            "tool.started": self._tool_started,
            "tool.completed": self._tool_completed,
            "run.completed": self._run_completed,
            "workflow.started": self._workflow_started,
            "workflow.phase": self._workflow_phase,
            "workflow.completed": self._workflow_completed,
        }

    def __call__(self, event: Event) -> None:
        try:
            self._on(event)
        except Exception:  # a sink must not raise: a tracing bug never breaks a run
            _log.exception("could not turn a %s event into a span", event.type)

    def _on(self, event: Event) -> None:
        handler = self._handlers.get(event.type)
        if handler is not None:
            handler(event)

    def _subagent_started(self, event: Event) -> None:
        self._started_by[event.agent_id] = (event.parent_agent_id, event.tool_call_id)
        self._kinds[event.agent_id] = (bool(event.data.get("background")), 0)
        self._depths[event.agent_id] = int(event.data.get("depth") or 1)
        workflow = event.tool_call_id or ""
        phase = event.data.get("phase")
        if workflow in self._workflows and isinstance(phase, str):
            self._in_phase[event.agent_id] = (workflow, phase)
            self._phase_span(workflow, phase, event.ts)

    def _workflow_started(self, event: Event) -> None:
        parent = self._tools.get((event.agent_id, event.tool_call_id)) if event.tool_call_id else None
        description = str(event.data.get("description") or "") or "workflow"
        self._workflows[event.tool_call_id or ""] = self._tracer.start_span(
            f"workflow {description[:80]}",
            context=self._otel.set_span_in_context(parent) if parent is not None else None,
            kind=self._otel.SpanKind.INTERNAL,
            attributes={
                "openinference.span.kind": "CHAIN",
                "gen_ai.conversation.id": event.run_id,
                "delegate.workflow.lines": int(event.data.get("lines") or 0),
                "delegate.workflow.journaled": int(event.data.get("journaled") or 0),
            },
            start_time=_ns(event.ts),
        )

    def _workflow_phase(self, event: Event) -> None:
        workflow = event.tool_call_id or ""
        if workflow in self._workflows:
            self._phase_span(workflow, str(event.data.get("name")), event.ts)

    def _phase_span(self, workflow: str, name: str, ts: float) -> Span:
        known = self._phases.get((workflow, name))
        if known is None:
            span = self._tracer.start_span(
                f"phase {name[:80]}",
                context=self._otel.set_span_in_context(self._workflows[workflow]),
                kind=self._otel.SpanKind.INTERNAL,
                attributes={"openinference.span.kind": "CHAIN", "delegate.workflow.phase": name},
                start_time=_ns(ts),
            )
            known = self._phases[(workflow, name)] = (span, ts)
        return known[0]

    def _workflow_completed(self, event: Event) -> None:
        """End the workflow's span and its phases': "completed" says its script ran to its end,
        never that its agents' criteria hold (the counts say that, as attributes)."""
        workflow = event.tool_call_id or ""
        counts: Mapping[str, Any] = event.data.get("counts") or {}
        span = self._workflows.get(workflow)
        if span is not None:
            span.set_attributes({f"delegate.workflow.{k}": v for k, v in counts.items() if isinstance(v, int)})
            span.set_attribute("delegate.workflow.line", str(event.data.get("line") or ""))
        self._end_workflow(workflow, event.ts, str(event.data.get("status") or ""), str(event.data.get("error") or ""))

    def _end_workflow(self, workflow: str, ts: float, status: str, error: str = "") -> None:
        for key in [k for k in self._phases if k[0] == workflow]:
            span, last = self._phases.pop(key)
            span.end(end_time=_ns(last))
        span = self._workflows.pop(workflow, None)
        if span is None:
            return
        span.set_attribute("delegate.workflow.status", status)
        if status != "completed":
            span.set_attribute("error.type", status or "interrupted")
            span.set_status(self._otel.StatusCode.ERROR, error or None)
        span.end(end_time=_ns(ts))

    def _subagent_message(self, event: Event) -> None:
        call_id = event.data.get("tool_call_id")
        self._started_by[event.agent_id] = (event.parent_agent_id, str(call_id) if call_id else event.tool_call_id)
        background, _ = self._kinds.get(event.agent_id, (False, 0))
        self._kinds[event.agent_id] = (background, int(event.data.get("messages") or 0))

    def _run_completed(self, event: Event) -> None:
        for agent_id in list(self._agents):  # left open: the run ended without them
            self._end_agent(agent_id, event.ts, "interrupted")
        for workflow in list(self._workflows):
            self._end_workflow(workflow, event.ts, "interrupted")

    def _agent_started(self, event: Event) -> None:
        name = str(event.data.get("name", event.agent_id))
        model = str(event.data.get("model", ""))
        self._models[event.agent_id] = model
        parent_agent, call_id = self._started_by.get(event.agent_id, (event.parent_agent_id, None))
        parent = self._tools.get((parent_agent, call_id)) if parent_agent and call_id else None
        phase = self._in_phase.get(event.agent_id)
        if phase is not None and phase in self._phases:
            parent = self._phases[phase][0]
        elif event.agent_id in self._started_by and (call_id or "") in self._workflows:
            parent = self._workflows[call_id or ""]
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": name,
            "gen_ai.agent.id": event.agent_id,
            "gen_ai.conversation.id": event.run_id,
            "gen_ai.provider.name": _provider(model),
            "gen_ai.system": _provider(model),
            "gen_ai.request.model": _request_model(model),
            "openinference.span.kind": "AGENT",
            "agent.name": name,
        }
        kind = self._kinds.get(event.agent_id)
        if kind is not None:
            attributes |= {"delegate.subagent.background": kind[0], "delegate.subagent.messages": kind[1]}
            attributes["delegate.subagent.depth"] = self._depths.get(event.agent_id, 1)
        if call_id and call_id.startswith("batch:"):  # a batch item: `batch:{id}:{key}:{attempt}`
            batch_id, _, rest = call_id[len("batch:") :].partition(":")
            key, _, attempt = rest.rpartition(":")
            attributes |= {"delegate.batch.id": batch_id, "delegate.batch.item.key": key}
            if attempt.isdigit():
                attributes["delegate.batch.item.attempt"] = int(attempt)
        if self._capture and event.detail is not None:
            attributes |= _agent_input(cast(list[Message], event.detail))
        self._agents[event.agent_id] = self._tracer.start_span(
            f"invoke_agent {name}",
            context=self._otel.set_span_in_context(parent) if parent is not None else None,
            kind=self._otel.SpanKind.INTERNAL,
            attributes=attributes,
            start_time=_ns(event.ts),
        )

    def _agent_completed(self, event: Event) -> None:
        span = self._agents.get(event.agent_id)
        if span is None:
            return
        _set_usage(span, event)
        span.set_attribute("delegate.agent.steps", int(event.data.get("steps", 0)))
        if self._capture and event.detail is not None:
            final = _cut(_final(cast("AgentResult", event.detail)))
            message = {"role": "assistant", "parts": [{"type": "text", "content": final}], "finish_reason": "stop"}
            span.set_attributes(
                {
                    "gen_ai.output.messages": _content([message]),
                    "output.value": final,
                    "output.mime_type": "text/plain",
                }
            )
        status = str(event.data.get("status", ""))
        self._end_agent(event.agent_id, event.ts, status, str(event.data.get("error") or ""))
        phase = self._in_phase.get(event.agent_id)
        if phase is not None and phase in self._phases:
            span, last = self._phases[phase]
            self._phases[phase] = (span, max(last, event.ts))

    def _end_agent(self, agent_id: str, ts: float, status: str, error: str = "") -> None:
        """End `agent_id`'s span, and first any of its calls left open (cancelled, or a model error)."""
        if agent_id in self._chats:
            self._end(self._chats.pop(agent_id), ts, status if status != "completed" else "interrupted")
        for key in [k for k in self._tools if k[0] == agent_id]:
            self._end(self._tools.pop(key), ts, "cancelled" if status in ("", "completed") else status)
        span = self._agents.pop(agent_id)
        span.set_attribute("delegate.agent.status", status)
        if status != "completed":
            span.set_attribute("error.type", status or "interrupted")
            span.set_status(self._otel.StatusCode.ERROR, error or None)
        span.end(end_time=_ns(ts))

    def _end(self, span: Span, ts: float, error_type: str) -> None:
        span.set_attribute("error.type", error_type)
        span.set_status(self._otel.StatusCode.ERROR)
        span.end(end_time=_ns(ts))

    def _chat_started(self, event: Event) -> None:
        agent = self._agents.get(event.agent_id)
        model = self._models.get(event.agent_id, "")
        request_model = _request_model(model)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": _provider(model),
            "gen_ai.system": _provider(model),
            "gen_ai.request.model": request_model,
            "gen_ai.conversation.id": event.run_id,
            "delegate.agent.step": int(event.data.get("step", 0)),
            "openinference.span.kind": "LLM",
            "llm.model_name": request_model,
            "llm.provider": _provider(model),
        }
        if self._capture and event.detail is not None:
            attributes |= _chat_input(cast("ModelRequest", event.detail))
        self._chats[event.agent_id] = self._tracer.start_span(
            f"chat {request_model}",
            context=self._otel.set_span_in_context(agent) if agent is not None else None,
            kind=self._otel.SpanKind.CLIENT,
            attributes=attributes,
            start_time=_ns(event.ts),
        )

    def _chat_completed(self, event: Event) -> None:
        span = self._chats.pop(event.agent_id, None)
        if span is None:
            return
        _set_usage(span, event)
        calls = [str(name) for name in event.data.get("tool_calls", [])]
        span.set_attribute("gen_ai.response.finish_reasons", ["tool_calls" if calls else "stop"])
        if self._capture and event.detail is not None:
            span.set_attributes(_chat_output(cast("ModelResponse", event.detail)))
        span.end(end_time=_ns(event.ts))

    def _tool_started(self, event: Event) -> None:
        if event.tool_call_id is None:
            return
        name = str(event.data.get("name", ""))
        agent = self._agents.get(event.agent_id)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": event.tool_call_id,
            "gen_ai.tool.type": "function",
            "gen_ai.conversation.id": event.run_id,
            "openinference.span.kind": "TOOL",
            "tool.name": name,
        }
        if self._capture:
            arguments = _arguments(cast(dict[str, Any], event.data.get("arguments") or {}))
            attributes |= {
                "gen_ai.tool.call.arguments": arguments,
                "input.value": arguments,
                "input.mime_type": "application/json",
            }
        self._tools[(event.agent_id, event.tool_call_id)] = self._tracer.start_span(
            f"execute_tool {name}",
            context=self._otel.set_span_in_context(agent) if agent is not None else None,
            kind=self._otel.SpanKind.INTERNAL,
            attributes=attributes,
            start_time=_ns(event.ts),
        )

    def _tool_completed(self, event: Event) -> None:
        span = self._tools.pop((event.agent_id, event.tool_call_id or ""), None)
        if span is None:
            return
        if self._capture:
            whole = event.detail.content if isinstance(event.detail, ToolResultPart) else event.data.get("content", "")
            result = _cut(str(whole))
            span.set_attributes(
                {"gen_ai.tool.call.result": result, "output.value": result, "output.mime_type": "text/plain"}
            )
        if event.data.get("is_error"):
            span.set_attribute("error.type", "tool_error")
            span.set_status(self._otel.StatusCode.ERROR)
        span.end(end_time=_ns(event.ts))


def _agent_input(messages: list[Message]) -> dict[str, Any]:
    """An agent span's input: its first messages, and (as `input.value`) its prompt, the last of them
    that is the user's."""
    content = _Content(messages)
    prompt = next((m.text for m in reversed(messages) if m.role == "user" and m.text), "")
    out: dict[str, Any] = {
        "gen_ai.input.messages": content.json,
        "input.value": _cut(prompt),
        "input.mime_type": "text/plain",
    }
    if content.omitted:
        out["delegate.content.omitted_messages"] = content.omitted
    return out


def _chat_input(request: ModelRequest) -> dict[str, Any]:
    """A model call's span: what it was sent, its system instructions and the conversation."""
    content = _Content(request.messages)
    system = _cut(request.system)
    out: dict[str, Any] = {
        "gen_ai.input.messages": content.json,
        "input.value": content.json,
        "input.mime_type": "application/json",
    }
    first = 0
    if system:
        out["gen_ai.system_instructions"] = _content([{"type": "text", "content": system}])
        out |= {"llm.input_messages.0.message.role": "system", "llm.input_messages.0.message.content": system}
        first = 1
    out |= _openinference("llm.input_messages", content.messages, first)
    if content.omitted:
        out["delegate.content.omitted_messages"] = content.omitted
    return out


def _chat_output(response: ModelResponse) -> dict[str, Any]:
    """A model call's span: what it answered (its text as `output.value` when it called no tool)."""
    answer = _answer(response)
    messages = _content([answer])
    out: dict[str, Any] = {"gen_ai.output.messages": messages}
    if response.tool_calls:
        out |= {"output.value": messages, "output.mime_type": "application/json"}
    else:
        out |= {"output.value": _cut(response.text), "output.mime_type": "text/plain"}
    return out | _openinference("llm.output_messages", [answer])
