// orch's interactive report: SVG charts and a sortable table from the JSON in #data. No library, no network.
"use strict";
const data = JSON.parse(document.getElementById("data").textContent);
const NS = "http://www.w3.org/2000/svg";
const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                "#bcbd22", "#17becf"];

function el(name, attrs, parent, text) {
  const node = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}

function ticks(lo, hi, n, whole) {
  if (hi === lo) { hi = lo + 1; }
  const step = Math.max(whole ? 1 : 0, Math.pow(10, Math.floor(Math.log10((hi - lo) / n))));
  const best = [1, 2, 5, 10].map(m => m * step).find(s => (hi - lo) / s <= n) || step * 10;
  const out = [];
  for (let v = Math.ceil(lo / best) * best; v <= hi + best * 1e-9; v += best) out.push(+v.toFixed(10));
  return out;
}

// series: [{name, points: [[x, y], ...], dash}]
function lineChart(parent, title, xlabel, ylabel, series) {
  series = series.filter(s => s.points.length);
  if (!series.length) return null;
  const fig = document.createElement("figure");
  const cap = document.createElement("figcaption");
  cap.textContent = title;
  fig.appendChild(cap);
  const W = 460, H = 280, L = 56, R = 12, T = 10, B = 40 + 16 * Math.ceil(series.length / 2);
  const svg = el("svg", {width: W, height: H + B - 40, viewBox: `0 0 ${W} ${H + B - 40}`, "data-chart": title}, fig);
  const xs = series.flatMap(s => s.points.map(p => p[0])), ys = series.flatMap(s => s.points.map(p => p[1]));
  const lo = a => a.reduce((m, v) => v < m ? v : m, Infinity), hi = a => a.reduce((m, v) => v > m ? v : m, -Infinity);
  let x0 = lo(xs), x1 = hi(xs), y0 = Math.min(0, lo(ys)), y1 = hi(ys);
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) y1 = y0 + 1;
  const px = x => L + (x - x0) / (x1 - x0) * (W - L - R), py = y => T + (1 - (y - y0) / (y1 - y0)) * (H - T - 40);
  for (const t of ticks(y0, y1, 5)) {
    el("line", {x1: L, x2: W - R, y1: py(t), y2: py(t), stroke: "#eee"}, svg);
    el("text", {x: L - 4, y: py(t) + 4, "text-anchor": "end"}, svg, String(t));
  }
  for (const t of ticks(x0, x1, 6, xs.every(Number.isInteger))) el("text", {x: px(t), y: H - 40 + 14, "text-anchor": "middle"}, svg, String(t));
  el("line", {x1: L, x2: W - R, y1: py(y0), y2: py(y0), stroke: "#999"}, svg);
  el("line", {x1: L, x2: L, y1: T, y2: H - 40, stroke: "#999"}, svg);
  el("text", {x: (L + W - R) / 2, y: H - 40 + 30, "text-anchor": "middle"}, svg, xlabel);
  el("text", {x: 12, y: (T + H - 40) / 2, "text-anchor": "middle", transform: `rotate(-90 12 ${(T + H - 40) / 2})`},
     svg, ylabel);
  series.forEach((s, i) => {
    const color = s.color || COLORS[i % COLORS.length];
    const d = s.points.map((p, j) => `${j ? "L" : "M"}${px(p[0]).toFixed(1)},${py(p[1]).toFixed(1)}`).join("");
    const path = el("path", {d, fill: "none", stroke: color, "stroke-width": 2, "data-series": s.name}, svg);
    if (s.dash) path.setAttribute("stroke-dasharray", "5,4");
    if (s.points.length < 30) for (const p of s.points) el("circle", {cx: px(p[0]), cy: py(p[1]), r: 2.5, fill: color}, svg);
    const lx = L + (i % 2) * (W - L) / 2, ly = H - 40 + 46 + 16 * Math.floor(i / 2);
    el("line", {x1: lx, x2: lx + 18, y1: ly - 4, y2: ly - 4, stroke: color, "stroke-width": 2,
                "stroke-dasharray": s.dash ? "5,4" : ""}, svg);
    el("text", {x: lx + 22, y: ly}, svg, s.name.length > 34 ? s.name.slice(0, 33) + "…" : s.name);
  });
  parent.appendChild(fig);
  return fig;
}

function section(title) {
  const h = document.createElement("h2");
  h.textContent = title;
  const div = document.createElement("div");
  div.className = "charts";
  const root = document.getElementById("charts");
  root.appendChild(h);
  root.appendChild(div);
  return div;
}

function fmt(v) {
  if (v === null || v === undefined) return "–";
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : v.toFixed(Math.abs(v) >= 100 ? 1 : 4);
  return String(v);
}

