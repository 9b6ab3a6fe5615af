// tg VIZ graph view: a UOp graph laid out with dagre and drawn as SVG inside one <g> whose transform
// (translate + scale) is the view: the wheel zooms around the pointer, a drag pans, fit() shows it all.
// Nodes a rewrite made carry "changed" and are highlighted.
"use strict";

const TGGraph = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const LAYOUT_LIMIT = 2500; // nodes: past this dagre takes seconds, so the page asks first
  const view = { x: 0, y: 0, k: 1, w: 0, h: 0, root: null, vp: null, onzoom: null };

  function svg(tag, attrs = {}) {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    return e;
  }

  function apply() {
    if (view.vp) view.vp.setAttribute("transform", `translate(${view.x},${view.y}) scale(${view.k})`);
    if (view.onzoom) view.onzoom(view.k);
  }

  function zoomAt(factor, px, py) {
    const k = Math.min(8, Math.max(0.02, view.k * factor));
    view.x = px - ((px - view.x) * k) / view.k;
    view.y = py - ((py - view.y) * k) / view.k;
    view.k = k;
    apply();
  }

  function zoomBy(factor) {
    if (!view.root) return;
    const r = view.root.getBoundingClientRect();
    zoomAt(factor, r.width / 2, r.height / 2);
  }

  function fit() {
    if (!view.root) return;
    const r = view.root.getBoundingClientRect();
    const pad = 16;
    const k = Math.min((r.width - pad * 2) / Math.max(view.w, 1), (r.height - pad * 2) / Math.max(view.h, 1), 1.5);
    view.k = k;
    view.x = (r.width - view.w * k) / 2;
    view.y = Math.max(pad, (r.height - view.h * k) / 2);
    apply();
  }

  function focus(ids) {
    // center the view on the first node with one of these ids, at a readable scale
    if (!view.root || !ids.length) return;
    const g = view.root.querySelector(`g.node[data-id="${ids[0]}"]`);
    if (!g) return;
    const b = g.getBBox();
    const m = /translate\(([-\d.e]+),([-\d.e]+)\)/.exec(g.getAttribute("transform"));
    const r = view.root.getBoundingClientRect();
    view.k = Math.max(view.k, 0.8);
    view.x = r.width / 2 - (Number(m[1]) + b.width / 2) * view.k;
    view.y = r.height / 2 - (Number(m[2]) + b.height / 2) * view.k;
    apply();
  }

  function attachControls(root) {
    root.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      const r = root.getBoundingClientRect();
      zoomAt(Math.exp(-ev.deltaY * 0.0015), ev.clientX - r.left, ev.clientY - r.top);
    }, { passive: false });
    root.addEventListener("mousedown", (ev) => {
      if (ev.button !== 0) return;
      drag = { x: ev.clientX, y: ev.clientY, vx: view.x, vy: view.y, moved: false };
    });
  }

  let drag = null; // (one pan at a time, over whichever graph is drawn now)
  window.addEventListener("mousemove", (ev) => {
    if (!drag || !view.root) return;
    const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
    if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
    if (!drag.moved) return;
    view.x = drag.vx + dx;
    view.y = drag.vy + dy;
    view.root.classList.add("panning");
    apply();
  });
  window.addEventListener("mouseup", () => {
    if (drag && drag.moved && view.root) {
      const r = view.root;
      r.dataset.justPanned = "1"; // the click that ends a drag selects nothing
      setTimeout(() => delete r.dataset.justPanned, 0);
      view.root.classList.remove("panning");
    }
    drag = null;
  });

  function simplify(graph, { hideConsts = false, depth = 0 } = {}) {
    // a smaller graph to draw: constants folded into their users' labels, and only the nodes within `depth`
    // levels of the outputs (a node whose sources were cut says how many); the data is not changed
    const users = new Map(graph.nodes.map((n) => [n.id, 0]));
    for (const e of graph.edges) users.set(e.src, (users.get(e.src) || 0) + 1);
    const byId = new Map(graph.nodes.map((n) => [n.id, n]));
    const level = new Map();
    const queue = graph.nodes.filter((n) => !users.get(n.id)).map((n) => [n.id, 0]);
    for (let i = 0; i < queue.length; i++) {
      const [id, d] = queue[i];
      if (level.has(id)) continue;
      level.set(id, d);
      for (const s of byId.get(id).src) if (!level.has(s)) queue.push([s, d + 1]);
    }
    const keep = (n) => !(hideConsts && n.op === "CONST") && (!depth || (level.get(n.id) ?? 0) <= depth);
    const kept = new Set(graph.nodes.filter(keep).map((n) => n.id));
    if (kept.size === graph.nodes.length) return graph;
    const nodes = graph.nodes.filter((n) => kept.has(n.id)).map((n) => {
      const consts = n.src.filter((s) => byId.get(s).op === "CONST" && !kept.has(s)).map((s) => byId.get(s).label.split(" ")[0]);
      const cut = n.src.filter((s) => byId.get(s).op !== "CONST" && !kept.has(s)).length;
      const extra = [consts.length ? `consts ${consts.join(", ")}` : "", cut ? `(+${cut} sources below)` : ""].filter(Boolean);
      return extra.length ? { ...n, label: `${n.label}\n${extra.join("\n")}`, cut: cut > 0 } : n;
    });
    const edges = graph.edges.filter((e) => kept.has(e.src) && kept.has(e.dst));
    return { ...graph, nodes, edges, hidden: graph.nodes.length - kept.size };
  }

  function layout(graph) {
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
    return g;
  }

  function draw(container, graph, onNode) {
    container.replaceChildren();
    view.root = view.vp = null;
    if (graph.nodes.length > LAYOUT_LIMIT && !container.dataset.force) {
      const p = document.createElement("p");
      p.className = "big";
      p.textContent = `${graph.nodes.length} nodes: laying them out takes a while. `;
      const b = document.createElement("button");
      b.textContent = "draw it anyway";
      b.onclick = () => { container.dataset.force = "1"; draw(container, graph, onNode); delete container.dataset.force; };
      p.append(b);
      container.append(p);
      return;
    }
    const g = layout(graph);
    const { width, height } = g.graph();
    const root = svg("svg", { class: "graph", width: "100%", height: "100%" });
    const defs = svg("defs");
    const marker = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 6, markerHeight: 6, orient: "auto" });
    marker.append(svg("path", { d: "M0,0 L10,5 L0,10 z", fill: "#889" }));
    defs.append(marker);
    root.append(defs);
    const vp = svg("g", { class: "viewport" });
    root.append(vp);
    for (const e of g.edges()) {
      const ed = g.edge(e);
      const d = ed.points.map((p, i) => `${i ? "L" : "M"}${p.x},${p.y}`).join(" ");
      vp.append(svg("path", { class: "edge", d, "marker-end": "url(#arrow)" }));
      ed.lines.forEach((line, i) => {
        const t = svg("text", { class: "elabel", x: ed.x - ed.width / 2, y: ed.y - ed.height / 2 + 9 + i * 11 });
        t.textContent = line;
        vp.append(t);
      });
    }
    const changed = [];
    for (const id of g.nodes()) {
      const nd = g.node(id);
      const cls = `node ${nd.data.op}${nd.data.changed ? " changed" : ""}${nd.data.cut ? " cut" : ""}`;
      const grp = svg("g", { class: cls, "data-id": id, transform: `translate(${nd.x - nd.width / 2},${nd.y - nd.height / 2})` });
      grp.append(svg("rect", { width: nd.width, height: nd.height, rx: 4 }));
      const title = svg("title");
      title.textContent = `${nd.data.op} ${nd.data.dtype}\n${nd.data.arg}`;
      grp.append(title);
      nd.lines.forEach((line, i) => {
        const t = svg("text", { x: 7, y: 15 + i * 12 });
        t.textContent = line;
        grp.append(t);
      });
      grp.onclick = () => {
        if (root.dataset.justPanned) { delete root.dataset.justPanned; return; }
        root.querySelectorAll("g.node.sel").forEach((x) => x.classList.remove("sel"));
        grp.classList.add("sel");
        onNode(nd.data);
      };
      if (nd.data.changed) changed.push(id);
      vp.append(grp);
    }
    container.append(root);
    if (graph.truncated) {
      const p = document.createElement("p");
      p.className = "note";
      p.textContent = "(graph truncated: too many nodes)";
      container.prepend(p);
    }
    Object.assign(view, { root, vp, w: width, h: height });
    found.text = "";
    attachControls(root);
    fit();
    return changed;
  }

  const found = { text: "", ids: [], at: -1 };
  function find(text) {
    // mark the nodes whose label, dtype or arg contain `text`; each call with the same text moves to the next one
    if (!view.root) return 0;
    const q = text.trim().toLowerCase();
    if (q !== found.text) {
      found.text = q;
      found.at = -1;
      found.ids = [];
      view.root.querySelectorAll("g.node").forEach((g) => {
        const hit = q !== "" && g.textContent.toLowerCase().includes(q);
        g.classList.toggle("found", hit);
        if (hit) found.ids.push(g.dataset.id);
      });
    }
    if (!found.ids.length) return 0;
    found.at = (found.at + 1) % found.ids.length;
    focus([found.ids[found.at]]);
    return found.ids.length;
  }

  return { draw, simplify, fit, zoomBy, focus, find, view, LAYOUT_LIMIT, resetFind: () => { found.text = ""; } };
})();
