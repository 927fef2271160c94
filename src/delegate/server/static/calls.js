// What one model call was sent and what it answered (a turn's "Request and answer" in the run
// view), read when asked from GET /runs/{id}/agents/{agent_id}/calls: the agent's conversation as
// the store keeps it, and where each call's request and answer are in it. What the store does not
// keep is said to be "not kept", never filled in.
"use strict";

const ModelCalls = (() => {
  const TEXT_CHARS = 20_000; // the most characters of one message part shown
  const loaded = new Map(); // agent id -> { stamp, promise }, for the run on screen
  let run = null;

  // The agent's calls, read again once it moved on (a new request, another status, a follow-up).
  function calls(runId, agent) {
    if (run !== runId) {
      loaded.clear();
      run = runId;
    }
    const stamp = `${agent.status}|${agent.requests}|${agent.messages}`;
    let found = loaded.get(agent.id);
    if (!found || found.stamp !== stamp) {
      const path = `/runs/${encodeURIComponent(runId)}/agents/${encodeURIComponent(agent.id)}/calls`;
      found = { stamp, promise: api("GET", path) };
      found.promise.catch(() => loaded.delete(agent.id));
      loaded.set(agent.id, found);
    }
    return found.promise;
  }

  // Show or hide call number `index` of `agent` in `box`.
  async function toggle(button, box, runId, agent, index) {
    const opening = box.hidden;
    box.hidden = !opening;
    button.setAttribute("aria-expanded", String(opening));
    if (!opening) return;
    box.replaceChildren(el("p", { class: "muted small", text: "Reading…" }));
    try {
      box.replaceChildren(...render(await calls(runId, agent), index));
    } catch (err) {
      box.replaceChildren(el("p", { class: "error", text: err.message }));
    }
  }

  function notKept(text) {
    return el("p", { class: "not-kept", text });
  }

  function render(found, index) {
    const call = found.calls[index];
    if (!call) return [notKept("not stored yet: open it again in a moment")];
    const out = [];
    if (!found.kept) out.push(notKept(found.why_not_kept));
    else if (call.note) out.push(notKept(call.note));
    out.push(call.request_messages === null ? section("Request", notKept("not kept")) : request(found, index));
    const answer = call.answer_message === null ? null : found.messages[call.answer_message];
    if (answer) out.push(section("Answer", message(answer, true)));
    else out.push(section("Answer", notKept(call.completed_at === null ? "no answer came" : "not kept")));
    return out;
  }

  function section(title, ...children) {
    return el("div", { class: `sent-${title.toLowerCase()}` }, el("h5", { text: title }), ...children);
  }

  // The system prompt and the messages the call was sent: those since the previous call's answer
  // shown, the earlier ones folded.
  function request(found, index, call = found.calls[index]) {
    const n = call.request_messages;
    const before = found.calls.slice(0, index).reverse();
    const previous = before.find((c) => c.answer_message !== null && c.answer_message < n);
    const from = previous ? previous.answer_message : 0;
    const system =
      found.system === null
        ? notKept("not kept")
        : el("pre", { class: "msg-text", text: bounded(found.system, TEXT_CHARS) });
    const parts = [el("details", { class: "sent-system" }, el("summary", { text: "System prompt" }), system)];
    if (from > 0) {
      const earlier = found.messages.slice(0, from).map((m) => message(m));
      parts.push(el("details", { class: "sent-earlier" }, el("summary", { text: plural(from, "earlier message") }), ...earlier));
    }
    parts.push(...found.messages.slice(from, n).map((m) => message(m)));
    return section(`Request`, el("p", { class: "muted small", text: `the system prompt and ${plural(n, "message")}` }), ...parts);
  }

  function message(m, answer = false) {
    const role = [m.role, m.name, m.hidden ? "a note of the framework" : ""].filter(Boolean).join(" · ");
    return el("div", { class: `msg ${m.role}` }, el("div", { class: "msg-role", text: role }), ...m.parts.map((p) => part(p, answer)));
  }

  function text(value, cls = "msg-text") {
    return el("pre", { class: cls, text: bounded(value, TEXT_CHARS) });
  }

  function part(p, answer) {
    switch (p.kind) {
      case "text":
        return answer ? Markdown.render(p.text) : text(p.text);
      case "tool_call":
        return el(
          "div",
          { class: "msg-call" },
          el("span", { class: "call-name", text: p.name }),
          text(p.raw_arguments ?? JSON.stringify(p.arguments, null, 2), "msg-args"),
        );
      case "tool_result":
        return el(
          "div",
          { class: "msg-result" },
          el("div", { class: "msg-label", text: `result of ${p.name}${p.is_error ? " (an error)" : ""}` }),
          text(p.content, `msg-text${p.is_error ? " error" : ""}`),
        );
      case "reasoning":
        return el("details", {}, el("summary", { text: "reasoning" }), text(p.text));
      case "media":
        return el("div", { class: "msg-label", text: `[${[p.media_type, p.name, p.url].filter(Boolean).join(" ")}]` });
      default:
        return text(JSON.stringify(p));
    }
  }

  return { toggle };
})();
