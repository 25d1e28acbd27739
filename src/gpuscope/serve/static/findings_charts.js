// The findings as pictures: each finding's evidence chart (its op's calls by duration, the calls its cause
// overlapped against the others; or, for a finding no per-call comparison measures, its cause's measure over
// time) and the bands the timeline draws over the time each finding covers.
// Loaded before dashboard.js, which hands these functions what it read through its FindingWire accessors:
// nothing here reads a finding's keys itself. Every string is untrusted and put into the page as text only.
"use strict";

const SEVERITY_RGB = { CRITICAL: [180, 35, 24], HIGH: [217, 45, 32], MEDIUM: [181, 71, 8], LOW: [21, 112, 239] };

function durationText(ms) {
  if (ms >= 1000) return `${+(ms / 1000).toFixed(ms >= 10000 ? 0 : 1)} s`;
  if (ms >= 1) return `${+ms.toFixed(1)} ms`;
  return `${+(ms * 1000).toFixed(1)} µs`;
}

// A histogram as /api/v1/findings sends it (HistogramWire): bins between log-spaced edges, in ns. Drawn as two
// stepped lines, each the share of its own calls per bin, so a few affected calls still show beside many others.
// Returns the chart's element, or null when the histogram cannot be drawn (malformed: it may come from a node).
function evidenceChart(histogram, width) {
  const edges = histogram.edges_ns, affected = histogram.affected, others = histogram.unaffected;
  const bins = affected.length;
  const ok = Array.isArray(edges) && Array.isArray(affected) && Array.isArray(others) && bins > 0
    && others.length === bins && edges.length === bins + 1 && edges.every((e) => Number.isFinite(e) && e > 0);
  if (!ok) return null;
  const nAffected = affected.reduce((s, n) => s + n, 0), nOthers = others.reduce((s, n) => s + n, 0);
  // One point per bin at its upper edge (stepped lines hold each value back to the lower edge), plus the first edge.
  const xs = edges.map((e) => e / 1e6);
  const share = (counts, total) => [0, ...counts.map((n) => (total ? n / total : 0))];
  const box = document.createElement("div");
  box.className = "evidence-chart";
  const step = uPlot.paths.stepped({ align: -1 });
  const opts = {
    width, height: 150,
    scales: { x: { time: false, distr: 3 }, y: { range: [0, 1] } },
    axes: [
      { label: "call duration (log scale)", labelSize: 16, size: 34,
        values: (u, vals) => vals.map((v) => (Math.abs(Math.log10(v) - Math.round(Math.log10(v))) < 1e-6 ? durationText(v) : "")) },
      { label: "share of calls", labelSize: 16, size: 58, values: (u, vals) => vals.map((v) => `${Math.round(100 * v)}%`) },
    ],
    series: [
      { label: "duration", value: (u, v) => (v === null ? "—" : `≤ ${durationText(v)}`) },
      { label: `overlapping the cause (${nAffected.toLocaleString()})`, stroke: "#d92d20", width: 2, paths: step,
        points: { show: false }, value: (u, v) => (v === null ? "—" : `${(100 * v).toFixed(1)}%`) },
      { label: `the others (${nOthers.toLocaleString()})`, stroke: "#2f6fde", width: 2, paths: step,
        points: { show: false }, value: (u, v) => (v === null ? "—" : `${(100 * v).toFixed(1)}%`) },
    ],
    cursor: { drag: { x: false, y: false } },
  };
  const chart = new uPlot(opts, [xs, share(affected, nAffected), share(others, nOthers)], box);
  box.dataset.axes = JSON.stringify(opts.axes.map((a) => a.label));  // the canvas's axis titles, as text too
  box.dataset.calls = JSON.stringify({ affected: nAffected, unaffected: nOthers });
  box.chart = chart;
  return box;
}

// The timeline's bands: [{id, severity, from, to}] in wall-clock seconds. A uPlot hook draws each one under the
// series, as wide as the time it covers (at least 2 px, so an instant still shows).
function bandsHook(bands) {
  return (u) => {
    const ctx = u.ctx, top = u.bbox.top, height = u.bbox.height;
    ctx.save();
    for (const band of bands) {
      const [r, g, b] = SEVERITY_RGB[band.severity] || SEVERITY_RGB.LOW;
      const x0 = u.valToPos(band.from, "x", true), x1 = u.valToPos(band.to, "x", true);
      const left = Math.max(u.bbox.left, Math.min(x0, x1)), right = Math.min(u.bbox.left + u.bbox.width, Math.max(x0, x1));
      if (right < u.bbox.left || left > u.bbox.left + u.bbox.width) continue;
      ctx.fillStyle = `rgba(${r},${g},${b},0.10)`;
      ctx.fillRect(left, top, Math.max(2, right - left), height);
      ctx.fillStyle = `rgba(${r},${g},${b},0.85)`;
      ctx.fillRect(left, top, Math.max(2, right - left), 3 * devicePixelRatio);
    }
    ctx.restore();
  };
}

// A cause's measure over time (SeriesWire: one value per bin_ns from start_ns, in the window's clock), for the
// findings no per-call comparison measures (a call rate that fell, the share of time the GPU sat idle): a line
// over the time the window covers, the finding's own span shaded. `offsetNs` turns the window's clock into
// wall-clock ns, as the timeline's axis is. Returns the chart's element, or null when the series cannot be drawn.
function seriesChart(series, width, offsetNs, span, severity) {
  const values = series.values, bin = series.bin_ns, start = series.start_ns;
  const ok = Array.isArray(values) && values.length > 0 && values.every((v) => Number.isFinite(v))
    && Number.isFinite(bin) && bin > 0 && Number.isFinite(start) && typeof series.unit === "string"
    && typeof series.label === "string";
  if (!ok) return null;
  const xs = [], ys = [];
  values.forEach((v, i) => { xs.push((start + offsetNs + i * bin) / 1e9); ys.push(v); });
  xs.push((start + offsetNs + values.length * bin) / 1e9);
  ys.push(values[values.length - 1]);
  const unit = series.unit;
  const fmt = (v) => (unit === "%" ? `${+v.toFixed(1)}%` : `${v >= 100 ? Math.round(v).toLocaleString() : +v.toFixed(1)}${unit}`);
  const box = document.createElement("div");
  box.className = "evidence-chart";
  const shade = span ? bandsHook([{ severity, from: span.from, to: span.to }]) : null;
  const opts = {
    width, height: 150,
    scales: { x: { time: true }, y: { range: (u, lo, hi) => [0, unit === "%" ? 100 : Math.max(hi * 1.1, 1)] } },
    axes: [
      { label: "time", labelSize: 16, size: 34 },
      { label: unit === "%" ? `${series.label} (%)` : `rate (${unit})`, labelSize: 16, size: 66,
        values: (u, vals) => vals.map(fmt) },
    ],
    series: [
      {},
      { label: series.label, stroke: "#2f6fde", width: 2, paths: uPlot.paths.stepped({ align: 1 }),
        points: { show: false }, value: (u, v) => (v === null ? "—" : fmt(v)) },
    ],
    cursor: { drag: { x: false, y: false } },
    hooks: shade ? { drawClear: [shade] } : {},
  };
  const chart = new uPlot(opts, [xs, ys], box);
  box.dataset.axes = JSON.stringify(opts.axes.map((a) => a.label));
  box.dataset.series = JSON.stringify({ label: series.label, unit, bins: values.length });
  box.chart = chart;
  return box;
}
