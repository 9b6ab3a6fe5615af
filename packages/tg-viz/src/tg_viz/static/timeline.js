// tg VIZ timeline: the PROFILE events (Chrome trace format, from /api/profile) drawn in the page, offline.
// One track per device and host thread (events that overlap go on lanes below each other), kernels with
// GFLOPS and GB/s, compiles and codegen, and memory in use over time. Wheel: zoom; drag: pan.
"use strict";

const TGTimeline = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const LANE = 18, LABEL = 130, MEM_H = 44, AXIS = 22;
  const st = { tracks: [], mem: [], t0: 0, t1: 1, lo: 0, hi: 1, el: null, detail: null, drag: null };

  function svg(tag, attrs = {}) {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    return e;
  }

  function fmtUs(us) {
    if (us >= 1e6) return `${(us / 1e6).toFixed(2)} s`;
    if (us >= 1e3) return `${(us / 1e3).toFixed(2)} ms`;
    if (us >= 1) return `${us.toFixed(1)} us`;
    return `${(us * 1e3).toFixed(0)} ns`;
  }

  function fmtBytes(b) {
    const u = ["B", "KB", "MB", "GB"];
    let i = 0;
    while (b >= 1000 && i < u.length - 1) { b /= 1000; i++; }
    return `${b.toFixed(i ? 1 : 0)} ${u[i]}`;
  }

  function load(trace) {
    const names = new Map();
    const threads = new Map();
    const byTrack = new Map();
    const mem = new Map();
    for (const e of trace.traceEvents || []) {
      if (e.ph === "M" && e.name === "process_name") names.set(e.pid, e.args.name);
      else if (e.ph === "M" && e.name === "thread_name") threads.set(`${e.pid}:${e.tid}`, e.args.name);
      else if (e.ph === "X") {
        const key = `${e.pid}:${e.tid || 0}`;
        if (!byTrack.has(key)) byTrack.set(key, { pid: e.pid, tid: e.tid || 0, events: [] });
        byTrack.get(key).events.push(e);
      } else if (e.ph === "C") {
        if (!mem.has(e.pid)) mem.set(e.pid, []);
        mem.get(e.pid).push([e.ts, Object.values(e.args)[0] || 0]);
      }
    }
    st.tracks = [...byTrack.values()].sort((a, b) => a.pid - b.pid || a.tid - b.tid).map((t) => {
      const name = threads.get(`${t.pid}:${t.tid}`) || (names.get(t.pid) || `process ${t.pid}`) + (t.tid ? ` thread ${t.tid}` : "");
      t.events.sort((a, b) => a.ts - b.ts);
      const ends = [];
      for (const e of t.events) { // greedy lanes: the first whose last event ended before this one starts
        let lane = ends.findIndex((end) => end <= e.ts);
        if (lane < 0) { lane = ends.length; ends.push(0); }
        ends[lane] = e.ts + e.dur;
        e.lane = lane;
      }
      return { name, events: t.events, lanes: Math.max(1, ends.length) };
    });
    st.mem = [...mem.entries()].map(([pid, pts]) => ({ name: `${names.get(pid) || pid} memory`, pts: pts.sort((a, b) => a[0] - b[0]) }));
    const all = st.tracks.flatMap((t) => t.events);
    st.t0 = all.length ? Math.min(...all.map((e) => e.ts)) : 0;
    st.t1 = all.length ? Math.max(...all.map((e) => e.ts + e.dur)) : 1;
    for (const m of st.mem) if (m.pts.length) st.t1 = Math.max(st.t1, m.pts[m.pts.length - 1][0]);
    if (st.t1 <= st.t0) st.t1 = st.t0 + 1;
    st.lo = st.t0; st.hi = st.t1;
    const kernels = all.filter((e) => e.cat === "kernel").length;
    return `${all.length} events, ${kernels} kernel launches, ${st.tracks.length} tracks, ${fmtUs(st.t1 - st.t0)}`;
  }

  function details(e) {
    const a = e.args || {};
    const s = e.dur * 1e-6;
    const out = [`${e.name}  (${e.cat})`, `start ${fmtUs(e.ts - st.t0)}, took ${fmtUs(e.dur)}`];
    if (a.ops !== undefined && s > 0) out.push(`${(a.ops / s / 1e9).toFixed(2)} GFLOPS, ${(a.mem / s / 1e9).toFixed(2)} GB/s`);
    if (a.global_size && a.global_size.length) out.push(`global ${a.global_size.join("x")}  local ${(a.local_size || []).join("x")}`);
    if (a.replay) out.push("replayed by TinyJit");
    if (a.tensor_ops && a.tensor_ops.length) out.push(`tensor ops: ${a.tensor_ops.join(", ")}`);
    if (a.computes && a.computes.length) out.push(`computes: ${a.computes.join(" ")}`);
    if (a.lines && a.lines.length) out.push(`from: ${a.lines.join("\n      ")}`);
    for (const [k, v] of Object.entries(a)) {
      if (!["ops", "mem", "global_size", "local_size", "replay", "lines", "tensor_ops", "computes"].includes(k)) out.push(`${k}: ${JSON.stringify(v)}`);
    }
    return out.join("\n");
  }

  function render() {
    const el = st.el;
    if (!el) return;
    const W = Math.max(300, el.clientWidth - 4);
    const span = st.hi - st.lo;
    const x = (t) => LABEL + ((t - st.lo) / span) * (W - LABEL - 8);
    let y = AXIS;
    const root = svg("svg", { class: "timeline", width: W });
    // time axis: about 8 ticks at round values
    const step = Math.pow(10, Math.floor(Math.log10(span / 8)));
    const tick = [1, 2, 5, 10].map((m) => m * step).find((s) => span / s <= 10) || step * 10;
    for (let t = Math.ceil(st.lo / tick) * tick; t <= st.hi; t += tick) {
      root.append(svg("line", { class: "tick", x1: x(t), x2: x(t), y1: AXIS - 6, y2: 100000 }));
      const lbl = svg("text", { class: "axis", x: x(t) + 2, y: 12 });
      lbl.textContent = fmtUs(t - st.t0);
      root.append(lbl);
    }
    for (const tr of st.tracks) {
      const h = tr.lanes * LANE + 6;
      root.append(svg("rect", { class: "track", x: 0, y, width: W, height: h }));
      const name = svg("text", { class: "track-name", x: 4, y: y + 13 });
      name.textContent = tr.name;
      root.append(name);
      for (const e of tr.events) {
        if (e.ts + e.dur < st.lo || e.ts > st.hi) continue;
        const x0 = Math.max(LABEL, x(e.ts)), x1 = Math.min(W, x(e.ts + e.dur));
        const w = Math.max(1, x1 - x0);
        const g = svg("g", { class: `bar ${e.cat}`, "data-name": e.name });
        g.append(svg("rect", { x: x0, y: y + 3 + e.lane * LANE, width: w, height: LANE - 3 }));
        if (w > 36) {
          const t = svg("text", { x: x0 + 3, y: y + 15 + e.lane * LANE });
          t.textContent = e.name.slice(0, Math.floor(w / 6.5));
          g.append(t);
        }
        const title = svg("title");
        title.textContent = details(e);
        g.append(title);
        g.onclick = () => { st.detail.textContent = details(e); };
        root.append(g);
      }
      y += h;
    }
    for (const m of st.mem) {
      root.append(svg("rect", { class: "track", x: 0, y, width: W, height: MEM_H }));
      const peak = Math.max(1, ...m.pts.map((p) => p[1]));
      const name = svg("text", { class: "track-name", x: 4, y: y + 13 });
      name.textContent = m.name;
      const pk = svg("text", { class: "track-name", x: 4, y: y + 27 });
      pk.textContent = `peak ${fmtBytes(peak)}`;
      root.append(name, pk);
      let d = "", prev = null;
      for (const [t, v] of m.pts) {
        const px = Math.min(W, Math.max(LABEL, x(t))), py = y + MEM_H - 4 - (v / peak) * (MEM_H - 10);
        d += prev === null ? `M${px},${py}` : `H${px}V${py}`;
        prev = py;
      }
      if (d) root.append(svg("path", { class: "mem", d: d + `H${W}` }));
      y += MEM_H;
    }
    root.setAttribute("height", y + 4);
    el.replaceChildren(root);
  }

  function fit() { st.lo = st.t0; st.hi = st.t1; render(); }

  function attach(el, detail) {
    st.el = el; st.detail = detail;
    el.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      const r = el.getBoundingClientRect();
      const W = Math.max(300, el.clientWidth - 4);
      const at = st.lo + ((ev.clientX - r.left - LABEL) / (W - LABEL - 8)) * (st.hi - st.lo);
      const f = Math.exp(ev.deltaY * 0.0015);
      st.lo = at - (at - st.lo) * f; st.hi = at + (st.hi - at) * f;
      render();
    }, { passive: false });
    el.addEventListener("mousedown", (ev) => { st.drag = { x: ev.clientX, lo: st.lo, hi: st.hi }; });
    window.addEventListener("mousemove", (ev) => {
      if (!st.drag) return;
      const W = Math.max(300, el.clientWidth - 4);
      const dt = ((ev.clientX - st.drag.x) / (W - LABEL - 8)) * (st.drag.hi - st.drag.lo);
      st.lo = st.drag.lo - dt; st.hi = st.drag.hi - dt;
      render();
    });
    window.addEventListener("mouseup", () => { st.drag = null; });
  }

  return { load, render, fit, attach, fmtUs, st };
})();
