// tg VIZ page: kernels (searchable, sortable, repeated schedules collapsed) | a kernel's steps (each pass,
// and under it each rule that fired, identical firings grouped) | the graph (zoom, pan, fit; what a step
// changed highlighted) | code (the step's diff, the rule's source, the node, the generated code).
// A second tab draws the PROFILE timeline. Keys: j/k steps, J/K kernels, f fit, +/- zoom, t timeline.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { rows: [], group: null, steps: [], items: [], at: -1, timelineLoaded: false, expanded: new Set() };
const FIRES_SHOWN = 40; // rewrites listed under a pass before "... N more"

async function getJSON(path) {
  const r = await fetch(path, { cache: "no-store" });
  if (!r.ok) throw new Error(`${path}: ${r.status} ${await r.text()}`);
  return r.json();
}

function el(tag, attrs = {}, text = null) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== null) e.textContent = text;
  return e;
}

function fmtMs(ms) { return TGTimeline.fmtUs(ms * 1e3); }

// ---- kernels ----
async function loadKernels() {
  const [rows, info] = await Promise.all([getJSON("/api/kernels"), getJSON("/api/info")]);
  state.rows = rows;
  const banner = [info.error && `the program raised: ${info.error}`, info.overflow].filter(Boolean);
  if (banner.length) { $("banner").hidden = false; $("banner").textContent = banner.join(" | "); }
  const nk = rows.filter((r) => r.kind === "kernel").length;
  const ns = rows.filter((r) => r.kind === "schedule").reduce((a, r) => a + r.count, 0);
  const total = rows.reduce((a, r) => a + (r.kind === "kernel" ? r.time_us : 0), 0);
  $("summary").textContent = `${nk} kernels, ${ns} schedules, kernels ran ${TGTimeline.fmtUs(total)} in all`;
  renderKernels();
}

function rowText(k) {
  return [k.name, k.device, (k.shape || []).join("x"), ...(k.ops || []), ...(k.tensor_ops || []), ...(k.lines || [])]
    .join(" ").toLowerCase();
}

function renderKernels() {
  const q = $("search").value.trim().toLowerCase();
  const showSched = $("show-schedules").checked;
  let rows = state.rows.filter((k) => (showSched || k.kind !== "schedule") && (!q || rowText(k).includes(q)));
  const by = $("sort").value;
  const keyed = { time: (k) => -k.time_us, launches: (k) => -k.launches, name: (k) => k.name, order: (k) => k.id };
  if (by !== "order") rows = [...rows].sort((a, b) => (keyed[by](a) < keyed[by](b) ? -1 : keyed[by](a) > keyed[by](b) ? 1 : a.id - b.id));
  const body = document.querySelector("#kernels tbody");
  body.replaceChildren();
  for (const k of rows) {
    const cls = `row ${k.kind}${k.error ? " failed" : ""}${k.id === state.group ? " selected" : ""}`;
    const tr = el("tr", { class: cls, "data-id": k.id, "data-kind": k.kind });
    const runs = k.kind === "schedule" ? (k.count > 1 ? `x${k.count}` : "") : k.launches || "";
    const time = k.time_us ? TGTimeline.fmtUs(k.time_us) : "";
    if (k.kind === "kernel") {
      const cells = [k.id, k.name, k.device, (k.shape || []).join("x"), runs, time];
      cells.forEach((c, i) => tr.append(el("td", i === 1 ? { title: k.name } : {}, String(c))));
    } else { // a schedule or other group: its name across the name, device and shape columns
      [[k.id, 1], [k.name, 3], [runs, 1], [time, 1]].forEach(([c, span]) => tr.append(el("td", { colspan: span }, String(c))));
    }
    const why = [k.error && `failed: ${k.error}`, k.tensor_ops && k.tensor_ops.length && `tensor ops: ${k.tensor_ops.join(", ")}`,
      k.ops && k.ops.length && `computes: ${k.ops.join(" ")}`,
      k.lines && k.lines.length && `from: ${k.lines.join("; ")}`, k.count > 1 && `the same schedule ran ${k.count} times`];
    tr.title = why.filter(Boolean).join("\n");
    tr.onclick = () => openGroup(k.id);
    body.append(tr);
  }
}

