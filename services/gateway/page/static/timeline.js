// A run's timeline: each step's attempts as Gantt bars, one row per runner (and a lane for
// the attempts on no runner yet), each bar in three parts: waiting (its dependencies met, or
// its previous attempt ended, until it was queued), queued (until it started) and running
// (until it ended). Only the times the run document holds are used (a step's queuedAt, each
// attempt's runner, startedAt and finishedAt), kept current by the run's events (`track`).
// An earlier attempt's queued time is not kept: its wait before it started is one part.
// Plain JavaScript and SVG, nothing fetched.
"use strict";

window.HeddleTimeline = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const WIDTH = 960, LABEL = 150, ROW = 18, GAP = 8, AXIS = 22, BAR = 12;
  const LANE_NAME = "not on a runner";

  const at = (iso) => (iso ? Date.parse(iso) : null);

  function el(tag, attrs, ...children) {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    for (const c of children.flat()) {
      if (c !== null && c !== undefined) node.append(c instanceof Node ? c : String(c));
    }
    return node;
  }

  // The step's current attempt, written into its list of attempts as its events tell it
  // (the document's list is as of its read).
  function track(st) {
    if (!st.attempt || !st.startedAt) return;
    st.attempts = st.attempts || [];
    let rec = st.attempts.find((a) => a.attempt === st.attempt);
    if (!rec) {
      rec = { attempt: st.attempt };
      st.attempts.push(rec);
    }
    rec.runner = st.runner ?? rec.runner;
    rec.startedAt = st.startedAt;
    rec.finishedAt = st.finishedAt ?? rec.finishedAt ?? null;
  }

  // When the step's first attempt could have begun: its dependencies' last end, the run's
  // creation for a root; an instance or an exit handler, when it was queued.
  function readyAt(st, byId, run) {
    const deps = (st.dependsOn || []).map((d) => byId.get(d)).filter(Boolean);
    if (deps.length) {
      const ends = deps.map((d) => at(d.finishedAt));
      return ends.every((e) => e !== null) ? Math.max(...ends) : null;
    }
    if ((st.parent !== null && st.parent !== undefined) || st.onExit) return null;
    return at(run.createdAt);
  }

  function parts(ready, queued, started, finished, end) {
    const out = [];
    const firstMark = queued ?? started ?? finished ?? end;
    if (ready !== null && ready < firstMark) out.push(["waiting", ready, firstMark]);
    if (queued !== null) out.push(["queued", queued, started ?? finished ?? end]);
    if (started !== null) out.push(["running", started, finished ?? end]);
    return out.filter(([, a, b]) => b >= a);
  }

  // The bars of a run: {step, attempt, runner ("" for the lane), parts: [[kind, from, to]]}.
  function bars(run, now) {
    const byId = new Map(run.steps.map((st) => [st.id, st]));
    const over = TERMINAL_RUN.has(run.status);
    const out = [];
    for (const st of run.steps) {
      if (st.forEach) continue;  // a loop runs as its instances
      const done = st.finishedAt && TERMINAL_STEP.has(st.status);
      const end = over ? (at(run.finishedAt) ?? now) : now;
      const attempts = new Map((st.attempts || []).map((a) => [a.attempt, a]));
      let prevEnd = readyAt(st, byId, run);
      const last = Math.max(st.attempt || 0, ...attempts.keys());
      for (let n = 1; n <= last; n++) {
        const a = attempts.get(n) || {};
        const current = n === st.attempt;
        const queued = current ? at(st.queuedAt) : null;
        const started = at(a.startedAt ?? (current ? st.startedAt : null));
        const finished = at(a.finishedAt ?? (current && done ? st.finishedAt : null));
        const stop = current && TERMINAL_STEP.has(st.status) ? (at(st.finishedAt) ?? end) : end;
        const runner = a.runner ?? (current ? st.runner : null) ?? "";
        const ps = parts(prevEnd, queued, started, finished, stop);
        if (ps.length) out.push({ step: st.id, attempt: n, runner, status: st.status, parts: ps });
        prevEnd = finished;
      }
      // Not begun: after its backoff (retrying), or its dependencies met (pending).
      if (!over && (st.status === "retrying" || (st.status === "pending" && !st.attempt))) {
        const from = st.status === "retrying" ? at(st.finishedAt) : readyAt(st, byId, run);
        if (from !== null && from <= now) {
          out.push({ step: st.id, attempt: (st.attempt || 0) + 1, runner: "", status: st.status,
            parts: [["waiting", from, now]] });
        }
      }
    }
    return out;
  }

  // Rows by runner, the lane first; in each, as many lines as its bars overlap.
  function rows(list) {
    const byRunner = new Map([["", []]]);
    for (const b of list) {
      if (!byRunner.has(b.runner)) byRunner.set(b.runner, []);
      byRunner.get(b.runner).push(b);
    }
    const names = ["", ...[...byRunner.keys()].filter((r) => r).sort()];
    return names.map((name) => {
      const lines = [];  // each line's last end
      const placed = byRunner.get(name)
        .sort((a, b) => a.parts[0][1] - b.parts[0][1])
        .map((b) => {
          const from = b.parts[0][1], to = b.parts[b.parts.length - 1][2];
          let line = lines.findIndex((endAt) => endAt <= from);
          if (line < 0) line = lines.push(to) - 1;
          else lines[line] = to;
          return { bar: b, line };
        });
      return { name, placed, lines: Math.max(1, lines.length) };
    });
  }

  const secs = (ms) => (ms >= 60_000 ? `${(ms / 60_000).toFixed(1)} min` : `${(ms / 1000).toFixed(1)} s`);

  function barTitle(b) {
    const said = { waiting: "waited", queued: "queued", running: "ran" };
    const where = b.runner ? ` on ${b.runner}` : "";
    return `${b.step}, attempt ${b.attempt}${where}: ` +
      b.parts.map(([k, a, z]) => `${said[k]} ${secs(z - a)}`).join(", ");
  }

  // The timeline as an SVG element, or null when nothing has a time yet.
  function draw(run, now) {
    const list = bars(run, now);
    if (!list.length) return null;
    const t0 = Math.min(at(run.createdAt) ?? Infinity, ...list.map((b) => b.parts[0][1]));
    const t1 = Math.max(t0 + 1000, ...list.map((b) => b.parts[b.parts.length - 1][2]));
    const span = WIDTH - LABEL - 10;
    const x = (t) => LABEL + ((t - t0) / (t1 - t0)) * span;
    const laid = rows(list);
    const height = AXIS + laid.reduce((h, r) => h + r.lines * ROW + GAP, 0);
    const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => {
      const tx = LABEL + f * span;
      return el("g", { class: "tl-tick" },
        el("line", { x1: tx, x2: tx, y1: AXIS - 4, y2: height }),
        el("text", { x: tx, y: AXIS - 8, "text-anchor": f === 1 ? "end" : f ? "middle" : "start" },
          `+${secs(f * (t1 - t0))}`));
    });
    let y = AXIS;
    const groups = laid.map((r) => {
      const top = y;
      y += r.lines * ROW + GAP;
      const bars = r.placed.map(({ bar, line }) => el("g", {
        class: "tl-bar", "data-step": bar.step, "data-attempt": bar.attempt, "data-row": r.name,
      }, el("title", {}, barTitle(bar)), bar.parts.map(([kind, a, z]) => el("rect", {
        class: "tl-" + kind, "data-part": kind, x: x(a).toFixed(1), width: Math.max(1, x(z) - x(a)).toFixed(1),
        y: top + line * ROW + (ROW - BAR) / 2, height: BAR, rx: 2,
      }))));
      return el("g", { class: "tl-row", "data-row": r.name },
        el("rect", { class: "tl-band", x: 0, y: top - GAP / 2, width: WIDTH, height: r.lines * ROW + GAP }),
        el("text", { class: r.name ? "tl-label mono" : "tl-label muted", x: 4, y: top + ROW / 2 + 4 },
          r.name || LANE_NAME),
        bars);
    });
    return el("svg", { class: "timeline", viewBox: `0 0 ${WIDTH} ${height}`, width: "100%",
      role: "img", "aria-label": "each step's attempts by runner over time" }, ticks, groups);
  }

  const TERMINAL_RUN = new Set(["succeeded", "failed", "cancelled"]);
  const TERMINAL_STEP = new Set(["succeeded", "failed", "skipped", "cancelled"]);

  return { draw, bars, track };
})();
