// An agent's turns as the drill-down lists them: each model call (step, model, tokens, cost, time)
// and each tool call (arguments, result, time), in the order they happened. Shared by the run
// view (a run's agents, run.js) and the batch view (an item's subagent, app.js): `view` is
// { start, done, runId, byCall } of what is on screen.
"use strict";

function since(view, ts) {
  if (view.start === null || ts === null || ts === undefined) return "";
  return `+${Timeline.seconds(Math.max(0, ts - view.start))}`;
}

function argsText(args) {
  if (args === undefined || args === null) return "";
  const text = JSON.stringify(args, null, 2);
  return bounded(text === "{}" ? "(no arguments)" : text, ARG_CHARS);
}

function drawCall(view, agent, call) {
  const sub = call.name === "task" && agent.id === "lead" ? view.byCall.get(call.id) : null;
  const took = call.end !== null ? Timeline.seconds(call.end - call.ts) : view.done ? "no result" : "running";
  const head = el(
    "div",
    { class: "call-head" },
    el("span", { class: "call-time", text: since(view, call.ts) }),
    el("span", { class: "call-name", text: call.name }),
    el("span", { class: "call-dur", text: took }),
    call.error ? el("span", { class: "badge error", text: "error" }) : null,
    sub ? el("button", { type: "button", class: "link", text: `open ${sub}`, onclick: () => view.open(sub) }) : null,
  );
  const parts = [head, el("pre", { class: "call-args", text: argsText(call.args) })];
  if (call.end !== null) {
    const content = call.content || "";
    parts.push(el("pre", { class: `call-result${call.error ? " error" : ""}`, text: content || "(empty result)" }));
    if (typeof call.size === "number" && call.size > content.length) {
      const cut = `first ${fmt.format(content.length)} of ${fmt.format(call.size)} characters`;
      parts.push(el("div", { class: "call-size", text: cut }));
    }
  }
  return el("li", { class: `call${call.error ? " failed" : ""}`, "data-call": call.id || "" }, ...parts);
}

// One model call of `agent`: its step, model, tokens, cost and time; "Request and answer" shows
// what it was sent and answered, as far as the store keeps them (calls.js).
function drawTurn(view, agent, turn) {
  const took = turn.end === null ? (view.done ? "no answer" : "waiting") : Timeline.seconds(turn.end - turn.ts);
  const usage = turn.usage;
  const text = turn.text || (turn.tools?.length ? `calls ${turn.tools.join(", ")}` : "");
  const body = el("div", { class: "turn-body", hidden: true });
  const runId = view.runId;
  const open =
    turn.index === null || !runId
      ? null
      : el("button", {
          type: "button",
          class: "link turn-open",
          "aria-expanded": "false",
          text: "Request and answer",
          onclick: () => ModelCalls.toggle(open, body, runId, agent, turn.index),
        });
  return el(
    "li",
    { class: "turn", "data-step": String(turn.step || "") },
    el(
      "div",
      { class: "turn-head" },
      el("span", { class: "call-time", text: since(view, turn.ts) }),
      el("span", { class: "turn-label", text: `step ${turn.step || "?"}` }),
      agent.model ? el("span", { class: "turn-model mono", text: agent.model }) : null,
      el("span", { class: "turn-text", text }),
      el("span", {
        class: "turn-tokens",
        title: usage ? `${fmt.format(usage.input_tokens || 0)} in · ${fmt.format(usage.output_tokens || 0)} out` : "",
        text: usage ? `${fmt.format(tokens(usage))} tokens` : "",
      }),
      el("span", { class: "turn-cost", text: usage ? money(usage.cost_usd) : "" }),
      el("span", { class: "call-dur", text: took }),
      open,
    ),
    body,
  );
}

// An entry's element, made again only when the entry changed (a call ended, its subagent
// started): a lead with a thousand calls is not redrawn whole at every event.
function entryNode(view, agent, entry) {
  const key =
    entry.kind === "call"
      ? `${entry.end}|${view.byCall.get(entry.id) || ""}|${view.done}`
      : entry.kind === "turn"
        ? `${entry.end}|${entry.end === null && view.done}`
        : "";
  if (!entry.node || entry.nodeKey !== key) {
    if (entry.kind === "call") entry.node = drawCall(view, agent, entry);
    else if (entry.kind === "turn") entry.node = drawTurn(view, agent, entry);
    else entry.node = el("li", { class: "note", text: entry.text });
    entry.nodeKey = key;
  }
  return entry.node;
}

