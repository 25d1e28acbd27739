// The gpuscope dashboard: reads /api/v1 with the session cookie and draws the page.
// Every string from the recording (process names, paths, frames, findings) is untrusted:
// it is only ever put into the page as text (textContent, createTextNode), never as HTML.
"use strict";

const COLOURS = ["#2f6fde", "#d92d20", "#067647", "#b54708", "#7a5af8", "#0e9384", "#c11574", "#667085"];
const state = { session: "last", since: "", from: null, to: null, op: null, pid: null, finding: null };

// A finding's fields, as /api/v1/findings sends them: the wire shape is the TypedDicts FindingWire, SymptomWire
// and CauseWire of src/gpuscope/model/finding_wire.py. Every key the page reads of a finding is named here and
// nowhere else; tests/unit/model/test_finding_wire.py checks each one against those TypedDicts.
const FindingWire = Object.freeze({
  id: (f) => f.id,
  severity: (f) => f.severity,
  kind: (f) => f.kind,
  summary: (f) => f.symptom.summary,
  op: (f) => f.symptom.op,
  pid: (f) => f.symptom.pid,
  comm: (f) => f.symptom.comm,
  evidence: (f) => (f.causes || []).map((c) => c.evidence || []),  // one list of lines per cause
  fix: (f) => f.fix,
  lostNs: (f) => f.impact.lost_ns,
  // The time the finding covers, in the window's clock ({start_ns, end_ns}); null from a node that sends none.
  span: (f) => f.span || null,
  // Its causes' evidence histograms (HistogramWire), for those measured call by call.
  histograms: (f) => (f.causes || []).map((c) => c.histogram).filter(Boolean),
  // Its causes' measures over time (SeriesWire), for those no per-call comparison measures.
  series: (f) => (f.causes || []).map((c) => c.series).filter(Boolean),
});

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    // Styles through the CSSOM: the Content-Security-Policy forbids inline style attributes.
    if (k === "class") node.className = v; else if (k === "style") Object.assign(node.style, v); else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c ?? "")));
  return node;
}

function fmtNs(ns) {
  if (ns === null || ns === undefined) return "—";
  if (ns < 1e3) return `${Math.round(ns)} ns`;
  if (ns < 1e6) return `${(ns / 1e3).toFixed(1)} µs`;
  if (ns < 1e9) return `${(ns / 1e6).toFixed(1)} ms`;
  return `${(ns / 1e9).toFixed(2)} s`;
}

function fmtWall(ns) {
  if (!ns) return "—";
  return new Date(Number(BigInt(ns) / 1000000n)).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

function apiUrl(path, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== null && v !== undefined && v !== "") q.set(k, v);
  return `/api/v1/${path}${q.toString() ? "?" + q : ""}`;
}

async function api(path, params) {
  const res = await fetch(apiUrl(path, params), { credentials: "same-origin" });
  const body = await res.json();
  if (!res.ok) throw new Error(body.error ? `${body.error.code}: ${body.error.message}` : res.statusText);
  return body;
}

function windowParams() {
  return { session: state.session, since: state.since, pid: state.pid };
}

// One option per session of the recording, beside "last run" and "all" (a recording grows sessions while open).
function renderSessions(sessions) {
  const select = document.getElementById("session");
  const have = new Set([...select.options].map((o) => o.value));
  for (const s of sessions) {
    const value = String(s.id);
    if (have.has(value)) continue;
    select.append(el("option", { value }, `session ${s.id}${s.node ? ` (${s.node})` : ""}`));
  }
}

function renderFilter() {
  const chip = document.getElementById("pid-filter");
  chip.hidden = state.pid === null;
  chip.textContent = state.pid === null ? "" : `process ${state.pid} ✕`;
}