function visibleRows() { return [...document.querySelectorAll("#kernels tr.row")]; }

// ---- steps ----
async function openGroup(id) {
  const g = await getJSON(`/api/group/${id}`);
  state.group = id;
  state.steps = g.steps;
  state.expanded = new Set();
  visibleRows().forEach((tr) => tr.classList.toggle("selected", Number(tr.dataset.id) === id));
  const sel = document.querySelector("#kernels tr.selected");
  if (sel) sel.scrollIntoView({ block: "nearest" });
  $("group-name").textContent = `of ${g.name}` + (g.error ? ` (failed: ${g.error})` : "");
  const m = g.meta;
  const facts = [m.device && `device ${m.device}`, m.shape && m.shape.length && `shape ${m.shape.join("x")}`,
    m.opts && m.opts.length && `opts ${m.opts.join(" ")}`, m.ops && m.ops.length && `computes ${m.ops.join(" ")}`,
    m.tensor_ops && m.tensor_ops.length && `tensor ops: ${m.tensor_ops.join(", ")}`,
    m.lines && m.lines.length && `made by ${m.lines.join("; ")}`, m.replays && `${m.replays} TinyJit replays`];
  $("group-facts").textContent = facts.filter(Boolean).join(" | ");
  renderSteps();
  const first = state.items.findIndex((it) => state.steps[it.index].kind !== "text");
  if (state.items.length) await goTo(first >= 0 ? first : 0);
}

function renderSteps() {
  const ol = $("steps");
  ol.replaceChildren();
  state.items = [];
  const hide = $("hide-noop").checked;
  for (const s of state.steps) {
    if (hide && s.kind === "rewrite" && s.rules === 0) continue;
    const what = s.kind === "rewrite" ? `${s.rules} rewrites, ${s.nodes} nodes, ${fmtMs(s.ms)}`
      : s.kind === "graph" ? `${s.nodes} nodes` : "code";
    const li = el("li", { class: `step ${s.kind}`, "data-item": state.items.length }, `${s.name} (${what})`);
    const at = state.items.length;
    li.onclick = (ev) => { ev.stopPropagation(); goTo(at); };
    state.items.push({ index: s.index, k: null, li });
    if (s.fires.length) {
      const sub = el("ol", { class: "fires" });
      const shown = state.expanded.has(s.index) ? s.fires : s.fires.slice(0, FIRES_SHOWN);
      shown.forEach((f, k) => {
        const n = state.items.length;
        const txt = `${f.pattern}${f.count > 1 ? ` x${f.count}` : ""}  @ ${f.location}`;
        const fl = el("li", { class: "fire", "data-item": n, title: txt }, txt);
        fl.onclick = (ev) => { ev.stopPropagation(); goTo(n); };
        state.items.push({ index: s.index, k, li: fl });
        sub.append(fl);
      });
      if (shown.length < s.fires.length) { // a long pass: the rest on demand (the list stays quick to draw)
        const more = el("li", { class: "fire more" }, `... ${s.fires.length - shown.length} more rewrites (click to list)`);
        more.onclick = (ev) => {
          ev.stopPropagation();
          const cur = state.items[state.at];
          state.expanded.add(s.index);
          renderSteps(); // (the items after this pass move: find the selected one again)
          state.at = cur ? state.items.findIndex((it) => it.index === cur.index && it.k === cur.k) : -1;
          markItem(state.at);
        };
        sub.append(more);
      }
      li.append(sub);
    }
    ol.append(li);
  }
}

function markItem(n) {
  document.querySelectorAll("#steps li.selected").forEach((x) => x.classList.remove("selected"));
  if (state.items[n]) state.items[n].li.classList.add("selected");
}

