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
