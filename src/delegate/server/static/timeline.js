// A timeline: one row per agent (or batch item), a bar from its start to its end on a shared
// time axis, coloured by status, so what ran at the same time lines up vertically. An agent's bar
// is split into the time it waited for its model (model.request to model.response) and the time
// its tools ran (tool.started to tool.completed), in two colours, with both totals in its tooltip.
"use strict";

const Timeline = (() => {
  const STEPS = [0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400];

  function seconds(s) {
    if (s < 1) return `${Math.round(s * 1000)} ms`;
    if (s < 60) return `${s < 10 ? s.toFixed(1) : Math.round(s)} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
    return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
  }

  function clock(t) {
    return new Date(t * 1000).toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  }

  function div(cls, text) {
    const n = document.createElement("div");
    n.className = cls;
    if (text !== undefined) n.textContent = text;
    return n;
  }

  // Draw `rows` ({id, label, sub, start, end, status, note, spans}; times in seconds since the
  // epoch, `end` null while running; `spans` an agent's model and tool spans, see `split`) into
  // `container`, from `from` to `to`. `onPick(id)` is called on a click;
  // the row whose id is `selected` is marked. `clockAxis` says when the axis starts, as a time of
  // day (its ticks are seconds since then).
  function draw(container, rows, { from, to, selected, onPick, clockAxis, attr = "data-row" }) {
    const span = Math.max(to - from, 0.001);
    // At most one tick label per 80 px of track (the label and track columns take about 14rem),
    // so "+1 min 30 s" labels never run into each other on a phone.
    const track = Math.max(0, (container.clientWidth || 800) - 224);
    const most = Math.max(2, Math.min(8, Math.floor(track / 80)));
    const step = STEPS.find((s) => span / s <= most) || STEPS[STEPS.length - 1];
    const axis = div("tl-axis");
    axis.append(div("tl-label tl-sub", clockAxis ? `from ${clock(from)}` : ""));
    const ticks = div("tl-track tl-ticks");
    for (let t = 0; t <= span + 1e-9; t += step) {
      const tick = div("tl-tick", t === 0 ? "0" : `${clockAxis ? "+" : ""}${seconds(t)}`);
      tick.style.left = `${(100 * t) / span}%`;
      ticks.append(tick);
    }
    axis.append(ticks, div("tl-note"));
    const body = rows.map((row) => {
      const line = div(`tl-row${row.id === selected ? " selected" : ""}`);
      line.setAttribute(attr, row.id);
      const label = div("tl-label");
      label.append(div("tl-name", row.label));
      if (row.sub) label.append(div("tl-sub", row.sub));
      const track = div("tl-track");
      if (row.start !== null && row.start !== undefined) {
        const end = row.end ?? to;
        const bar = div(`tl-bar ${row.status}`);
        bar.style.left = `${(100 * Math.max(0, row.start - from)) / span}%`;
        bar.style.width = `${(100 * Math.max(0, end - row.start)) / span}%`;
        bar.title = `${row.label}: ${row.status}, ${seconds(Math.max(0, end - row.start))}`;
        if (row.spans) split(bar, row, end);
        track.append(bar);
      }
      line.append(label, track, div("tl-note", row.note || ""));
      if (onPick) {
        line.classList.add("clickable");
        line.tabIndex = 0;
        line.setAttribute("role", "button");
        line.addEventListener("click", () => onPick(row.id));
        line.addEventListener("keydown", (e) => {
          if (e.key === "Enter" || e.key === " ") {
            e.preventDefault();
            onPick(row.id);
          }
        });
      }
      return line;
    });
    container.replaceChildren(...body, axis);
  }

  // The time `spans` ({kind, start, end}) of `kind` cover, each moment counted once (tool calls
  // run at the same time); a span with no end yet (running) ends at `now`.
  function busy(spans, kind, now) {
    const parts = spans
      .filter((s) => s.kind === kind)
      .map((s) => [s.start, s.end ?? now])
      .sort((a, b) => a[0] - b[0]);
    let total = 0;
    let upTo = -Infinity;
    for (const [start, end] of parts) {
      const from = Math.max(start, upTo);
      if (end > from) total += end - from;
      upTo = Math.max(upTo, end);
    }
    return total;
  }

  // Draw `row.spans` inside its bar (which runs from `row.start` to `end`): one segment per span,
  // neighbours of a kind closer than a thousandth of the bar drawn as one (a lead of a thousand
  // calls stays a few hundred elements); the totals go in the bar's title and data attributes.
  function split(bar, row, end) {
    const width = Math.max(end - row.start, 0.001);
    const model = busy(row.spans, "model", end);
    const tools = busy(row.spans, "tool", end);
    bar.dataset.modelS = model.toFixed(3);
    bar.dataset.toolS = tools.toFixed(3);
    bar.title += ` · model ${seconds(model)} · tools ${seconds(tools)}`;
    for (const kind of ["model", "tool"]) {
      let open = null;
      const flush = () => {
        if (!open) return;
        const seg = div(`tl-seg ${kind}`);
        seg.style.left = `min(${(100 * open[0]) / width}%, 100% - 1px)`; // a last instant stays in the bar
        seg.style.width = `${(100 * (open[1] - open[0])) / width}%`;
        bar.append(seg);
      };
      const spans = row.spans.filter((s) => s.kind === kind).sort((a, b) => a.start - b.start);
      for (const s of spans) {
        const from = Math.max(0, s.start - row.start);
        const to = Math.min(width, Math.max(from, (s.end ?? end) - row.start));
        if (open && from - open[1] <= width / 1000) open[1] = Math.max(open[1], to);
        else {
          flush();
          open = [from, to];
        }
      }
      flush();
    }
  }

  return { draw, seconds, busy };
})();
