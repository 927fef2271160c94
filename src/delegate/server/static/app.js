// delegate web UI: plain JavaScript, no build step, no third-party code.
// Every API call sends the token from localStorage as "Authorization: Bearer <token>". Event
// streams are read with fetch() (EventSource cannot send that header) and parsed here.
"use strict";

const TOKEN_KEY = "delegate.token";
const $ = (id) => document.getElementById(id);

// -- API -------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function token() {
  return localStorage.getItem(TOKEN_KEY) || "";
}

async function api(method, path, body) {
  const headers = { Authorization: `Bearer ${token()}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(`/api/v1${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (res.status === 401) {
    signOut("The server did not accept the token: paste it again.");
    throw new ApiError(401, "unauthorized");
  }
  const data = await res.json().catch(() => null);
  if (!res.ok) {
    const message = (data && data.error && data.error.message) || `${res.status} ${res.statusText}`;
    throw new ApiError(res.status, message);
  }
  return data;
}

// Follow a server-sent event stream until `isLast(type)` or until `signal` aborts; reconnects
// after a dropped connection, resuming after the last event id seen.
async function followEvents(path, onEvent, isLast, signal) {
  let lastId = 0;
  for (let attempt = 0; !signal.aborted; attempt++) {
    try {
      const sep = path.includes("?") ? "&" : "?";
      const url = lastId ? `/api/v1${path}${sep}after=${lastId}` : `/api/v1${path}`;
      const res = await fetch(url, { headers: { Authorization: `Bearer ${token()}` }, signal });
      if (res.status === 401) return signOut("The server did not accept the token: paste it again.");
      if (!res.ok) throw new ApiError(res.status, `${res.status}`);
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.search(/\r?\n\r?\n/)) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut).replace(/^\r?\n\r?\n/, "");
          const ev = parseBlock(block);
          if (!ev) continue;
          if (ev.id) lastId = Number(ev.id) || lastId;
          onEvent(ev.type, ev.data);
          if (isLast(ev.type, ev.data)) return;
        }
      }
    } catch (err) {
      if (signal.aborted) return;
      if (err instanceof ApiError && err.status === 404) return;
    }
    await new Promise((r) => setTimeout(r, Math.min(5000, 500 * (attempt + 1))));
  }
}

function parseBlock(block) {
  let type = "message";
  let id = "";
  const data = [];
  for (const line of block.split(/\r?\n/)) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") type = value;
    else if (field === "data") data.push(value);
    else if (field === "id") id = value;
  }
  if (!data.length) return null;
  try {
    return { type, id, data: JSON.parse(data.join("\n")) };
  } catch {
    return null;
  }
}

// -- small helpers -----------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

function badge(status) {
  return el("span", { class: `badge ${status}`, text: status.replace("_", " ") });
}

const fmt = new Intl.NumberFormat();
const tokens = (usage) => (usage ? (usage.input_tokens || 0) + (usage.output_tokens || 0) : 0);

function showError(id, message) {
  const node = $(id);
  node.textContent = message || "";
  node.hidden = !message;
}

