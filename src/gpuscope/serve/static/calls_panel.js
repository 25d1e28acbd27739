// The slowest calls of one interval of the timeline, with their stacks: a click on the timeline (not a drag)
// asks /api/v1/calls for the interval under the pointer. Uses dashboard.js's el, api and fmtNs (loaded after
// this file, called only once the page runs). Every string is untrusted and put into the page as text only.
"use strict";

async function showCalls(fromS, toS, session) {
  const section = document.getElementById("calls-section");
  const out = document.getElementById("calls");
  section.hidden = false;
  document.getElementById("calls-when").textContent =
    `${new Date(fromS * 1e3).toISOString().slice(11, 23)} – ${new Date(toS * 1e3).toISOString().slice(11, 23)} UTC`;
  out.replaceChildren(el("p", { class: "muted" }, "reading…"));
  let answer;
  try {
    answer = await api("calls", { session, from: `@${fromS.toFixed(6)}`, to: `@${toS.toFixed(6)}`, limit: 10 });
  } catch (err) {
    out.replaceChildren(el("p", { class: "muted" }, `error: ${err.message}`));
    return;
  }
  out.replaceChildren();
  if (!answer.calls.length) out.append(el("p", { class: "muted" }, "no GPU calls start in this interval"));
  for (const call of answer.calls) {
    const head = el("summary", {}, el("strong", {}, call.op || "?"), ` ${fmtNs(call.duration_ns)} · `,
      `${call.comm || "?"} (pid ${call.pid}, tid ${call.tid}) · `,
      new Date(Number(BigInt(call.wall_ns) / 1000000n)).toISOString().slice(11, 23), " UTC",
      call.ret ? ` · returned ${call.ret}` : "");
    const item = el("details", { class: "call", "data-id": String(call.id) }, head);
    item.append(call.frames ? el("pre", {}, call.frames.join("\n"))
      : el("p", { class: "muted" }, "no stack recorded for this call (stacks are taken per call site: see docs/trace.md)"));
    out.append(item);
  }
}
