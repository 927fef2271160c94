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

  function draw(pending) {
    const box = $("approvals");
    box.hidden = pending.length === 0;
    box.replaceChildren(el("h3", { text: `Waiting for your decision (${pending.length})` }), ...pending.map(card));
    const shown = $("run-status").textContent;
    if (pending.length && shown === "running") setStatus("waiting");
    if (!pending.length && shown === "waiting") setStatus("running");
  }

  function card(row) {
    const reason = el("input", {
      type: "text",
      class: "approval-reason",
      placeholder: "Why (given to the agent when you deny)",
      "aria-label": "Reason",
    });
    const who = row.subagent_type ? `${row.agent_id} (${row.subagent_type}: ${row.description || ""})` : row.agent_id;
    const buttons = [
      el("button", { type: "button", class: "approve", text: "Approve", onclick: () => decide(row, "approve", "") }),
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
      el("pre", { class: "approval-arguments", text: bounded(JSON.stringify(row.arguments, null, 2), ARG_CHARS) }),
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
      $("approvals").hidden = true;
      $("approvals").replaceChildren();
      refresh();
    },
    onEvent(type) {
      if (type === "approval.requested" || type === "approval.decided") refresh();
    },
  };
})();