async function goTo(n) {
  if (n < 0 || n >= state.items.length) return;
  state.at = n;
  window.lastStepMs = null;
  const t0 = performance.now();
  const it = state.items[n];
  markItem(n);
  it.li.scrollIntoView({ block: "nearest" });
  if (it.k === null) await showStep(state.group, it.index);
  else await showFire(state.group, it.index, it.k);
  window.lastStepMs = performance.now() - t0; // (the browser test reports it)
}

function showDiff(diff, title, none = "(no change in the text)") {
  $("diff-title").textContent = title;
  const pre = $("diff");
  pre.replaceChildren();
  for (const line of (diff || "").split("\n")) {
    if (!line) continue;
    const cls = line.startsWith("+++") || line.startsWith("---") ? "hdr" : line[0] === "+" ? "add" : line[0] === "-" ? "del" : line[0] === "@" ? "hunk" : "";
    pre.append(el("span", { class: `dl ${cls}` }, line + "\n"));
  }
  if (!diff) pre.textContent = none;
}

const BIG = 300; // nodes: a graph this large starts with its constants folded into their users

function drawGraph(graph, title) {
  state.graph = graph;
  state.title = title;
  if (graph) $("hide-consts").checked = graph.nodes.length > BIG;
  redraw();
}

function redraw() {
  const graph = state.graph;
  $("step-title").textContent = state.title;
  $("node").textContent = graph ? "Click a node to see its op, dtype, arg and sources." : "";
  if (!graph) { $("graph").replaceChildren(el("p", { class: "note" }, "This step is code: see the right pane.")); return; }
  const shown = TGGraph.simplify(graph, { hideConsts: $("hide-consts").checked, depth: Number($("depth").value) });
  const changed = TGGraph.draw($("graph"), shown, (n) => showNode(graph, n)) || [];
  if (changed.length) $("step-title").textContent += `, ${changed.length} nodes changed (highlighted)`;
  if (shown.hidden) $("step-title").textContent += ` [${shown.hidden} of ${graph.nodes.length} nodes folded]`;
  $("step-title").title = $("step-title").textContent; // (one line, cut: the whole of it on hover)
}

async function showStep(gid, index) {
  const s = await getJSON(`/api/step/${gid}/${index}`);
  const title = s.name + (s.kind === "rewrite" ? ` (${s.before_nodes} -> ${s.nodes} nodes, ${fmtMs(s.ms)})` : "");
  drawGraph(s.graph, title);
  if (s.kind === "rewrite") showDiff(s.diff, "Diff of the pass (before -> after)");
  else showDiff("", "Diff", "(a snapshot, not a rewrite: open a pass or a rewrite under it for a diff)");
  $("rule-title").textContent = s.rules ? `Rules that fired (${s.rules})` : "Rule";
  $("rule").textContent = s.fires.map((f) => `${f.pattern}${f.count > 1 ? ` x${f.count}` : ""}  @ ${f.location}`).join("\n");
  showCode(s.text, s.name);
}

async function showFire(gid, index, k) {
  const f = await getJSON(`/api/fire/${gid}/${index}/${k}`);
  drawGraph(f.graph, `${f.pattern}${f.count > 1 ? ` (x${f.count})` : ""}: ${f.before} -> ${f.after}`);
  showDiff(f.diff, "Diff of the node (before -> after)");
  $("rule-title").textContent = `Rule ${f.pattern} @ ${f.location}`;
  highlightCode($("rule"), f.source || "(source not readable)");
  showCode(null, "");
}

function showCode(text, name) {
  $("text-title").textContent = text ? `Code: ${name}` : "Code";
  highlightCode($("text"), text || "");
}

const KEYWORDS = /\b(void|int|float|half|double|bool|char|unsigned|long|for|if|else|return|const|restrict|__global|__kernel|extern|__shared__|__device__|lambda|def|None|True|False|and|or|not|in)\b/;
function highlightCode(pre, text) {
  // a light touch: keywords, numbers and comments in colour (the code is shown as it was generated)
  pre.replaceChildren();
  const re = new RegExp(`(//[^\\n]*|#[^\\n]*)|${KEYWORDS.source}|(\\b\\d+(?:\\.\\d+)?f?\\b)`, "g");
  let last = 0;
  for (const m of text.matchAll(re)) {
    if (m.index > last) pre.append(document.createTextNode(text.slice(last, m.index)));
    pre.append(el("span", { class: m[1] ? "cm" : m[2] ? "kw" : "num" }, m[0]));
    last = m.index + m[0].length;
  }
  pre.append(document.createTextNode(text.slice(last)));
}