function when(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return d.toLocaleString(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
}

// -- sign in -----------------------------------------------------------------------------------

function signOut(message) {
  localStorage.removeItem(TOKEN_KEY);
  stopFollowing();
  current = { view: "", id: "" };
  $("nav").hidden = true;
  $("account").hidden = true;
  for (const v of document.querySelectorAll(".view")) v.hidden = true;
  $("signin").hidden = false;
  showError("token-error", message || "");
  $("token").focus();
}

async function signIn(value) {
  localStorage.setItem(TOKEN_KEY, value);
  try {
    await api("GET", "/runs?limit=1");
  } catch (err) {
    if (!(err instanceof ApiError) || err.status !== 401) showError("token-error", err.message);
    return;
  }
  $("signin").hidden = true;
  $("nav").hidden = false;
  $("account").hidden = false;
  route();
}

// -- routing -----------------------------------------------------------------------------------

let current = { view: "", id: "" };

function route() {
  if (!token()) return signOut();
  const [, view = "runs", raw = ""] = location.hash.replace(/^#/, "").split("/");
  let id = "";
  try {
    id = decodeURIComponent(raw); // ids travel URL-encoded in the hash
  } catch {
    id = ""; // a malformed hash shows the list
  }
  const name = ["runs", "batches", "agents"].includes(view) ? view : "runs";
  for (const v of document.querySelectorAll(".view")) v.hidden = v.id !== `view-${name}`;
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.view === name);
  const changed = current.view !== name || current.id !== id;
  current = { view: name, id };
  if (!changed) return;
  stopFollowing();
  if (name === "runs") showRuns(current.id);
  if (name === "batches") showBatches(current.id);
  if (name === "agents") showAgents();
}

let following = null; // the AbortController of the stream on screen
let batchTimer = null;

function stopFollowing() {
  if (following) following.abort();
  following = null;
  if (batchTimer) clearInterval(batchTimer);
  batchTimer = null;
}

// -- runs --------------------------------------------------------------------------------------

async function loadRuns() {
  const { runs } = await api("GET", "/runs?limit=30");
  const list = $("run-list");
  list.replaceChildren(
    ...runs.map((r) =>
      el(
        "li",
        {},
        el(
          "a",
          { href: `#/runs/${encodeURIComponent(r.run_id)}`, class: r.run_id === current.id ? "active" : "" },
          el("span", { class: "title", text: r.prompt }),
          el("span", { class: "sub" }, badge(r.status), el("span", { text: when(r.created_at) })),
        ),
      ),
    ),
  );
  $("run-list-empty").hidden = runs.length > 0;
}

function showRuns(runId) {
  loadRuns().catch(() => {});
  $("run-empty").hidden = Boolean(runId);
  $("run-detail").hidden = !runId;
  if (runId) openRun(runId);
}

// The tree of agents of the run on screen, rebuilt from its events.
let tree = null;

function newTree(runId) {
  tree = { runId, agents: new Map(), input: 0, output: 0, subagents: 0, done: false };
  $("agent-tree").replaceChildren();
  $("event-log").replaceChildren();
  $("event-count").textContent = "0";
  $("run-final").replaceChildren(el("span", { class: "muted", text: "The answer appears when the run ends." }));
  setStats();
}

function agentNode(id, parentId) {
  let agent = tree.agents.get(id);
  if (agent) return agent;
  agent = { id, name: id, type: "", description: "", status: "running", steps: 0, usage: null, summary: "" };
  const li = el("li", { "data-agent": id });
  const row = el("div", { class: "node" });
  const summary = el("div", { class: "node-summary", hidden: true });
  const children = el("ul");
  li.append(row, summary, children);
  agent.dom = { li, row, summary, children };
  const parent = parentId && tree.agents.get(parentId);
  (parent ? parent.dom.children : $("agent-tree")).append(li);
  tree.agents.set(id, agent);
  return agent;
}

function drawAgent(agent) {
  const meta = [
    `${agent.steps} step${agent.steps === 1 ? "" : "s"}`,
    `${fmt.format(tokens(agent.usage))} tokens`,
  ].join(" · ");
  const parts = [
    el("span", { class: `dot ${agent.status}`, title: agent.status }),
    el("span", { class: "name", text: agent.id }),
    agent.type ? el("span", { class: "type", text: agent.type }) : null,
    el("span", { class: "desc", text: agent.description }),
    el("span", { class: "meta", text: meta }),
    badge(agent.status),
  ];
  agent.dom.row.replaceChildren(...parts.filter(Boolean));
  agent.dom.summary.textContent = agent.summary;
  agent.dom.summary.hidden = !agent.summary;
}

function setStats() {
  $("stat-in").textContent = fmt.format(tree.input);
  $("stat-out").textContent = fmt.format(tree.output);
  $("stat-subagents").textContent = fmt.format(tree.subagents);
}

function setStatus(status) {
  const node = $("run-status");
  node.className = `badge ${status}`;
  node.textContent = status.replace("_", " ");
  $("cancel-run").hidden = status !== "running";
}

function onRunEvent(type, ev) {
  if (!tree || ev.run_id !== tree.runId) return;
  const data = ev.data || {};
  const log = $("event-log");
  log.append(el("li", { text: `${type}  ${ev.agent_id}${ev.tool_call_id ? "  " + ev.tool_call_id : ""}` }));
  $("event-count").textContent = String(log.childElementCount);
  switch (type) {
    case "run.started": {
      const lead = agentNode("lead");
      lead.description = "the agent you asked";
      $("stat-model").textContent = data.model || "–";
      drawAgent(lead);
      break;
    }
    case "subagent.started": {
      const agent = agentNode(ev.agent_id, ev.parent_agent_id || "lead");
      agent.type = data.type || "";
      agent.description = data.description || "";
      tree.subagents += 1;
      setStats();
      drawAgent(agent);
      break;
    }
    case "agent.started": {
      drawAgent(agentNode(ev.agent_id, ev.parent_agent_id || "lead"));
      break;
    }
    case "model.response": {
      const agent = agentNode(ev.agent_id, ev.parent_agent_id || "lead");
      agent.steps = data.step || agent.steps + 1;
      const usage = data.usage || {};
      agent.usage = {
        input_tokens: ((agent.usage && agent.usage.input_tokens) || 0) + (usage.input_tokens || 0),
        output_tokens: ((agent.usage && agent.usage.output_tokens) || 0) + (usage.output_tokens || 0),
      };
      tree.input += usage.input_tokens || 0;
      tree.output += usage.output_tokens || 0;
      setStats();
      drawAgent(agent);
      break;
    }
    case "subagent.heartbeat": {
      const agent = agentNode(ev.agent_id, ev.parent_agent_id || "lead");
      if (data.usage) agent.usage = data.usage;
      drawAgent(agent);
      break;
    }
    case "subagent.completed":
    case "agent.completed": {
      const agent = agentNode(ev.agent_id, ev.parent_agent_id || "lead");
      agent.status = data.status || agent.status;
      if (typeof data.steps === "number") agent.steps = data.steps;
      if (data.usage) agent.usage = data.usage;
      if (data.error) agent.summary = data.error;
      drawAgent(agent);
      break;
    }
    case "run.completed": {
      tree.done = true;
      setStatus(data.status || "completed");
      const final = $("run-final");
      if (data.final) final.textContent = data.final;
      else final.replaceChildren(el("span", { class: "muted", text: data.error || "The run ended without an answer." }));
      if (data.usage) {
        tree.input = data.usage.input_tokens || 0;
        tree.output = data.usage.output_tokens || 0;
        setStats();
      }
      loadRecord(tree.runId);
      loadRuns().catch(() => {});
      break;
    }
  }
}

// The stored record of a finished run: each subagent's summary, typed result and final status,
// in the order the lead called them.
async function loadRecord(runId) {
  try {
    const run = await api("GET", `/runs/${encodeURIComponent(runId)}`);
    if (!tree || tree.runId !== runId) return;
    for (const s of run.subagents || []) {
      const agent = agentNode(s.id, s.parent_agent_id || "lead");
      agent.type = s.type;
      agent.description = s.description;
      agent.status = s.status;
      agent.steps = s.steps;
      agent.usage = s.usage;
      agent.summary = s.summary || s.error || "";
      if (s.result !== null && s.result !== undefined) {
        agent.summary = [agent.summary, `Result: ${JSON.stringify(s.result)}`].filter(Boolean).join("\n");
      }
      agent.dom.li.parentNode.append(agent.dom.li);
      drawAgent(agent);
    }
    if (run.error) showError("run-detail-error", run.error);
  } catch (err) {
    showError("run-detail-error", err.message);
  }
}

async function openRun(runId) {
  newTree(runId);
  showError("run-detail-error", "");
  $("run-id").textContent = runId;
  $("run-prompt").textContent = "";
  let run;
  try {
    run = await api("GET", `/runs/${encodeURIComponent(runId)}`);
  } catch (err) {
    showError("run-detail-error", err.message);
    return;
  }
  if (!tree || tree.runId !== runId) return;
  $("run-prompt").textContent = run.prompt;
  $("stat-model").textContent = run.model || "–";
  setStatus(run.status);
  following = new AbortController();
  followEvents(
    `/runs/${encodeURIComponent(runId)}/events`,
    onRunEvent,
    (type) => type === "run.completed",
    following.signal,
  );
}

async function startRun(event) {
  event.preventDefault();
  showError("run-error", "");
  const body = { prompt: $("prompt").value };
  const model = $("model").value.trim();
  const parallel = $("max-parallel").value.trim();
  if (model) body.model = model;
  if (parallel) body.max_parallel = Number(parallel);
  const button = $("start-run");
  button.disabled = true;
  try {
    const { run_id } = await api("POST", "/runs", body);
    $("prompt").value = "";
    location.hash = `#/runs/${encodeURIComponent(run_id)}`;
  } catch (err) {
    showError("run-error", err.message);
  } finally {
    button.disabled = false;
  }
}

async function cancelRun() {
  if (!tree) return;
  $("cancel-run").disabled = true;
  try {
    const run = await api("POST", `/runs/${encodeURIComponent(tree.runId)}/cancel`);
    setStatus(run.status);
  } catch (err) {
    showError("run-detail-error", err.message);
  } finally {
    $("cancel-run").disabled = false;
  }
}

// -- batches -----------------------------------------------------------------------------------

const ITEM_STATUSES = ["queued", "running", "succeeded", "failed", "cancelled"];
let itemPage = { offset: 0, limit: 50 };

function progress(batch) {
  const bar = el("div", { class: "progress", title: `${batch.total} items` });
  for (const s of ["succeeded", "failed", "running", "cancelled"]) {
    const n = batch.counts[s] || 0;
    if (!n) continue;
    const part = el("span", { class: s });
    part.style.width = `${(100 * n) / Math.max(1, batch.total)}%`; // CSSOM: allowed by the page's CSP
    bar.append(part);
  }
  const counts = el("div", { class: "counts" });
  for (const s of ITEM_STATUSES) {
    if (batch.counts[s]) counts.append(el("span", {}, el("b", { text: fmt.format(batch.counts[s]) }), ` ${s}`));
  }
  counts.append(el("span", { text: `of ${fmt.format(batch.total)}` }));
  return el("div", {}, bar, counts);
}

function batchActions(batch) {
  const act = (label, path, enabled) =>
    el("button", {
      type: "button",
      class: "small",
      text: label,
      disabled: !enabled,
      onclick: (e) => {
        e.stopPropagation();
        batchAction(batch.id, path);
      },
    });
  const open = batch.status === "running" || batch.status === "paused";
  return el(
    "td",
    { class: "cell-actions" },
    act("Pause", "pause", batch.status === "running"),
    act("Resume", "resume", batch.status === "paused"),
    act("Cancel", "cancel", open),
    act("Retry failed", "retry", (batch.counts.failed || 0) > 0 && batch.status !== "cancelled"),
    el("button", {
      type: "button",
      class: "small",
      text: "Export",
      onclick: (e) => {
        e.stopPropagation();
        exportBatch(batch.id);
      },
    }),
  );
}

async function loadBatches() {
  const { batches } = await api("GET", "/batches?limit=50");
  const body = $("batch-table").querySelector("tbody");
  body.replaceChildren(
    ...batches.map((b) =>
      el(
        "tr",
        {
          class: `clickable${b.id === current.id ? " selected" : ""}`,
          "data-batch": b.id,
          onclick: () => (location.hash = `#/batches/${encodeURIComponent(b.id)}`),
        },
        el(
          "td",
          {},
          el("div", { text: b.title }),
          el("div", { class: "muted small mono", text: `${b.id} · ${b.subagent_type}` }),
        ),
        el("td", {}, badge(b.status)),
        el("td", {}, progress(b)),
        batchActions(b),
      ),
    ),
  );
  $("batch-empty").hidden = batches.length > 0;
  return batches;
}

async function batchAction(batchId, action) {
  showError("batch-action-error", "");
  try {
    await api("POST", `/batches/${encodeURIComponent(batchId)}/${action}`);
  } catch (err) {
    showError("batch-action-error", err.message);
  }
  await loadBatches().catch(() => {});
  if (current.view === "batches" && current.id === batchId) {
    loadItems(batchId).catch(() => {});
    followBatch(batchId);
  }
}

async function exportBatch(batchId) {
  const res = await fetch(`/api/v1/batches/${encodeURIComponent(batchId)}/results.jsonl`, {
    headers: { Authorization: `Bearer ${token()}` },
  });
  if (!res.ok) return showError("batch-action-error", `export failed: ${res.status}`);
  const url = URL.createObjectURL(await res.blob());
  const a = el("a", { href: url, download: `batch-${batchId}.jsonl` });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

async function loadItems(batchId) {
  const status = $("item-filter").value;
  const query = new URLSearchParams({ status, offset: itemPage.offset, limit: itemPage.limit });
  const { items } = await api("GET", `/batches/${encodeURIComponent(batchId)}/items?${query}`);
  const body = $("item-table").querySelector("tbody");
  body.replaceChildren(
    ...items.map((item) =>
      el(
        "tr",
        {},
        el("td", { class: "mono", text: item.key }),
        el("td", {}, badge(item.status)),
        el("td", { text: String(item.attempts) }),
        el("td", { class: "clip", text: item.error || item.summary || "", title: item.error || item.summary || "" }),
        el(
          "td",
          { class: "cell-actions" },
          item.status === "failed"
            ? el("button", {
                type: "button",
                class: "small",
                text: "Retry",
                onclick: () => retryItem(batchId, item.key),
              })
            : null,
        ),
      ),
    ),
  );
  $("items-prev").disabled = itemPage.offset === 0;
  $("items-next").disabled = items.length < itemPage.limit;
  $("items-page").textContent = items.length
    ? `items ${itemPage.offset + 1}–${itemPage.offset + items.length}`
    : "no items";
}

// The key goes in the body, never in the path: a key such as ".." would be resolved away as a dot
// segment (even percent-encoded), and `items/../retry` would retry every failed item.
async function retryItem(batchId, key) {
  if (typeof key !== "string" || !key) return;
  try {
    await api("POST", `/batches/${encodeURIComponent(batchId)}/retry`, { key });
  } catch (err) {
    showError("batch-action-error", err.message);
  }
  loadItems(batchId).catch(() => {});
  loadBatches().catch(() => {});
  if (current.view === "batches" && current.id === batchId) followBatch(batchId);
}

async function showBatches(batchId) {
  loadTypes().catch(() => {});
  loadBatches().catch(() => {});
  batchTimer = setInterval(() => loadBatches().catch(() => {}), 3000);
  $("batch-detail").hidden = !batchId;
  if (!batchId) return;
  itemPage = { offset: 0, limit: 50 };
  $("batch-heading").textContent = `Items of ${batchId}`;
  loadItems(batchId).catch((err) => showError("batch-action-error", err.message));
  followBatch(batchId);
}

const DONE = ["completed", "failed", "cancelled"];

// Follow the batch on screen until it is done; an action (retry, resume) starts following again.
function followBatch(batchId) {
  if (following) following.abort();
  following = new AbortController();
  let pending = null;
  followEvents(
    `/batches/${encodeURIComponent(batchId)}/events`,
    (type, data) => {
      if (type === "batch.status") $("batch-heading").textContent = `Items of ${data.title}`;
      // Coalesce bursts of item events into one reload of the page on screen.
      if (!pending) {
        pending = setTimeout(() => {
          pending = null;
          loadItems(batchId).catch(() => {});
          loadBatches().catch(() => {});
        }, 300);
      }
    },
    (type, data) => type === "batch.status" && DONE.includes(data.status),
    following.signal,
  );
}

let typesLoaded = false;

async function loadTypes() {
  if (typesLoaded) return;
  const { agents } = await api("GET", "/agents");
  const usable = agents.filter((a) => a.available);
  $("batch-type").replaceChildren(...usable.map((a) => el("option", { value: a.name, text: a.name })));
  typesLoaded = true;
}

async function submitBatch(event) {
  event.preventDefault();
  showError("batch-error", "");
  const items = [];
  const lines = $("batch-items").value.split(/\r?\n/);
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].trim();
    if (!line) continue;
    try {
      items.push(JSON.parse(line));
    } catch {
      return showError("batch-error", `line ${i + 1} is not valid JSON: write one {"key", "prompt"} object a line`);
    }
  }
  const body = { subagent_type: $("batch-type").value, items };
  const title = $("batch-title").value.trim();
  const running = $("batch-running").value.trim();
  const model = $("batch-model").value.trim();
  if (title) body.title = title;
  if (running) body.max_running_items = Number(running);
  if (model) body.model = model;
  try {
    const batch = await api("POST", "/batches", body);
    $("batch-items").value = "";
    location.hash = `#/batches/${encodeURIComponent(batch.id)}`;
  } catch (err) {
    showError("batch-error", err.message);
  }
}