// The turns of a batch item's subagent (GET /batches/{id}/turns?key=K: its last attempt's model
// calls and tool calls, kept as their events when the attempt ended), drawn as a run's subagent's
// are. Read when the item is picked, again once it changed (another attempt, another status).
const ItemTurns = (() => {
  const loaded = new Map(); // "batch id|key" -> { stamp, promise }

  function read(batchId, item) {
    const id = `${batchId}|${item.key}`;
    const stamp = `${item.status}|${item.attempts}|${item.finished_at}`;
    let found = loaded.get(id);
    if (!found || found.stamp !== stamp) {
      const query = new URLSearchParams({ key: item.key }); // any key, ".." too: never in the path
      found = { stamp, promise: api("GET", `/batches/${encodeURIComponent(batchId)}/turns?${query}`) };
      found.promise.catch(() => loaded.delete(id));
      loaded.set(id, found);
    }
    return found.promise;
  }

  // The events folded into an agent's entries, as the run view folds a subagent's (run.js).
  function fold(events, model) {
    const agent = { id: events[0].agent_id, model, entries: [], calls: new Map(), pending: null };
    for (const ev of events) {
      if (ev.agent_id !== agent.id) continue; // its own turns, not those of subagents it started
      const data = ev.data || {};
      if (ev.type === "model.request") {
        agent.pending = { kind: "turn", ts: ev.ts, end: null, step: data.step, index: null, text: "", usage: null };
        agent.entries.push(agent.pending);
      } else if (ev.type === "model.response") {
        const turn = agent.pending || { kind: "turn", ts: ev.ts, step: data.step, index: null };
        if (!agent.pending) agent.entries.push(turn);
        Object.assign(turn, { end: ev.ts, text: data.text || "", usage: data.usage || {}, tools: data.tool_calls });
        agent.pending = null;
      } else if (ev.type === "tool.started") {
        const call = { kind: "call", id: ev.tool_call_id, ts: ev.ts, name: data.name, args: data.arguments, end: null };
        agent.entries.push(call);
        if (ev.tool_call_id) agent.calls.set(ev.tool_call_id, call);
      } else if (ev.type === "tool.completed") {
        const call = agent.calls.get(ev.tool_call_id);
        if (call) Object.assign(call, { end: ev.ts, content: data.content, size: data.size, error: data.is_error });
      } else {
        const text =
          ev.type === "compaction"
            ? `context compacted: ${data.messages_before} → ${data.messages_after} messages`
            : data.reason || JSON.stringify(data);
        agent.entries.push({ kind: "note", ts: ev.ts, text });
      }
    }
    return agent;
  }

  // Draw the turns of `item` (of batch `batchId`) in `box`, unless `shown()` says it is gone.
  async function show(box, batchId, item, shown) {
    if (item.status === "queued" || item.status === "running") {
      box.replaceChildren(el("p", { class: "muted small", text: "Its turns are kept when the attempt ends." }));
      return;
    }
    let found;
    try {
      found = await read(batchId, item);
    } catch (err) {
      if (shown()) box.replaceChildren(el("p", { class: "error", text: err.message }));
      return;
    }
    if (!shown()) return;
    if (!found.turns || !found.turns.length) {
      box.replaceChildren(el("p", { class: "muted small", text: "No turns kept (no attempt ran a subagent, or it ran before they were kept)." }));
      return;
    }
    const agent = fold(found.turns, (item.record && item.record.model) || "");
    const start = item.started_at ? Date.parse(item.started_at) / 1000 : found.turns[0].ts;
    const view = { start, done: true, runId: null, byCall: new Map(), open: () => {} };
    const tools = agent.entries.filter((e) => e.kind === "call").length;
    const attempt = item.attempts > 1 ? ` of its last attempt (${item.attempts})` : "";
    box.replaceChildren(
      el("h4", { text: `Turns${attempt} (${plural(tools, "tool call")})` }),
      el("ol", { class: "calls" }, ...agent.entries.map((e) => entryNode(view, agent, e))),
      el("p", { class: "muted small", text: "What each model call was sent is not kept for a batch item: its answer's start and its tool calls are." }),
    );
  }

  return { show };
})();
