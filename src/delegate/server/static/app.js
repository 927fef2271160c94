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
const ARG_CHARS = 4000; // the most characters of one call's arguments (or a typed result) shown

function bounded(text, limit) {
  if (text.length <= limit) return text;
  return `${text.slice(0, limit)}\n… ${fmt.format(text.length - limit)} more characters`;
}

// A cost in US dollars as genai-prices gave it, to four decimals or two significant digits (a
// call of a small model costs a millionth of a dollar); "—" when unknown (a model without a
// price): never a guess.
function money(usd) {
  if (usd === null || usd === undefined) return "—";
  const digits = usd > 0 ? Math.min(10, Math.max(4, 1 - Math.floor(Math.log10(usd)))) : 4;
  return `$${usd.toFixed(digits)}`;
}

// Two costs added: unknown when either is (a sum with an unknown part is unknown).
const addCost = (a, b) => (a === null || a === undefined || b === null || b === undefined ? null : a + b);

const plural = (n, word) => `${fmt.format(n)} ${word}${n === 1 ? "" : "s"}`;
const tokens = (usage) => (usage ? (usage.input_tokens || 0) + (usage.output_tokens || 0) : 0);

// How long something took from `started` to `ended` (ISO times), or has taken so far while it
// goes on (`ended` null): "4.2 s", "3 min 5 s", "1 h 2 min".
function lasted(started, ended) {
  if (!started) return "—";
  const end = ended ? Date.parse(ended) : Date.now();
  const s = Math.max(0, (end - Date.parse(started)) / 1000);
  let said;
  if (s < 60) said = `${s.toFixed(1)} s`;
  else if (s < 3600) said = `${Math.floor(s / 60)} min ${Math.floor(s % 60)} s`;
  else said = `${Math.floor(s / 3600)} h ${Math.floor(s / 60) % 60} min`;
  return ended ? said : `${said} so far`;
}

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
    const me = await api("GET", "/me");
    $("account-name").textContent = me.name;
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
  const [, view = "runs", raw = "", rawSub = ""] = location.hash.replace(/^#/, "").split("/");
  let id = "";
  let sub = "";
  try {
    id = decodeURIComponent(raw); // ids travel URL-encoded in the hash
    sub = decodeURIComponent(rawSub); // the agent picked in a run
  } catch {
    id = ""; // a malformed hash shows the list
  }
  const name = ["runs", "batches", "agents", "memory", "evals"].includes(view) ? view : "runs";
  for (const v of document.querySelectorAll(".view")) v.hidden = v.id !== `view-${name}`;
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.view === name);
  const changed = current.view !== name || current.id !== id;
  current = { view: name, id };
  if (!changed) {
    if (name === "runs" && id) selectAgent(sub);
    if (name === "batches" && id) pickItem(sub);
    return;
  }
  stopFollowing();
  if (name === "runs") showRuns(current.id, sub);
  if (name === "batches") showBatches(current.id, sub);
  if (name === "agents") showAgents();
  if (name === "memory") MemoryView.show();
  if (name === "evals") EvalsView.show(current.id); // evals.js
}

let following = null; // the AbortController of the stream on screen
let batchTimer = null;

function stopFollowing() {
  if (following) following.abort();
  following = null;
  closeRun();
  if (batchTimer) clearInterval(batchTimer);
  batchTimer = null;
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
        el("td", { class: "nowrap", "data-label": "Tokens", text: fmt.format(tokens(b.usage)) }),
        el("td", { class: "nowrap", "data-label": "Cost", text: money(b.usage && b.usage.cost_usd) }),
        el("td", { class: "nowrap", "data-label": "Time", text: lasted(b.created_at, b.finished_at) }),
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
  itemsShown = items;
  const body = $("item-table").querySelector("tbody");
  body.replaceChildren(
    ...items.map((item) =>
      el(
        "tr",
        {
          class: `clickable${item.key === pickedItem.key ? " selected" : ""}`,
          "data-key": item.key,
          onclick: () => pickItem(item.key),
        },
        el("td", { class: "mono", text: item.key }),
        el("td", {}, badge(item.status)),
        el("td", { text: String(item.attempts) }),
        el(
          "td",
          { class: "clip", title: item.error || item.summary || "" },
          item.error ? el("span", { class: "error-text", text: item.error }) : Markdown.render(item.summary || ""),
        ),
        el(
          "td",
          { class: "cell-actions" },
          item.status === "failed"
            ? el("button", {
                type: "button",
                class: "small",
                text: "Retry",
                onclick: (e) => {
                  e.stopPropagation();
                  retryItem(batchId, item.key);
                },
              })
            : null,
        ),
      ),
    ),
  );
  drawItemTimeline(items);
  drawItemDetail();
  $("items-prev").disabled = itemPage.offset === 0;
  $("items-next").disabled = items.length < itemPage.limit;
  $("items-page").textContent = items.length
    ? `items ${itemPage.offset + 1}–${itemPage.offset + items.length}`
    : "no items";
}