// -- agents ------------------------------------------------------------------------------------

async function showAgents() {
  const { agents } = await api("GET", "/agents");
  $("agent-table")
    .querySelector("tbody")
    .replaceChildren(
      ...agents.map((a) =>
        el(
          "tr",
          {},
          el("td", { class: "mono", text: a.name }),
          el("td", { text: a.description }),
          el("td", { class: "small", text: a.tools === null ? "inherit" : a.tools.join(", ") }),
          el("td", { class: "mono small", text: a.model }),
          el("td", { class: "small muted", text: a.source }),
        ),
      ),
    );
}

// -- start -------------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  $("token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const value = $("token").value.trim();
    if (value) signIn(value);
  });
  $("sign-out").addEventListener("click", () => signOut());
  $("run-form").addEventListener("submit", startRun);
  $("cancel-run").addEventListener("click", cancelRun);
  $("refresh-runs").addEventListener("click", () => loadRuns().catch(() => {}));
  $("batch-form").addEventListener("submit", submitBatch);
  $("refresh-batches").addEventListener("click", () => loadBatches().catch(() => {}));
  $("item-filter").addEventListener("change", () => {
    itemPage.offset = 0;
    loadItems(current.id).catch(() => {});
  });
  $("items-prev").addEventListener("click", () => {
    itemPage.offset = Math.max(0, itemPage.offset - itemPage.limit);
    loadItems(current.id).catch(() => {});
  });
  $("items-next").addEventListener("click", () => {
    itemPage.offset += itemPage.limit;
    loadItems(current.id).catch(() => {});
  });
  window.addEventListener("hashchange", route);
  if (token()) signIn(token());
  else signOut();
});