function renderOverview(o) {
  const w = o.window;
  const read = w.session_ids.length === o.sessions.length ? "" : ` (reading ${w.session_ids.length === 1
    ? `session ${w.session_ids[0]}` : `sessions ${w.session_ids.join(", ")}`})`;
  const text = `${o.recording} · ${fmtWall(w.start_wall_ns)} – ${fmtWall(w.end_wall_ns)} · `
    + `${(w.events || 0).toLocaleString()} events · ${o.sessions.length} session(s)${read}`
    + (o.nodes.length ? ` · nodes ${o.nodes.join(", ")}` : "");
  document.getElementById("recording").textContent = text;
  const counts = Object.entries(o.finding_counts).map(([s, n]) => `${n} ${s}`).join(", ");
  document.getElementById("finding-counts").textContent = counts ? `(${counts})` : "";
  document.getElementById("self-cost").textContent = selfCostText(o.sampling);
}

// gpuscope's measured cost to each traced process, against its budget (the overhead budget, docs/trace.md).
function selfCostText(s) {
  if (!s || !s.self_cost || !s.self_cost.length) return "";
  const worst = [...s.self_cost].sort((a, b) => b.share - a.share).slice(0, 3);
  const parts = worst.map((c) => {
    let after = "";
    if (c.budgeted_share !== null && c.budgeted_share !== undefined) {
      after = `, ${(100 * c.budgeted_share).toFixed(2)}% after its first seconds`;
    } else if (c.budget) {
      after = ", all in its first seconds, probed whole";
    }
    return `${(100 * c.share).toFixed(2)}% of pid ${c.pid}'s CPU time${after}`;
  });
  const budget = s.budget ? `budget ${(100 * s.budget).toFixed(1)}%` : "no budget: every call probed";
  const est = s.estimated_ops && s.estimated_ops.length
    ? ` · ≈ ${s.estimated_ops.join(", ")} estimated, probed ${(100 * (s.coverage || 0)).toFixed(1)}% of the time` : "";
  return `gpuscope's own cost (measured): ${parts.join("; ")} (${budget})${est}`;
}

function fmtBytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function renderSystem(s) {
  const bar = document.getElementById("system");
  const rows = s.snapshots || [];
  if (!rows.length) { bar.textContent = ""; return; }
  const last = rows[rows.length - 1];
  const cpus = rows.map((r) => r.cpu_pct).filter((v) => v !== null && v !== undefined);
  const peak = cpus.length ? Math.max(...cpus) : null;
  const cpu = last.cpu_pct === null || last.cpu_pct === undefined ? "—" : `${Math.round(last.cpu_pct)}%`;
  const free = last.mem_available_bytes === undefined ? "" : `, ${fmtBytes(last.mem_available_bytes)} free`;
  bar.textContent = `System · CPU ${cpu}${last.cpus ? ` of ${last.cpus}` : ""}`
    + (peak === null ? "" : ` (peak ${Math.round(peak)}%)`)
    + ` · Mem ${Math.round(last.mem_pct ?? 0)}%${free} · Load ${(last.load1 ?? last.load_avg ?? 0).toFixed(2)}`
    + ` · Swap ${fmtBytes(last.swap_used_bytes ?? 0)}`;
}