// The item picked in the table or the timeline: what it gave back, the files it delivered, and its
// subagent's turns (turns.js).
let itemsShown = [];
let pickedItem = { key: "", preview: null };

function pickItem(key) {
  if (key && current.view === "batches" && current.id) {
    const hash = `#/batches/${encodeURIComponent(current.id)}/${encodeURIComponent(key)}`;
    if (location.hash !== hash) history.replaceState(null, "", hash); // a reload shows it again
  }
  pickedItem = { key, preview: null };
  for (const row of $("item-table").querySelectorAll("tbody tr")) {
    row.classList.toggle("selected", row.dataset.key === key);
  }
  for (const row of $("item-timeline").querySelectorAll(".tl-row")) {
    row.classList.toggle("selected", row.dataset.item === key);
  }
  drawItemDetail();
}

function drawItemDetail() {
  const box = $("item-detail");
  const item = itemsShown.find((i) => i.key === pickedItem.key);
  box.hidden = !item;
  if (!item) return box.replaceChildren();
  const usage = item.usage;
  const took =
    item.started_at && item.finished_at ? (Date.parse(item.finished_at) - Date.parse(item.started_at)) / 1000 : null;
  const facts = [
    took === null ? "" : Timeline.seconds(took),
    plural(item.attempts, "attempt"),
    typeof item.steps === "number" ? plural(item.steps, "step") : "",
    usage ? `${fmt.format(usage.input_tokens || 0)} in · ${fmt.format(usage.output_tokens || 0)} out tokens` : "",
    usage ? `cost ${money(usage.cost_usd)}` : "",
    usage && item.attempts > 1 ? `spent over all ${item.attempts} attempts` : "",
  ];
  const parts = [
    el(
      "div",
      { class: "detail-head" },
      el("span", { class: "name mono", text: item.key }),
      badge(item.status),
      el("span", { class: "meta", text: facts.filter(Boolean).join(" · ") }),
    ),
    el("p", { class: "detail-desc", text: item.prompt }),
  ];
  if (item.summary) parts.push(el("h4", { text: "Summary" }), Markdown.render(item.summary));
  if (item.error) parts.push(el("p", { class: "error", text: item.error }));
  if (item.acceptance && item.acceptance.length) {
    const verdicts = item.acceptance.map((v) =>
      el(
        "li",
        {},
        el("b", { text: `${v.result}: ` }),
        `${v.criterion}`,
        el("span", { class: "muted small", text: ` (${v.evidence})` }),
      ),
    );
    parts.push(el("h4", { text: "Acceptance" }), el("ul", { class: "verdicts" }, ...verdicts));
  }
  if (item.result !== null && item.result !== undefined) {
    const result = bounded(JSON.stringify(item.result, null, 2), ARG_CHARS);
    parts.push(el("h4", { text: "Result" }), el("pre", { class: "call-args", text: result }));
  }
  if ((item.artifacts || []).length || (item.skipped || []).length) {
    const key = item.key;
    const preview = (path) =>
      loadPreview(path, (shown) => {
        if (pickedItem.key !== key) return;
        if ((shown.file || shown.error) && (!pickedItem.preview || pickedItem.preview.path !== path)) return;
        pickedItem.preview = shown;
        drawItemDetail();
      });
    parts.push(filesBox(item.artifacts || [], item.skipped, pickedItem.preview, preview));
  }
  const turns = el("div", { class: "item-turns" }); // turns.js
  parts.push(turns);
  box.replaceChildren(...parts);
  const batchId = current.id;
  ItemTurns.show(turns, batchId, item, () => pickedItem.key === item.key && current.id === batchId && turns.isConnected);
}

// One bar per item shown, from its (last) start to its end, on the clock.
function drawItemTimeline(items) {
  const time = (iso) => (iso ? Date.parse(iso) / 1000 : null);
  const started = items.filter((i) => i.started_at);
  $("item-timeline-wrap").hidden = !started.length;
  if (!started.length) return $("item-timeline").replaceChildren();
  const now = Date.now() / 1000;
  const from = Math.min(...started.map((i) => time(i.started_at)));
  const to = Math.max(...started.map((i) => time(i.finished_at) ?? now));
  const rows = items.map((i) => ({
    id: i.key,
    label: i.key,
    sub: i.attempts > 1 ? `${i.attempts} attempts` : "",
    start: time(i.started_at),
    end: i.status === "running" ? null : time(i.finished_at),
    status: i.status,
    note: i.usage ? `${fmt.format(tokens(i.usage))} tok` : "",
  }));
  const how = { from, to, clockAxis: true, attr: "data-item", selected: pickedItem.key, onPick: pickItem };
  Timeline.draw($("item-timeline"), rows, how);
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

async function showBatches(batchId, itemKey) {
  loadTypes().catch(() => {});
  loadBatches().catch(() => {});
  batchTimer = setInterval(() => loadBatches().catch(() => {}), 3000);
  $("batch-detail").hidden = !batchId;
  if (!batchId) return;
  itemPage = { offset: 0, limit: 50 };
  pickedItem = { key: itemKey || "", preview: null };
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
