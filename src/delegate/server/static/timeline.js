// A timeline: one row per agent (or batch item), a bar from its start to its end on a shared
// time axis, coloured by status, so what ran at the same time lines up vertically.
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

  // Draw `rows` ({id, label, sub, start, end, status, note}; times in seconds since the epoch, `end`
  // null while running) into `container`, from `from` to `to`. `onPick(id)` is called on a click;
  // the row whose id is `selected` is marked. `clockAxis` says when the axis starts, as a time of
  // day (its ticks are seconds since then).
  function draw(container, rows, { from, to, selected, onPick, clockAxis, attr = "data-row" }) {
    const span = Math.max(to - from, 0.001);
    const step = STEPS.find((s) => span / s <= 8) || STEPS[STEPS.length - 1];
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

  return { draw, seconds };
})();
