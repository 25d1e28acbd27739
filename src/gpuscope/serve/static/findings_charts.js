// The findings as pictures: each finding's evidence chart (its op's calls by duration, the calls its cause
// overlapped against the others) and the bands the timeline draws over the time each finding covers.
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