// The first screen: the window and its headline figures, the time lost by cause as one stacked bar, and the
// top finding in one line (its picture is the timeline below, the finding's op drawn thickest).
function renderHeadline(o, f, ops) {
  const w = o.window, F = FindingWire;
  const wallNs = Math.max(1, (w.end_wall_ns || 0) - (w.start_wall_ns || 0));
  const busiest = [...ops.ops].filter((op) => op.time_share !== null && op.time_share !== undefined)
    .sort((a, b) => b.time_share - a.time_share)[0];
  const own = o.sampling && o.sampling.self_cost && o.sampling.self_cost.length
    ? Math.max(...o.sampling.self_cost.map((c) => c.share)) : null;
  const counts = Object.entries(o.finding_counts).map(([sev, n]) => `${n} ${sev}`).join(" · ");
  const figures = [
    ["window", fmtNs(wallNs)],
    ["events", (w.events || 0).toLocaleString()],
    ["findings", counts || "none"],
    ["busiest op", busiest ? `${busiest.op} ${(100 * busiest.time_share).toFixed(0)}%` : "—"],
    ["gpuscope's own cost", own === null ? "—" : `${(100 * own).toFixed(2)}% (measured)`],
  ];
  document.getElementById("figures").replaceChildren(
    ...figures.map(([k, v]) => el("div", {}, el("dt", {}, k), el("dd", {}, v))));
  const byKind = new Map();
  for (const finding of f.findings) {
    const lost = F.lostNs(finding) || 0;
    if (lost > 0) byKind.set(F.kind(finding), (byKind.get(F.kind(finding)) || 0) + lost);
  }
  const kinds = [...byKind.entries()].sort((a, b) => b[1] - a[1]);
  const total = kinds.reduce((sum, [, ns]) => sum + ns, 0);
  const scale = total > wallNs ? wallNs / total : 1;  // overlapping findings: shares of the bar, not of the time
  const bar = document.getElementById("lost-bar"), legend = document.getElementById("lost-legend");
  document.getElementById("lost").hidden = !kinds.length;
  bar.replaceChildren();
  legend.replaceChildren();
  kinds.forEach(([kind, ns], i) => {
    const colour = COLOURS[i % COLOURS.length], share = ns / wallNs;
    const label = `${kind}: ${(100 * share).toFixed(0)}% of the time (${fmtNs(ns)})`;
    bar.append(el("span", { title: label, "data-kind": kind,
      style: { width: `${(100 * share * scale).toFixed(2)}%`, background: colour } }));
    legend.append(el("span", {}, el("i", { style: { background: colour } }), label));
  });
  bar.setAttribute("aria-label", kinds.length ? kinds.map(([k, ns]) => `${k} ${fmtNs(ns)}`).join(", ") : "no time lost");
  const top = f.findings[0];
  const line = document.getElementById("top-finding");
  line.replaceChildren();
  if (top) {
    line.append(el("span", { class: `sev sev-${F.severity(top)}` }, F.severity(top)), " ",
      el("strong", {}, F.kind(top)), ": ", F.summary(top));
  } else {
    line.append(el("span", { class: "muted" }, "no findings in this window"));
  }
  return top ? F.op(top) : null;
}

// A finding's span in wall-clock seconds (the timeline's axis): its monotonic ns moved by the window's offset.
// What turns the window's clock into wall-clock ns, as the timeline's axis is.
function wallOffsetNs(window) {
  return window ? (window.start_wall_ns || 0) - (window.start_ns || 0) : 0;
}

function spanSeconds(finding, window) {
  const span = FindingWire.span(finding);
  if (!span || !window) return null;
  const offset = wallOffsetNs(window);
  return { from: (span.start_ns + offset) / 1e9, to: (span.end_ns + offset) / 1e9 };
}

// Each finding: its claim, evidence and fix, and its evidence chart; clicking its head zooms the timeline to
// the time it covers (a second click goes back to the whole window).
function renderFindings(f, window) {
  const list = document.getElementById("findings");
  list.replaceChildren();
  if (!f.findings.length) list.append(el("li", { class: "muted" }, "no findings in this window"));
  const F = FindingWire;
  const width = Math.max(280, Math.min(560, list.clientWidth - 40));
  f.findings.forEach((finding, i) => {
    const span = spanSeconds(finding, window);
    const head = el("div", { class: "finding-head", "data-finding": String(i) },
      el("span", { class: `sev sev-${F.severity(finding)}` }, F.severity(finding)), " ",
      el("strong", {}, F.kind(finding)), ": ", F.summary(finding));
    const item = el("li", state.finding === i ? { class: "selected" } : {}, head);
    if (span) {
      head.classList.add("zooms");
      head.setAttribute("title", "show on the timeline");
      head.addEventListener("click", () => {
        const again = state.finding === i;
        // A margin of a tenth of its length each side (at least 1 ms): the calls at its edges stay in view.
        const pad = Math.max((span.to - span.from) / 10, 1e-3);
        state.finding = again ? null : i;
        state.from = again ? null : `@${(span.from - pad).toFixed(6)}`;
        state.to = again ? null : `@${(span.to + pad).toFixed(6)}`;
        refresh();
      });
    }
    if (F.comm(finding)) item.append(el("div", { class: "muted" }, `process ${F.comm(finding)} (pid ${F.pid(finding)})`));
    for (const lines of F.evidence(finding)) {
      const evidence = el("ul", { class: "evidence" });
      for (const line of lines) evidence.append(el("li", {}, line));
      item.append(evidence);
    }
    const histogram = F.histograms(finding)[0], series = F.series(finding)[0];
    const chart = histogram ? evidenceChart(histogram, width)
      : series ? seriesChart(series, width, wallOffsetNs(window), spanSeconds(finding, window), F.severity(finding))
        : null;
    if (chart) item.append(chart);
    if (F.fix(finding)) item.append(el("div", { class: "fix" }, "fix: ", F.fix(finding)));
    list.append(item);
  });
  return new Set(f.findings.map(F.op));
}

