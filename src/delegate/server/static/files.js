// The files a subagent (or a batch item) delivered: each with its size, and a preview of the start
// of a text file (GET /files reads the caller's own workspace only). The text is shown as text.
"use strict";

const PREVIEW_BYTES = 64 * 1024;

function bytes(n) {
  if (n < 1024) return `${fmt.format(n)} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

// A "Files delivered" box for `artifacts` ([{relative_path, size}]) and `skipped` ([{path, reason}]).
// `preview` is the preview on screen ({path, file} or {path, error}; {path} while it loads; or
// null), kept by the caller so that drawing the box again keeps it; `onPreview(path)` is called
// when a Preview button is pressed.
function filesBox(artifacts, skipped, preview, onPreview) {
  const rows = artifacts.map((a) =>
    el(
      "li",
      { "data-path": a.relative_path },
      el("span", { class: "file-path mono", text: a.relative_path }),
      el("span", { class: "file-size", text: typeof a.size === "number" ? bytes(a.size) : "" }),
      el("button", { type: "button", class: "small", text: "Preview", onclick: () => onPreview(a.relative_path) }),
    ),
  );
  for (const s of skipped || []) {
    rows.push(
      el(
        "li",
        { class: "skipped" },
        el("span", { class: "file-path mono", text: s.path }),
        el("span", { class: "muted small", text: `not delivered: ${s.reason}` }),
      ),
    );
  }
  const list = el("ul", { class: "file-list" }, ...rows);
  const box = el("div", { class: "files" }, el("h4", { text: "Files delivered" }), list);
  if (preview) box.append(previewBox(preview));
  return box;
}

function previewBox(shown) {
  const head = el("div", { class: "preview-head" }, el("span", { class: "mono", text: shown.path }));
  let body;
  if (shown.error) body = el("p", { class: "error", text: shown.error });
  else if (!shown.file) body = el("p", { class: "muted small", text: "Loading…" });
  else {
    const f = shown.file;
    head.append(el("span", { class: "muted small", text: `${bytes(f.size)}${f.truncated ? " · its start" : ""}` }));
    body = f.binary
      ? el("p", { class: "muted small", text: "A binary file: no preview." })
      : el("pre", { class: "preview-text", text: f.text });
  }
  return el("div", { class: "preview" }, head, body);
}

// Read the preview of `path` (a file of the run `runId`, when given: a run whose files are on a
// server this one cannot reach answers where they are): `show` gets {path} at once, then
// {path, file} or {path, error}.
async function loadPreview(path, show, runId) {
  show({ path });
  const query = { path, limit: PREVIEW_BYTES, ...(runId ? { run: runId } : {}) };
  try {
    show({ path, file: await api("GET", `/files?${new URLSearchParams(query)}`) });
  } catch (err) {
    show({ path, error: err.message });
  }
}
