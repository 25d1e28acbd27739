// This run against its baseline (`gpuscope dashboard --baseline A`): /api/v1/diff drawn as a bar chart of each
// op's p50 and p99 in this run over the baseline's (log scale: 2× slower and 2× faster are the same height),
// the ops that changed most first, with the classification `gpuscope diff` makes. Uses dashboard.js's el, api
// and fmtNs (loaded after this file, called only once the page runs). Op names and paths are put in as text.
"use strict";

const DIFF_MAX_OPS = 12;
let diffPlot = null;

function ratioText(r) {
  return r === null || r === undefined ? "—" : r >= 1 ? `${r.toFixed(2)}× slower` : `${(1 / r).toFixed(2)}× faster`;
}

async function refreshDiff(baseline) {
  const section = document.getElementById("diff-section");
  section.hidden = !baseline;
  if (!baseline) return;
  let d;
  try {
    d = await api("diff", {});
  } catch (err) {
    document.getElementById("diff-note").textContent = `error: ${err.message}`;
    return;
  }
  document.getElementById("diff-note").textContent = `this run (${d.recording}) against the baseline `
    + `(${d.baseline}); ratios are this run's over the baseline's` + (d.notes.length ? `; ${d.notes.join("; ")}` : "");
  const change = (o) => Math.max(Math.abs(Math.log(o.p50_ratio || 1)), Math.abs(Math.log(o.p99_ratio || 1)));
  const ops = d.ops.filter((o) => o.p50_ratio !== null || o.p99_ratio !== null)
    .sort((a, b) => change(b) - change(a)).slice(0, DIFF_MAX_OPS);
  const box = document.getElementById("diff-chart");
  if (diffPlot) { diffPlot.destroy(); diffPlot = null; }
  box.replaceChildren();
  if (ops.length) {
    const xs = ops.map((_, i) => i);
    const bars = (offset) => uPlot.paths.bars({ size: [0.35, 60], align: offset });
    const opts = {
      width: Math.max(320, box.clientWidth || 900), height: 240,
      scales: { x: { time: false, range: [-0.6, ops.length - 0.4] }, y: { distr: 3, range: (u, lo, hi) =>
        [Math.min(0.5, (lo || 1) * 0.8), Math.max(2, (hi || 1) * 1.2)] } },
      axes: [
        { label: "op", labelSize: 18, size: 50, splits: () => xs, values: (u, vals) => vals.map((v) => ops[v] ? ops[v].op : "") },
        { label: "this run / baseline (log scale)", labelSize: 18, size: 64,
          values: (u, vals) => vals.map((v) => (v === null || v === undefined ? "" : `${+v.toPrecision(2)}×`)) },
      ],
      series: [
        { label: "op", value: (u, v) => (v === null || !ops[v] ? "—" : ops[v].op) },
        { label: "p50", fill: "#2f6fde", stroke: "#2f6fde", paths: bars(-1), points: { show: false },
          value: (u, v) => ratioText(v) },
        { label: "p99", fill: "#d92d20", stroke: "#d92d20", paths: bars(1), points: { show: false },
          value: (u, v) => ratioText(v) },
      ],
      hooks: { draw: [(u) => {  // the line of no change
        const y = u.valToPos(1, "y", true), ctx = u.ctx;
        ctx.save(); ctx.strokeStyle = "#1d2330"; ctx.lineWidth = devicePixelRatio;
        ctx.beginPath(); ctx.moveTo(u.bbox.left, y); ctx.lineTo(u.bbox.left + u.bbox.width, y); ctx.stroke(); ctx.restore();
      }] },
    };
    diffPlot = new uPlot(opts, [xs, ops.map((o) => o.p50_ratio), ops.map((o) => o.p99_ratio)], box);
    box.dataset.axes = JSON.stringify(opts.axes.map((a) => a.label));
    box.dataset.ops = JSON.stringify(ops.map((o) => o.op));
  } else {
    box.append(el("p", { class: "muted" }, "no op was timed in both runs"));
  }
  const body = document.querySelector("#diff tbody");
  body.replaceChildren();
  for (const o of ops) {
    body.append(el("tr", { class: `change-${o.change}` }, el("td", {}, o.op), el("td", {}, o.change),
      el("td", {}, `${o.count_a.toLocaleString()} → ${o.count_b.toLocaleString()}`),
      el("td", {}, `${fmtNs(o.p50_a_ns)} → ${fmtNs(o.p50_b_ns)}`), el("td", {}, ratioText(o.p50_ratio)),
      el("td", {}, `${fmtNs(o.p99_a_ns)} → ${fmtNs(o.p99_b_ns)}`), el("td", {}, ratioText(o.p99_ratio))));
  }
  const f = d.findings;
  document.getElementById("diff-findings").textContent = f
    ? `findings only in this run: ${f.only_b.join(", ") || "none"}; only in the baseline: ${f.only_a.join(", ") || "none"}`
    : "";
}