// The findings' bands over the timeline: [{id, severity, from, to}] in wall-clock seconds.
function findingBands(f, window) {
  const F = FindingWire;
  return f.findings.map((finding) => ({ id: F.id(finding), severity: F.severity(finding), ...spanSeconds(finding, window) }))
    .filter((band) => band.from !== undefined);
}

function renderOps(o, flagged) {
  const body = document.querySelector("#ops tbody");
  body.replaceChildren();
  for (const op of o.ops) {
    const share = op.time_share === null || op.time_share === undefined ? null : op.time_share;
    const bar = el("span", { class: "share", style: { width: `${Math.round(60 * Math.min(1, share || 0))}px` } });
    const row = el("tr", flagged.has(op.op) ? { class: "flagged" } : {},
      el("td", {}, op.op),
      el("td", op.estimated ? { title: `estimated: ${(op.seen || 0).toLocaleString()} calls seen, probed `
        + `${(100 * (op.coverage || 0)).toFixed(1)}% of the time (overhead budget)` } : {},
        (op.estimated ? "≈" : "") + (op.count || 0).toLocaleString()),
      el("td", {}, op.rate_per_s === null ? "—" : op.rate_per_s.toLocaleString()),
      el("td", {}, fmtNs(op.p50_ns)), el("td", {}, fmtNs(op.p95_ns)), el("td", {}, fmtNs(op.p99_ns)),
      el("td", {}, fmtNs(op.max_ns)), el("td", {}, bar, share === null ? "—" : `${(100 * share).toFixed(1)}%`));
    row.addEventListener("click", () => { state.op = op.op; refreshStacks(); });
    body.append(row);
  }
}

function renderProcesses(p, containers) {
  const byCgroup = new Map(containers.containers.map((c) => [c.cgroup_id, c]));
  const body = document.querySelector("#processes tbody");
  body.replaceChildren();
  for (const proc of p.processes) {
    const c = byCgroup.get(proc.cgroup_id);
    const where = c ? (c.pod_name || c.container_id || c.slurm_job_id || c.path || "") : "";
    const row = el("tr", state.pid === proc.pid ? { class: "selected" } : {}, el("td", {}, proc.pid),
      el("td", {}, proc.comm), el("td", {}, proc.node), el("td", {}, (proc.events || 0).toLocaleString()),
      el("td", {}, proc.cgroup_id ?? "—"), el("td", {}, where));
    row.addEventListener("click", () => { state.pid = state.pid === proc.pid ? null : proc.pid; refresh(); });
    body.append(row);
  }
}

// The timeline: the slowest call of each interval, per op, on a log scale in ms (uPlot, vendored in the
// package). Intervals without calls are gaps, not lines drawn across them. Dragging across it reads that
// span again from the API; a double click goes back to the whole window.
let plot = null;
let OP_COLOURS = new Map();  // op -> its colour on the timeline: the lanes colour their GPU calls alike

function msText(v) {
  return v >= 1000 ? `${(v / 1000).toFixed(v >= 10000 ? 0 : 1)} s` : v >= 1 ? `${+v.toFixed(1)} ms` : `${+(v * 1000).toFixed(1)} µs`;
}

