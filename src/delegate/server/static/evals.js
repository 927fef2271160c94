// The Evals view: the signed-in user's evals (started with `delegate eval` for that user), and
// one eval's report as the CLI's table reads it: per arm the success rate with its 95% interval,
// tokens, cost and time; per task which arms succeeded; every attempt, each a link to its run.
// Success is decided in code (the task's criteria and answer checks), never by this page. The
// standalone HTML report (charts) downloads from GET /evals/{id}/report.html. Read from the
// owner-scoped routes /evals and /evals/{id}; app.js calls EvalsView.show(id) from its router.
"use strict";

const EvalsView = (() => {
  const pct = (x) => (x === null || x === undefined ? "—" : `${Math.round(100 * x)}%`);
  const num = (x) => (x === null || x === undefined ? "—" : fmt.format(Math.round(x)));
  const secs = (x) => (x === null || x === undefined ? "—" : `${x.toFixed(1)} s`);

  function listRow(e, selected) {
    const arms = Object.entries(e.arms).map(([name, a]) => `${name} ${a.succeeded}/${a.judged}`);
    return el(
      "tr",
      {
        class: `clickable${selected ? " selected" : ""}`,
        "data-eval": e.eval_id,
        onclick: () => (location.hash = `#/evals/${encodeURIComponent(e.eval_id)}`),
      },
      el("td", {}, el("div", { text: e.suite }), el("div", { class: "muted small mono", text: e.eval_id })),
      el("td", {}, badge(e.status)),
      el("td", { class: "small", text: arms.join(" · ") }),
    );
  }

  // The success rate as a bar with its interval drawn over it: what a reader compares at a glance.
  function rateBar(arm) {
    const bar = el("div", { class: "eval-rate", title: `95% interval ${pct(arm.ci95[0])}-${pct(arm.ci95[1])}` });
    const fill = el("span", { class: "eval-rate-fill" });
    fill.style.width = `${100 * (arm.success_rate || 0)}%`;
    const ci = el("span", { class: "eval-rate-ci" });
    ci.style.left = `${100 * arm.ci95[0]}%`;
    ci.style.width = `${100 * (arm.ci95[1] - arm.ci95[0])}%`;
    bar.append(fill, ci);
    return bar;
  }

  function armRow(arm) {
    const failed = arm.failed_runs ? ` · ${plural(arm.failed_runs, "run")} not completed` : "";
    return el(
      "tr",
      { "data-arm": arm.arm },
      el("td", {}, el("div", { class: "mono", text: arm.arm }), el("div", { class: "muted small", text: arm.options })),
      el(
        "td",
        {},
        el("div", { class: "eval-success", text: `${arm.succeeded}/${arm.judged} (${pct(arm.success_rate)})` }),
        rateBar(arm),
        el("div", { class: "muted small", text: `95% CI ${pct(arm.ci95[0])}-${pct(arm.ci95[1])}${failed}` }),
      ),
      el("td", { class: "num", text: `${num(arm.tokens.median)} / ${num(arm.tokens.total)}` }),
      el("td", { class: "num", text: money(arm.cost_usd.total) }),
      el("td", { class: "num", text: secs(arm.seconds.median) }),
    );
  }

  function taskTable(report) {
    const names = report.arms.map((a) => a.arm);
    const head = el("tr", {}, el("th", { text: "Task" }), ...names.map((n) => el("th", { class: "mono", text: n })));
    const rows = report.tasks.map((t) =>
      el(
        "tr",
        { "data-task": t.task },
        el("td", { class: "mono", text: t.task }),
        ...names.map((n) => {
          const cell = t.arms[n];
          const state = cell.judged === 0 ? "pending" : cell.succeeded === cell.judged ? "held" : cell.succeeded ? "some" : "none";
          return el("td", { class: `eval-cell ${state}`, "data-arm": n, text: `${cell.succeeded}/${cell.judged}` });
        }),
      ),
    );
    return el("table", { class: "table", id: "eval-tasks" }, el("thead", {}, head), el("tbody", {}, ...rows));
  }

  // Each criterion and answer check of a judged attempt: what held, and the evidence of what did not.
  function checks(a) {
    const lines = [...(a.criteria || []).map((c) => [c.criterion, c]), ...(a.answer || []).map((c) => [c.check, c])];
    return el(
      "ul",
      { class: "eval-checks small" },
      ...lines.map(([what, v]) =>
        el("li", { class: v.result === "holds" ? "held" : "not-held", text: v.result === "holds" ? what : `${what}: ${v.result} (${v.evidence})` }),
      ),
    );
  }

  function attemptRow(a) {
    const link = a.run_id
      ? el("a", { href: `#/runs/${encodeURIComponent(a.run_id)}`, class: "mono", text: a.run_id })
      : el("span", { class: "muted", text: "not started" });
    const outcome = a.judged
      ? [badge(a.succeeded ? "succeeded" : "failed"), el("span", { class: "muted small", text: ` run ${a.status}` })]
      : [el("span", { class: "muted small", text: "not judged yet" })];
    return el(
      "tr",
      { "data-attempt": `${a.arm}/${a.task}/${a.attempt}` },
      el("td", { class: "mono", text: a.arm }),
      el("td", { class: "mono", text: `${a.task} #${a.attempt}` }),
      el("td", {}, ...outcome),
      el("td", {}, a.judged ? checks(a) : ""),
      el("td", {}, link),
    );
  }

  async function download(id) {
    try {
      const res = await fetch(`/api/v1/evals/${encodeURIComponent(id)}/report.html`, {
        headers: { Authorization: `Bearer ${token()}` },
      });
      if (!res.ok) throw new Error(`${res.status} ${res.statusText}`);
      const url = URL.createObjectURL(await res.blob());
      const a = el("a", { href: url, download: `${id}.html` });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10_000);
    } catch (err) {
      showError("eval-error", err.message);
    }
  }

  function drawReport(report) {
    const budget = report.budget ? `; equal budget ${report.budget.value} ${report.budget.kind} per task` : "";
    $("eval-report").replaceChildren(
      el(
        "div",
        { class: "card-head" },
        el("h2", { text: `${report.suite}: ${report.eval_id}` }),
        el("button", { type: "button", class: "link", id: "eval-download", text: "Download the HTML report", onclick: () => download(report.eval_id) }),
      ),
      el("p", { class: "muted small", id: "eval-summary" }, badge(report.status), ` ${plural(report.repeat, "repeat")}${budget}; started ${when(report.created_at)}. Success is decided in code by each task's criteria and checks.`),
      el(
        "table",
        { class: "table", id: "eval-arms" },
        el(
          "thead",
          {},
          el("tr", {}, ...["Arm", "Success", "Tokens (median / total)", "Cost", "Time (median)"].map((t) => el("th", { text: t }))),
        ),
        el("tbody", {}, ...report.arms.map(armRow)),
      ),
      el("h3", { text: "Per task" }),
      taskTable(report),
      el("h3", { text: "Attempts" }),
      el(
        "table",
        { class: "table", id: "eval-attempts" },
        el("thead", {}, el("tr", {}, ...["Arm", "Task", "Outcome", "Checks", "Run"].map((t) => el("th", { text: t })))),
        el("tbody", {}, ...report.attempts.map(attemptRow)),
      ),
    );
    $("eval-report").hidden = false;
  }

  async function show(id) {
    showError("eval-error", "");
    let evals;
    try {
      ({ evals } = await api("GET", "/evals?limit=50"));
    } catch (err) {
      return showError("eval-error", err.message);
    }
    $("eval-table").querySelector("tbody").replaceChildren(...evals.map((e) => listRow(e, e.eval_id === id)));
    $("eval-list-empty").hidden = evals.length > 0;
    $("eval-report").hidden = true;
    if (!id) return;
    try {
      drawReport(await api("GET", `/evals/${encodeURIComponent(id)}`));
    } catch (err) {
      showError("eval-error", err.message);
    }
  }

  return { show };
})();
