// The thread lanes under the timeline, drawn from /api/v1/lanes (the server reduces the events to one share per
// pixel). Uses dashboard.js's el and fmtNs (loaded after this file, called only once the page runs). Process and
// thread names are untrusted: put into the page as text and title attributes only.
"use strict";

// One lane per process that calls the GPU (click its name to show its threads), each with five bands (GPU calls,
// NCCL calls, preempted, blocked, reclaim): each pixel as dark as the share of its interval spent so, for a
// process its busiest thread's share (the server reduces the events to these shares: /api/v1/lanes). Hover a lane
// for who held its CPU while it was preempted: in all (its title), and at the pixel under the pointer (the tip).
const LANE_BANDS = [["gpu", [47, 111, 222]], ["nccl", [122, 90, 248]], ["preempted", [52, 64, 84]],
  ["blocked", [152, 162, 179]], ["reclaim", [181, 71, 8]]];
const expanded = new Set();  // pids whose threads are shown

function laneCanvas(lane, width, attrs) {
  const canvas = el("canvas", { width: String(width), height: "20", ...attrs });  // 5 bands of 4 px
  const ctx = canvas.getContext("2d");
  // A thread's GPU band takes the colour its op has on the timeline, pixel by pixel (the op with most call time
  // there); a process's, merged from its threads, stays one colour.
  const byOp = (lane.ops || []).map((op) => OP_COLOURS.get(op));
  LANE_BANDS.forEach(([key, [r, g, b]], band) => {
    (lane[key] || []).forEach((share, x) => {
      if (share <= 0) return;
      const opColour = key === "gpu" && lane.top_op ? byOp[lane.top_op[x]] : undefined;
      ctx.globalAlpha = Math.min(1, 0.15 + share);
      ctx.fillStyle = opColour || `rgb(${r},${g},${b})`;
      ctx.fillRect(x, band * 4, 1, 4);
    });
  });
  ctx.globalAlpha = 1;
  return canvas;
}

// Who held the lane's CPU at the pixel under the pointer (per pixel, the process that held it most while the
// thread was preempted there), or "" where it was not preempted. A process's lane asks each of its threads.
function preemptorAt(lanes, x) {
  const names = new Set();
  for (const l of lanes) {
    const i = l.top_preemptor ? l.top_preemptor[x] : -1;
    const who = i >= 0 && l.held_by ? l.held_by[i] : null;
    if (who) names.add(`${who.comm || "?"} (pid ${who.pid})`);
  }
  return names.size ? `preempted here by ${[...names].join(", ")}` : "";
}

// The tip that follows the pointer over a lane: its name, and who preempted it at that pixel.
function laneTip(canvas, name, lanes) {
  const tip = document.getElementById("lane-tip");
  canvas.addEventListener("mousemove", (e) => {
    const box = canvas.getBoundingClientRect();
    const x = Math.floor(((e.clientX - box.left) / box.width) * canvas.width);
    const held = preemptorAt(lanes, Math.max(0, Math.min(canvas.width - 1, x)));
    tip.textContent = held ? `${name}: ${held}` : name;
    tip.dataset.pixel = String(x);
    tip.style.left = `${e.pageX + 12}px`;
    tip.style.top = `${e.pageY + 12}px`;
    tip.hidden = false;
  });
  canvas.addEventListener("mouseleave", () => { tip.hidden = true; });
}

function laneTitle(name, lanes) {
  const gpuNs = lanes.reduce((sum, l) => sum + l.gpu_ns, 0);
  const held = new Map();
  for (const l of lanes) {
    for (const p of l.preemptors || []) {
      const key = `${p.comm || "?"} (pid ${p.pid})`;
      held.set(key, (held.get(key) || 0) + p.ns);
    }
  }
  const who = [...held.entries()].sort((a, b) => b[1] - a[1]).slice(0, 3).map(([k, ns]) => `${k} ${fmtNs(ns)}`);
  return `${name}: ${fmtNs(gpuNs)} in GPU calls` + (who.length ? `; preempted by ${who.join(", ")}` : "");
}

function renderLanes(l, sampling) {
  const box = document.getElementById("lanes");
  box.replaceChildren();
  if (!l.lanes.length) { box.append(el("p", { class: "muted" }, "no thread made GPU calls in this window")); return; }
  // Ops the overhead budget probes in windows have rows only there: their share of a lane is a lower bound.
  if (sampling && sampling.estimated_ops && sampling.estimated_ops.length) {
    box.append(el("p", { class: "hint" }, `≈ ${sampling.estimated_ops.join(", ")}: recorded only while probed `
      + `(${(100 * (sampling.coverage || 0)).toFixed(1)}% of the time, overhead budget), so their share of each `
      + "lane is a lower bound"));
  }
  const byPid = new Map();
  for (const lane of l.lanes) {
    if (!byPid.has(lane.pid)) byPid.set(lane.pid, []);
    byPid.get(lane.pid).push(lane);
  }
  for (const [pid, threads] of byPid) {
    const name = `${threads[0].comm || "?"} ${pid}${threads.some((t) => t.rank !== null && t.rank !== undefined)
      ? ` rank ${threads.find((t) => t.rank !== null && t.rank !== undefined).rank}` : ""}`;
    const many = threads.length > 1;
    // A process: per pixel, its busiest thread's share of each band.
    const merged = many ? Object.fromEntries(LANE_BANDS.map(([key]) => [key,
      threads[0].gpu.map((_, x) => Math.max(...threads.map((t) => (t[key] ? t[key][x] : 0))))])) : threads[0];
    const label = el("span", { class: "lane-name" }, many ? `${expanded.has(pid) ? "▾" : "▸"} ${name} (${threads.length} threads)` : name);
    const canvas = laneCanvas(merged, l.width, { "data-pid": String(pid), "data-tid": many ? "" : String(threads[0].tid) });
    laneTip(canvas, name, threads);
    const row = el("div", { class: many ? "lane process" : "lane", title: laneTitle(name, threads) }, label, canvas);
    if (many) {
      label.addEventListener("click", () => {
        if (expanded.has(pid)) expanded.delete(pid); else expanded.add(pid);
        renderLanes(l, sampling);
      });
    }
    box.append(row);
    if (many && expanded.has(pid)) {
      for (const t of threads) {
        const tname = `${t.comm || "?"} ${t.pid}/${t.tid}`;
        const tcanvas = laneCanvas(t, l.width, { "data-pid": String(t.pid), "data-tid": String(t.tid) });
        laneTip(tcanvas, tname, [t]);
        box.append(el("div", { class: "lane thread", title: laneTitle(tname, [t]) }, el("span", { class: "lane-name" }, tname),
          tcanvas));
      }
    }
  }
}
