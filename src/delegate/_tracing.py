"""OpenTelemetry traces of runs and batch items, in the GenAI semantic conventions.

Tracing is on when the standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, the `otel` extra is installed, and neither
`OTEL_SDK_DISABLED=true` nor `OTEL_TRACES_EXPORTER=none` says otherwise. The SDK and its OTLP/HTTP
exporter read the other `OTEL_*` variables themselves (headers, timeout, sampler, batch sizes,
`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`).

Spans are made from the runtime's events, after the fact and with the events' own timestamps, so
the loop itself knows nothing of tracing: an event sink (`EventSpans`, one per run or batch item)
opens a span on each start event and ends it on the matching end event:

    invoke_agent {name}   agent.started → agent.completed     (the lead, each subagent)
      chat {model}        model.request → model.response
      execute_tool {name} tool.started  → tool.completed
        invoke_agent ...  a subagent's span is a child of the `task` call that started it

Message content (prompts, answers, tool arguments and results) is left out unless
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`. Nothing here imports opentelemetry
until tracing is on: without the variable, a runtime has no tracing sink at all.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from ._events import Event, EventSink

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

_log = logging.getLogger("delegate.tracing")

CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_QUEUE_SIZE = 65_536


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


def flush() -> None:
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
    span.set_attribute("gen_ai.usage.input_tokens", int(usage.get("input_tokens", 0)))
    span.set_attribute("gen_ai.usage.output_tokens", int(usage.get("output_tokens", 0)))


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
        """Per subagent, the agent and tool call that started it (from `subagent.started`)."""
        self._prompt = ""
        self._handlers: dict[str, Callable[[Event], None]] = {
            "run.started": self._run_started,
            "subagent.started": self._subagent_started,
            "agent.started": self._agent_started,
            "agent.completed": self._agent_completed,
            "model.request": self._chat_started,
            "model.response": self._chat_completed,
            "tool.started": self._tool_started,
            "tool.completed": self._tool_completed,
            "run.completed": self._run_completed,
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

    def _run_started(self, event: Event) -> None:
        self._prompt = str(event.data.get("prompt", ""))

    def _subagent_started(self, event: Event) -> None:
        self._started_by[event.agent_id] = (event.parent_agent_id, event.tool_call_id)

    def _run_completed(self, event: Event) -> None:
        for agent_id in list(self._agents):  # left open: the run ended without them
            self._end_agent(agent_id, event.ts, "interrupted")

    def _agent_started(self, event: Event) -> None:
        name = str(event.data.get("name", event.agent_id))
        model = str(event.data.get("model", ""))
        self._models[event.agent_id] = model
        parent_agent, call_id = self._started_by.get(event.agent_id, (event.parent_agent_id, None))
        parent = self._tools.get((parent_agent, call_id)) if parent_agent and call_id else None
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": name,
            "gen_ai.agent.id": event.agent_id,
            "gen_ai.conversation.id": event.run_id,
            "gen_ai.provider.name": _provider(model),
            "gen_ai.system": _provider(model),
            "gen_ai.request.model": _request_model(model),
        }
        if call_id and call_id.startswith("batch:"):  # a batch item: `batch:{id}:{key}:{attempt}`
            batch_id, _, rest = call_id[len("batch:") :].partition(":")
            key, _, attempt = rest.rpartition(":")
            attributes |= {"delegate.batch.id": batch_id, "delegate.batch.item.key": key}
            if attempt.isdigit():
                attributes["delegate.batch.item.attempt"] = int(attempt)
        if self._capture and event.agent_id == "lead" and self._prompt:
            attributes["gen_ai.input.messages"] = _content(
                [{"role": "user", "parts": [{"type": "text", "content": self._prompt}]}]
            )
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
        status = str(event.data.get("status", ""))
        self._end_agent(event.agent_id, event.ts, status, str(event.data.get("error") or ""))

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
        self._chats[event.agent_id] = self._tracer.start_span(
            f"chat {request_model}",
            context=self._otel.set_span_in_context(agent) if agent is not None else None,
            kind=self._otel.SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": _provider(model),
                "gen_ai.system": _provider(model),
                "gen_ai.request.model": request_model,
                "gen_ai.conversation.id": event.run_id,
                "delegate.agent.step": int(event.data.get("step", 0)),
            },
            start_time=_ns(event.ts),
        )

    def _chat_completed(self, event: Event) -> None:
        span = self._chats.pop(event.agent_id, None)
        if span is None:
            return
        _set_usage(span, event)
        calls = [str(name) for name in event.data.get("tool_calls", [])]
        span.set_attribute("gen_ai.response.finish_reasons", ["tool_calls" if calls else "stop"])
        if self._capture:
            parts: list[dict[str, Any]] = []
            if text := event.data.get("text"):
                parts.append({"type": "text", "content": text})
            parts += [{"type": "tool_call", "name": name} for name in calls]
            span.set_attribute("gen_ai.output.messages", _content([{"role": "assistant", "parts": parts}]))
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
        }
        if self._capture:
            attributes["gen_ai.tool.call.arguments"] = _content(event.data.get("arguments", {}))
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
            span.set_attribute("gen_ai.tool.call.result", _content(event.data.get("content", "")))
        if event.data.get("is_error"):
            span.set_attribute("error.type", "tool_error")
            span.set_status(self._otel.StatusCode.ERROR)
        span.end(end_time=_ns(event.ts))