function table() {
  const t = document.getElementById("table");
  const cols = data.columns;
  let rows = data.runs.slice(), key = null, dir = 1;
  function draw() {
    t.textContent = "";
    const head = t.insertRow();
    for (const [k, label] of cols) {
      const th = document.createElement("th");
      th.textContent = label + (k === key ? (dir > 0 ? " ▲" : " ▼") : "");
      th.dataset.key = k;
      th.onclick = () => { dir = key === k ? -dir : 1; key = k; sort(); draw(); };
      head.appendChild(th);
    }
    for (const r of rows) {
      const tr = t.insertRow();
      for (const [k] of cols) tr.insertCell().textContent = fmt(r[k]);
    }
  }
  function sort() {
    rows.sort((a, b) => {
      const x = a[key], y = b[key];
      if (x === y) return 0;
      if (x === null || x === undefined) return 1;
      if (y === null || y === undefined) return -1;
      return (x < y ? -1 : 1) * dir;
    });
  }
  draw();
}

function main() {
  document.getElementById("title").textContent = data.title;
  document.getElementById("note").textContent = data.note || "";
  table();
  const runs = data.runs;
  const curves = section("Training curves, per epoch");
  for (const [name, label] of [["loss", "training loss"], ["accuracy", "training accuracy"],
                               ["val_accuracy", "validation accuracy"]]) {
    lineChart(curves, label, "epoch", label,
              runs.map(r => ({name: r.run, points: (r.curves[name] || [])})));
  }
  const scaled = runs.filter(r => r.train_seconds !== null && r.train_seconds !== undefined);
  const axis = data.axis;  // what N counts; null: setups against a named one, no chart against N
  if (axis && new Set(scaled.map(r => r.n)).size > 1) {
    const scale = section(`Against the number of ${axis}`);
    const byN = key => {
      const groups = {};
      for (const r of scaled) if (r[key] !== null && r[key] !== undefined) (groups[r.n] = groups[r.n] || []).push(r[key]);
      return Object.keys(groups).map(Number).sort((a, b) => a - b).map(n => {
        const v = groups[n].slice().sort((a, b) => a - b);
        return [n, v[Math.floor((v.length - 1) / 2)]];
      });
    };
    const bound = byN("bound");
    const kinds = new Set(scaled.map(r => r.bound_kind).filter(k => k));
    const boundName = kinds.has("floor") ? (kinds.has("cpu") ? "this host's bound (floor, or CPU)" : "T(1)/floor of this host")
      : `CPU bound of this host (${data.cores} cores)`;
    lineChart(scale, "train time (median)", `${axis} N`, "seconds", [{name: "train s", points: byN("train_seconds")}]);
    // The ideal this host can give, not N×: N workers on fewer cores than N share them, so no speedup passes the
    // cores; the floor measured beside a run (the bound below) is tighter still.
    // The limit's points come with the data (html.core_limit): min(N, the host's cores) at each N.
    const cores = data.cores || 1, limits = data.core_limit || [];
    const limitName = `core limit: ${cores} cores (N× would need N)`;
    lineChart(scale, "speedup T(1)/T(N)", `${axis} N`, "speedup", [
      {name: "measured", points: byN("speedup")},
      {name: limitName, points: limits, dash: true, color: "#999"},
      {name: boundName, points: bound, dash: true, color: "#d62728"}]);
    lineChart(scale, "efficiency speedup/N", `${axis} N`, "efficiency", [
      {name: "measured", points: byN("efficiency")},
      {name: limitName + " / N", points: limits.map(([n, l]) => [n, l / n]), dash: true, color: "#999"},
      {name: boundName + " / N", points: bound.map(([n, b]) => [n, b / n]), dash: true, color: "#d62728"}]);
  }
  const sys = section("Per container, over time");
  for (const r of runs.slice(0, 12)) {
    const cpu = r.system.cpu_percent || {}, rx = r.system.net_rx_mib || {}, tx = r.system.net_tx_mib || {};
    lineChart(sys, `${r.run}: CPU`, "seconds", "% of one core",
              Object.keys(cpu).sort().map(who => ({name: who, points: cpu[who]})));
    lineChart(sys, `${r.run}: network received + sent`, "seconds", "MiB",
              Object.keys(rx).sort().map(who => ({name: who, points: rx[who].map(([t, v], i) => [t, v + ((tx[who] || [])[i] || [t, 0])[1]])})));
  }
  document.body.dataset.rendered = "yes";
}

window.addEventListener("error", e => { document.body.dataset.errors = (document.body.dataset.errors || "") + e.message + "\n"; });
main();
