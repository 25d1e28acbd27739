// The on-CPU profile as a flame graph: /api/v1/profile's `flame` tree (gpuscope.stacks.flame), outermost frame
// at the top (an icicle), each frame as wide as its samples. Drawn by hand on a canvas: the chart library (uPlot)
// draws series over axes, not trees, and an icicle is only rectangles and their names. Hover a frame for its
// name and samples; click one to fill the width with it; click the top row to go back. Names are untrusted
// (function names of the traced program): they are drawn as canvas text or set as textContent, never as HTML.
"use strict";

const FLAME_ROW = 18;

// A stable warm colour per name, so a function keeps its colour as the view zooms.
function flameColour(name) {
  let h = 0;
  for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
  return `hsl(${20 + (h % 35)}, ${70 + (h % 20)}%, ${58 + (h % 12)}%)`;
}

// The tree's nodes laid out under `root`: [{node, depth, x, w}] in fractions of the width.
function flameLayout(root) {
  const out = [];
  const walk = (node, depth, x, w) => {
    out.push({ node, depth, x, w });
    let at = x;
    for (const child of node.children || []) {
      const cw = node.samples ? (w * child.samples) / node.samples : 0;
      walk(child, depth + 1, at, cw);
      at += cw;
    }
  };
  walk(root, 0, 0, 1);
  return out;
}

function drawFlame(canvas, tip, tree, total) {
  let root = tree;
  const path = [];  // the nodes from the tree's top to the zoomed root, to go back
  const render = () => {
    const boxes = flameLayout(root);
    const depth = Math.max(...boxes.map((b) => b.depth)) + 1;
    const width = canvas.clientWidth || 800, ratio = devicePixelRatio || 1;
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(depth * FLAME_ROW * ratio);
    canvas.style.height = `${depth * FLAME_ROW}px`;
    const ctx = canvas.getContext("2d");
    ctx.scale(ratio, ratio);
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    for (const b of boxes) {
      const x = b.x * width, w = b.w * width, y = b.depth * FLAME_ROW;
      if (w < 0.5) continue;
      ctx.fillStyle = b.depth === 0 ? "#d0d5dd" : flameColour(b.node.name);
      ctx.fillRect(x, y, Math.max(w - 1, 0.5), FLAME_ROW - 1);
      if (w > 30) {
        ctx.save();
        ctx.beginPath();
        ctx.rect(x, y, w - 2, FLAME_ROW);
        ctx.clip();
        ctx.fillStyle = "#1d2330";
        ctx.fillText(b.node.name, x + 3, y + FLAME_ROW / 2);
        ctx.restore();
      }
    }
    canvas.dataset.nodes = String(boxes.length);
    canvas.dataset.root = root.name;
    return boxes;
  };
  let boxes = render();
  const hit = (ev) => {
    const r = canvas.getBoundingClientRect(), fx = (ev.clientX - r.left) / r.width;
    const depth = Math.floor((ev.clientY - r.top) / FLAME_ROW);
    return boxes.find((b) => b.depth === depth && fx >= b.x && fx < b.x + b.w) || null;
  };
  canvas.onmousemove = (ev) => {
    const b = hit(ev);
    tip.textContent = b ? `${b.node.name}: ${b.node.samples.toLocaleString()} samples `
      + `(${((100 * b.node.samples) / Math.max(total, 1)).toFixed(1)}% of all)` : "";
  };
  canvas.onclick = (ev) => {
    const b = hit(ev);
    if (!b) return;
    if (b.depth === 0 && path.length) root = path.pop();
    else if (b.depth > 0) { path.push(root); root = b.node; }
    boxes = render();
  };
}
