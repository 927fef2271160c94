// Calls that wait for a person, on the run view: each with the agent that asks, the tool, the
// rule and the call's arguments, and buttons to approve it or deny it (with a reason the agent is
// given). Kept apart from run.js, which calls Approvals.open(runId) when a run opens and
// Approvals.onEvent(type, ev) for each of its events; the list is read from
// GET /runs/{id}/approvals, so it is what the store holds, live or after a reload.
"use strict";

const Approvals = (() => {
  let runId = null;
  let asking = 0; // the latest refresh: an older one's answer is dropped

  async function refresh() {
    const id = runId;
    const mine = ++asking;
    if (!id) return;
    let rows;
    try {
      ({ approvals: rows } = await api("GET", `/runs/${encodeURIComponent(id)}/approvals`));
    } catch {
      return;
    }
    if (id === runId && mine === asking) draw(rows.filter((row) => row.decision === null));
  }

  // Each pending call's card by call id, kept across refreshes: a refresh (every approval event
  // brings one) never wipes a reason being typed nor the scroll that enabled Approve.
  const cards = new Map();

  function draw(pending) {
    const box = $("approvals");
    box.hidden = pending.length === 0;
    const waiting = new Set(pending.map((row) => row.call_id));
    for (const [callId, node] of cards) {
      if (waiting.has(callId)) continue;
      node.remove();
      cards.delete(callId);
    }
    let heading = box.querySelector("h3");
    if (!heading) box.prepend((heading = el("h3")));
    heading.textContent = `Waiting for your decision (${pending.length})`;
    for (const row of pending) {
      if (cards.has(row.call_id)) continue;
      cards.set(row.call_id, card(row));
      box.append(cards.get(row.call_id));
    }
    const shown = $("run-status").textContent;
    if (pending.length && shown === "running") setStatus("waiting");
    if (!pending.length && shown === "waiting") setStatus("running");
  }

  // Characters of arguments shown at once: past it the box scrolls, and Approve waits until the
  // person has scrolled to the end (a long command once hid `touch PWNED` past the part shown).
  const SEEN_AT_ONCE = 2000;
  // What prints nothing or reorders the text around it (zero-width, bidirectional overrides, tag
  // characters, C1 controls): shown as \uNNNN, as on the terminal (delegate._text.shown_arguments).
  const INVISIBLE =
    /[\u0080-\u009f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180e\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb]|[\udb40-\udb43][\udc00-\udfff]/g;

  function shownArguments(args) {
    const text = JSON.stringify(args ?? {}, null, 2);
    const escaped = (c) =>
      c
        .split("")
        .map((u) => `\\u${u.charCodeAt(0).toString(16).padStart(4, "0")}`)
        .join("");
    return text.replace(INVISIBLE, escaped);
  }

  function card(row) {
    const reason = el("input", {
      type: "text",
      class: "approval-reason",
      placeholder: "Why (given to the agent when you deny)",
      "aria-label": "Reason",
    });
    const who = row.subagent_type ? `${row.agent_id} (${row.subagent_type}: ${row.description || ""})` : row.agent_id;
    const text = shownArguments(row.arguments);
    const approve = el("button", {
      type: "button",
      class: "approve",
      text: "Approve",
      onclick: () => decide(row, "approve", ""),
    });
    const args = el("pre", { class: "approval-arguments", text });
    const count = el("p", { class: "muted approval-size", text: `arguments: ${fmt.format(text.length)} characters` });
    if (text.length > SEEN_AT_ONCE) {
      approve.disabled = true;
      approve.title = "Scroll through all of the arguments first";
      count.textContent += " (scroll to their end to approve)";
      args.addEventListener("scroll", () => {
        if (args.scrollTop + args.clientHeight >= args.scrollHeight - 2) {
          approve.disabled = false;
          approve.title = "";
        }
      });
    }
    const buttons = [
      approve,
      el("button", { type: "button", class: "deny", text: "Deny", onclick: () => decide(row, "deny", reason.value) }),
    ];
    return el(
      "div",
      { class: "approval", "data-call": row.call_id },
      el(
        "p",
        {},
        el("strong", { class: "mono", text: row.tool }),
        el("span", { class: "muted", text: ` asked by ${who}${row.rule ? ` · rule ${row.rule}` : ""}` }),
      ),
      count,
      args,
      el("div", { class: "actions" }, reason, ...buttons),
    );
  }

  async function decide(row, decision, reason) {
    const body = { decision };
    if (reason.trim()) body.reason = reason.trim();
    const path = `/runs/${encodeURIComponent(runId)}/approvals/${encodeURIComponent(row.call_id)}`;
    try {
      await api("POST", path, body);
    } catch (err) {
      showError("run-detail-error", err.message);
    }
    refresh();
  }

  return {
    open(id) {
      runId = id;
      cards.clear();
      $("approvals").hidden = true;
      $("approvals").replaceChildren();
      refresh();
    },
    onEvent(type) {
      if (type === "approval.requested" || type === "approval.decided") refresh();
    },
  };
})();