function renderTimeline(t, topOp, bands) {
  const box = document.getElementById("timeline");
  if (plot) { plot.destroy(); plot = null; }
  box.replaceChildren();
  const timed = t.series.filter((s) => s.points.some((p) => p[3] > 0))
    .sort((a, b) => Math.max(...b.points.map((p) => p[3])) - Math.max(...a.points.map((p) => p[3]))).slice(0, 8);
  if (!timed.length || !t.bucket_ns) { box.append(el("p", { class: "muted" }, "no timed calls in this window")); return; }
  const buckets = Math.max(1, Math.ceil((t.end_wall_ns - t.start_wall_ns) / t.bucket_ns));
  const xs = Array.from({ length: buckets }, (_, b) => (t.start_wall_ns + (b + 0.5) * t.bucket_ns) / 1e9);
  const data = [xs, ...timed.map((s) => {
    const ys = new Array(buckets).fill(null);
    for (const p of s.points) if (p[3] > 0 && p[0] >= 0 && p[0] < buckets) ys[p[0]] = p[3] / 1e6;
    return ys;
  })];
  const opts = {
    width: Math.max(320, box.clientWidth || 1000),
    height: 240,
    tzDate: (ts) => uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"),
    // The window's own bounds, as the lanes below use: the two line up on one time axis.
    scales: { x: { time: true, range: [t.start_wall_ns / 1e9, t.end_wall_ns / 1e9] }, y: { distr: 3 } },
    axes: [
      { label: "time (UTC)", labelSize: 18 },
      // Decades only: a log axis's ticks between them would print over each other.
      { label: "slowest call (log scale)", labelSize: 18, size: 70,
        values: (u, vals) => vals.map((v) => (Math.abs(Math.log10(v) - Math.round(Math.log10(v))) < 1e-6 ? msText(v) : "")) },
    ],
    series: [{ label: "time (UTC)" }, ...timed.map((s, i) => ({
      label: s.op, stroke: COLOURS[i % COLOURS.length], width: s.op === topOp ? 3 : 1.25,
      spanGaps: false, points: { show: false }, value: (u, v) => (v === null ? "—" : msText(v)),
    }))],
    cursor: { drag: { x: true, y: false, setScale: false } },
    hooks: { drawClear: [bandsHook(bands)], setSelect: [(u) => {
      if (u.select.width < 5) return;
      const a = u.posToVal(u.select.left, "x"), b = u.posToVal(u.select.left + u.select.width, "x");
      u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
      state.from = `@${a.toFixed(6)}`;
      state.to = `@${b.toFixed(6)}`;
      state.finding = null;
      refresh();
    }] },
  };
  plot = new uPlot(opts, data, box);
  OP_COLOURS = new Map(timed.map((s, i) => [s.op, COLOURS[i % COLOURS.length]]));
  const lanes = document.getElementById("lanes");
  lanes.style.setProperty("--plot-left", `${Math.round(plot.bbox.left / devicePixelRatio)}px`);
  lanes.style.setProperty("--plot-width", `${Math.round(plot.bbox.width / devicePixelRatio)}px`);
  box.dataset.axes = JSON.stringify(opts.axes.map((a) => a.label));  // the canvas's axis titles, as text too
  box.dataset.bands = JSON.stringify(bands);
  // A click (the pointer moved less than a few pixels since it went down) asks for that interval's slowest calls.
  let downX = null;
  plot.over.addEventListener("mousedown", (ev) => { downX = ev.clientX; });
  plot.over.addEventListener("click", (ev) => {
    if (downX === null || Math.abs(ev.clientX - downX) > 3) return;
    const at = plot.posToVal(ev.offsetX, "x");
    const b = Math.floor((at * 1e9 - t.start_wall_ns) / t.bucket_ns);
    if (b < 0 || b >= buckets) return;
    const from = (t.start_wall_ns + b * t.bucket_ns) / 1e9;
    showCalls(from, from + t.bucket_ns / 1e9, state.session);
  });
  box.ondblclick = () => { state.from = null; state.to = null; state.finding = null; refresh(); };
}

async function refreshStacks() {
  if (!state.op) return;
  const section = document.getElementById("stacks-section");
  section.hidden = false;
  document.getElementById("stacks-op").textContent = state.op;
  const out = document.getElementById("stacks");
  out.replaceChildren();
  const s = await api("stacks", { op: state.op, pid: state.pid, limit: 5 });
  if (!s.stacks.length) out.append(el("p", { class: "muted" }, "no stacks recorded for this op"));
  for (const stack of s.stacks) {
    out.append(el("div", {}, `${stack.calls.toLocaleString()} calls (${(100 * stack.share).toFixed(0)}%), ${fmtNs(stack.total_duration_ns)} in all`),
      el("pre", {}, stack.frames.join("\n")));
  }
}

