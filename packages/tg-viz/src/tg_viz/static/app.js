// tg VIZ page: the schedule (one row per kernel), a kernel's passes, the graph after a pass (laid
// out with dagre), the rules that fired, and text steps (linear UOps, generated source).
"use strict";

const $ = (id) => document.getElementById(id);
const SVGNS = "http://www.w3.org/2000/svg";
let current = { group: null, step: null };

async function getJSON(path) {
  const r = await fetch(path, { cache: "no-store" });
  if (!r.ok) throw new Error(`${path}: ${r.status}`);
  return r.json();
}

function el(tag, attrs = {}, text = null) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== null) e.textContent = text;
  return e;
}

function svg(tag, attrs = {}) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

async function loadKernels() {
  const rows = await getJSON("/api/kernels");
  const body = document.querySelector("#kernels tbody");
  body.replaceChildren();
  let nk = 0;
  for (const k of rows) {
    if (k.kind === "kernel") nk++;
    const tr = el("tr", { class: `row ${k.kind}${k.error ? " failed" : ""}`, "data-id": k.id, "data-kind": k.kind });
    const time = k.time_us ? `${k.time_us.toFixed(1)} us` : "";
    for (const c of [k.id, k.name, k.device, (k.shape || []).join("x"), k.launches || "", time]) tr.append(el("td", {}, String(c)));
    if (k.error) tr.title = k.error;
    tr.onclick = () => openGroup(k.id);
    body.append(tr);
  }
  $("summary").textContent = `${nk} kernels, ${rows.length - nk} other groups`;
}

async function openGroup(id) {
  const g = await getJSON(`/api/group/${id}`);
  current.group = id;
  document.querySelectorAll("#kernels tr.row").forEach((tr) => tr.classList.toggle("selected", Number(tr.dataset.id) === id));
  $("group-name").textContent = `of ${g.name}` + (g.error ? ` (failed: ${g.error})` : "");
  const ol = $("steps");
  ol.replaceChildren();
  const showAll = $("show-noop").checked;
  for (const s of g.steps) {
    if (!showAll && s.kind === "rewrite" && s.rules === 0) continue;
    const what = s.kind === "rewrite" ? `${s.rules} rules, ${s.nodes} nodes` : s.kind === "graph" ? `${s.nodes} nodes` : "text";
    const li = el("li", { class: `step ${s.kind}`, "data-index": s.index }, `${s.name} (${what})`);
    li.onclick = () => openStep(id, s.index);
    ol.append(li);
  }
  const firstGraph = g.steps.find((s) => s.kind !== "text");
  if (g.steps.length) await openStep(id, (firstGraph || g.steps[0]).index);
}

async function openStep(gid, index) {
  const s = await getJSON(`/api/step/${gid}/${index}`);
  current.step = index;
  document.querySelectorAll("#steps li").forEach((li) => li.classList.toggle("selected", Number(li.dataset.index) === index));
  $("step-title").textContent = s.name + (s.kind === "rewrite" ? ` (${s.before_nodes} -> ${s.nodes} nodes, ${s.ms} ms)` : "");
  $("text").textContent = s.text || "";
  $("graph").replaceChildren();
  $("node").textContent = s.graph ? "Click a node to see its op, dtype, arg and sources." : "";
  if (s.graph) drawGraph(s.graph);
  const rules = $("rules");
  rules.replaceChildren();
  $("rule-count").textContent = s.rules_fired.length ? `(${s.rules_fired.length})` : "";
  for (const r of s.rules_fired) {
    rules.append(el("li", { class: "rule" }, `${r.pattern}  @ ${r.location}\n  ${r.before}\n  -> ${r.after}`));
  }
}

function drawGraph(graph) {
  const g = new dagre.graphlib.Graph({ multigraph: true });
  g.setGraph({ rankdir: "TB", nodesep: 18, ranksep: 28, edgesep: 8 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const n of graph.nodes) {
    const lines = n.label.split("\n");
    const w = Math.max(...lines.map((l) => l.length)) * 6.2 + 14;
    g.setNode(String(n.id), { width: w, height: lines.length * 12 + 10, data: n, lines });
  }
  graph.edges.forEach((e, i) => {
    const lines = e.label ? e.label.split("\n") : [];
    const w = lines.length ? Math.max(...lines.map((l) => l.length)) * 5.5 : 0;
    g.setEdge(String(e.src), String(e.dst), { label: e.label, lines, width: w, height: lines.length * 11 }, `e${i}`);
  });
  dagre.layout(g);
  const { width, height } = g.graph();
  const root = svg("svg", { width: width + 20, height: height + 20, viewBox: `-10 -10 ${width + 20} ${height + 20}` });
  const defs = svg("defs");
  const marker = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 6, markerHeight: 6, orient: "auto" });
  marker.append(svg("path", { d: "M0,0 L10,5 L0,10 z", fill: "#889" }));
  defs.append(marker);
  root.append(defs);
  for (const e of g.edges()) {
    const ed = g.edge(e);
    const d = ed.points.map((p, i) => `${i ? "L" : "M"}${p.x},${p.y}`).join(" ");
    root.append(svg("path", { class: "edge", d, "marker-end": "url(#arrow)" }));
    ed.lines.forEach((line, i) => {
      const t = svg("text", { class: "elabel", x: ed.x - ed.width / 2, y: ed.y - ed.height / 2 + 9 + i * 11 });
      t.textContent = line;
      root.append(t);
    });
  }
  for (const id of g.nodes()) {
    const nd = g.node(id);
    const grp = svg("g", { class: `node ${nd.data.op}`, "data-id": id, transform: `translate(${nd.x - nd.width / 2},${nd.y - nd.height / 2})` });
    grp.append(svg("rect", { width: nd.width, height: nd.height, rx: 4 }));
    nd.lines.forEach((line, i) => {
      const t = svg("text", { x: 7, y: 15 + i * 12 });
      t.textContent = line;
      grp.append(t);
    });
    grp.onclick = () => showNode(graph, nd.data, grp);
    root.append(grp);
  }
  $("graph").append(root);
  if (graph.truncated) $("graph").prepend(el("p", {}, "(graph truncated: too many nodes)"));
}

function showNode(graph, n, grp) {
  document.querySelectorAll("g.node").forEach((x) => x.classList.remove("sel"));
  grp.classList.add("sel");
  const byId = new Map(graph.nodes.map((x) => [x.id, x]));
  const srcs = n.src.map((s) => `  ${s}: ${byId.get(s).op} ${byId.get(s).dtype}`).join("\n");
  $("node").textContent = `id ${n.id}\nop ${n.op}\ndtype ${n.dtype}\narg ${n.arg}\nsources:\n${srcs || "  (none)"}`;
}

$("show-noop").onchange = () => { if (current.group !== null) openGroup(current.group); };
loadKernels().catch((e) => { $("summary").textContent = String(e); });