function showNode(graph, n) {
  const byId = new Map(graph.nodes.map((x) => [x.id, x]));
  const srcs = n.src.map((s) => `  ${s}: ${byId.get(s).op} ${byId.get(s).dtype}`).join("\n");
  $("node").textContent = `id ${n.id}${n.changed ? " (made by this step)" : ""}\nop ${n.op}\ndtype ${n.dtype}\narg ${n.arg}\nsources:\n${srcs || "  (none)"}`;
}

// ---- timeline ----
async function showTab(which) {
  const tl = which === "timeline";
  $("explorer").hidden = tl;
  $("timeline").hidden = !tl;
  $("tab-explorer").classList.toggle("on", !tl);
  $("tab-timeline").classList.toggle("on", tl);
  if (tl && !state.timelineLoaded) {
    state.timelineLoaded = true;
    $("tl-summary").textContent = TGTimeline.load(await getJSON("/api/profile"));
  }
  if (tl) TGTimeline.render();
}

// ---- keys ----
function moveKernel(d) {
  const rows = visibleRows();
  const i = rows.findIndex((tr) => Number(tr.dataset.id) === state.group);
  const next = rows[Math.min(rows.length - 1, Math.max(0, i + d))];
  if (next) openGroup(Number(next.dataset.id));
}

document.addEventListener("keydown", (ev) => {
  if (ev.target.tagName === "INPUT" || ev.target.tagName === "SELECT" || ev.ctrlKey || ev.metaKey || ev.altKey) return;
  const k = ev.key;
  if (k === "t") { showTab($("timeline").hidden ? "timeline" : "explorer"); return; }
  if (!$("explorer").hidden) {
    if (k === "j" || k === "ArrowDown") goTo(state.at + 1);
    else if (k === "k" || k === "ArrowUp") goTo(state.at - 1);
    else if (k === "J" || k === "PageDown") moveKernel(1);
    else if (k === "K" || k === "PageUp") moveKernel(-1);
    else if (k === "f") TGGraph.fit();
    else if (k === "+" || k === "=") TGGraph.zoomBy(1.25);
    else if (k === "-") TGGraph.zoomBy(0.8);
    else return;
    ev.preventDefault();
  }
});

TGGraph.view.onzoom = (k) => { $("zoom-level").textContent = `${Math.round(k * 100)}%`; };
$("fit").onclick = () => TGGraph.fit();
$("zoom-in").onclick = () => TGGraph.zoomBy(1.25);
$("zoom-out").onclick = () => TGGraph.zoomBy(0.8);
$("graph-find").onkeydown = (ev) => {
  if (ev.key !== "Enter") return;
  const n = TGGraph.find($("graph-find").value);
  $("graph-find").title = n ? `${n} nodes match` : "no node matches";
  $("graph-find").classList.toggle("miss", !n && $("graph-find").value !== "");
};
$("hide-consts").onchange = redraw;
$("depth").onchange = redraw;
$("search").oninput = renderKernels;
$("sort").onchange = renderKernels;
$("show-schedules").onchange = renderKernels;
$("hide-noop").onchange = () => { if (state.group !== null) { renderSteps(); goTo(0); } };
$("tab-explorer").onclick = () => showTab("explorer");
$("tab-timeline").onclick = () => showTab("timeline");
$("tl-fit").onclick = () => TGTimeline.fit();
TGTimeline.attach($("tl-view"), $("tl-detail"));
window.addEventListener("resize", () => { if (!$("timeline").hidden) TGTimeline.render(); });
loadKernels().then(() => { window.vizLoadedMs = performance.now(); }).catch((e) => { $("summary").textContent = String(e); });