// On-CPU samples of the traced threads: shown only when the recording has them. Counts, not times: each
// sample stands for 1/hz of a thread's CPU time, so every share and second here is an estimate.
function renderProfile(p) {
  const section = document.getElementById("profile-section");
  section.dataset.samples = String(p.samples);
  section.hidden = !p.samples;
  if (!p.samples) return;
  const rate = p.hz ? ` (${p.hz} a second of each thread's CPU time)` : "";
  const cpu = p.estimated_cpu_s === null ? "" : `: ≈ ${p.estimated_cpu_s.toFixed(2)} s of CPU time`;
  document.getElementById("profile-note").textContent = `${p.samples.toLocaleString()} on-CPU samples${rate}`
    + `${cpu}. These are sample counts: the shares and seconds are estimates.`;
  document.getElementById("profile-download").setAttribute("href", apiUrl("profile.speedscope", windowParams()));
  if (p.flame) drawFlame(document.getElementById("flame"), document.getElementById("flame-tip"), p.flame, p.samples);
  const body = document.querySelector("#profile tbody");
  body.replaceChildren();
  for (const f of p.top_functions) {
    const bar = el("span", { class: "share", style: { width: `${Math.round(120 * Math.min(1, f.share))}px` } });
    const where = f.file ? `${f.file}${f.line === null ? "" : `:${f.line}`}` : "—";
    body.append(el("tr", {}, el("td", {}, f.function), el("td", {}, where), el("td", {}, f.samples.toLocaleString()),
      el("td", {}, bar, `${(100 * f.share).toFixed(1)}%`)));
  }
}

async function refreshProfile() {
  try {
    renderProfile(await api("profile", { ...windowParams(), limit: 10 }));
  } catch (err) {
    document.getElementById("profile-section").hidden = true;
    document.getElementById("status").textContent = `error: ${err.message}`;
  }
}

async function refresh() {
  const status = document.getElementById("status");
  try {
    const params = windowParams();
    const span = { session: state.session, since: state.since, from: state.from, to: state.to };
    const width = Math.max(100, Math.min(2000, document.getElementById("lanes").clientWidth - 200));
    // The first screen first; what is below it (and the host line) is asked for once it is drawn, so those
    // reads do not compete with the first screen's for the server's CPU.
    const [overview, findings, ops, timeline, lanes] = await Promise.all([
      api("overview", params), api("findings", params), api("ops", params), api("timeline", span),
      api("lanes", { ...span, width }),
    ]);
    renderFilter();
    renderSessions(overview.sessions);
    renderOverview(overview);
    const topOp = renderHeadline(overview, findings, ops);
    renderOps(ops, renderFindings(findings, overview.window));
    renderTimeline(timeline, topOp, findingBands(findings, overview.window));
    renderLanes(lanes, overview.sampling);
    // When the first screen was first drawn, in ms since the page's navigation began: bench/dashboard_bench.py
    // reads it as the page's time to interactive.
    if (!document.body.dataset.drawnMs) document.body.dataset.drawnMs = String(Math.round(performance.now()));
    const [processes, containers, system] = await Promise.all([
      api("processes", { limit: 50 }), api("containers", {}), api("snapshots", { since: state.since, limit: 3600 }),
    ]);
    renderSystem(system);
    renderProcesses(processes, containers);
    await refreshDiff(overview.baseline);
    status.textContent = `updated ${new Date().toLocaleTimeString()}`;
    await refreshProfile();
  } catch (err) {
    status.textContent = `error: ${err.message}`;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("since").addEventListener("change", (ev) => { state.since = ev.target.value; refresh(); });
  document.getElementById("session").addEventListener("change", (ev) => {
    state.session = ev.target.value;
    refresh();
  });
  document.getElementById("pid-filter").addEventListener("click", () => { state.pid = null; refresh(); });
  window.addEventListener("resize", () => {
    const box = document.getElementById("timeline");
    if (plot) plot.setSize({ width: Math.max(320, box.clientWidth), height: 240 });
  });
  setInterval(() => { if (document.getElementById("live").checked && !document.hidden) refresh(); }, 3000);
  refresh();
});
