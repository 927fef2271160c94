// The runs table (shown when no run is picked): prompt, status, model, subagents (those running now
// too), tokens, cost and duration (so far, of a live run) of each run, searched, filtered by status
// and paged by the server (GET /runs).
"use strict";

const runTable = { offset: 0, limit: 20, q: "", status: "" };

// How long the run took, or has taken so far while it is live (a run that stopped without an end
// time, interrupted, says nothing rather than a time that grows).
function runTime(run) {
  const live = run.status === "running" || run.status === "waiting";
  return live || run.completed_at ? lasted(run.created_at, live ? null : run.completed_at) : "—";
}

function runRow(run) {
  const open = () => (location.hash = `#/runs/${encodeURIComponent(run.run_id)}`);
  const failed = run.failed_subagents || 0;
  const running = run.status === "running" || run.status === "waiting" ? run.running_subagents || 0 : 0;
  const subagents = el(
    "td",
    { "data-label": "Subagents", class: "nowrap" },
    fmt.format((run.subagent_count || 0) + running),
    running ? " " : null,
    running ? el("span", { class: "badge running", title: "subagents at work now", text: `${running} running` }) : null,
    failed ? " " : null,
    failed ? el("span", { class: "badge failed", title: "subagents that did not complete", text: `${failed} failed` }) : null,
  );
  return el(
    "tr",
    { class: "clickable", "data-run": run.run_id, onclick: open },
    el("td", { "data-label": "Prompt", class: "clip" }, el("a", { href: `#/runs/${encodeURIComponent(run.run_id)}`, text: run.prompt })),
    el("td", { "data-label": "Status" }, badge(run.status)),
    el("td", { "data-label": "Model", class: "mono", text: run.model }),
    subagents,
    el("td", { "data-label": "Tokens", class: "nowrap", text: fmt.format(tokens(run.usage)) }),
    el("td", { "data-label": "Cost", class: "nowrap", text: money(run.usage && run.usage.cost_usd) }),
    el("td", { "data-label": "Duration", class: "nowrap", text: runTime(run) }),
  );
}

async function loadRunTable() {
  const asked = runTableAsked();
  const { runs } = await api("GET", `/runs?${asked}`);
  if (asked !== runTableAsked()) return; // a later search or page is on its way
  const shown = runs.slice(0, runTable.limit);
  $("runs-table").querySelector("tbody").replaceChildren(...shown.map(runRow));
  $("runs-table-empty").hidden = shown.length > 0;
  $("runs-prev").disabled = runTable.offset === 0;
  $("runs-next").disabled = runs.length <= runTable.limit;
  $("runs-page").textContent = shown.length
    ? `${fmt.format(runTable.offset + 1)}–${fmt.format(runTable.offset + shown.length)}`
    : "";
}

function runTableAsked() {
  // One more than a page: whether there is a next page, without counting them all.
  const params = new URLSearchParams({ offset: runTable.offset, limit: runTable.limit + 1 });
  if (runTable.q) params.set("q", runTable.q);
  if (runTable.status) params.set("status", runTable.status);
  return params.toString();
}

document.addEventListener("DOMContentLoaded", () => {
  let typing = null;
  const refilter = () => {
    runTable.q = $("runs-search").value.trim();
    runTable.status = $("runs-status").value;
    runTable.offset = 0;
    loadRunTable().catch(() => {});
  };
  $("runs-filter").addEventListener("submit", (e) => {
    e.preventDefault();
    refilter();
  });
  $("runs-search").addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(refilter, 250);
  });
  $("runs-status").addEventListener("change", refilter);
  $("runs-prev").addEventListener("click", () => {
    runTable.offset = Math.max(0, runTable.offset - runTable.limit);
    loadRunTable().catch(() => {});
  });
  $("runs-next").addEventListener("click", () => {
    runTable.offset += runTable.limit;
    loadRunTable().catch(() => {});
  });
});
