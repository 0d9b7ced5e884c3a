// orch's interactive report: a sortable table and the Plotly charts of the JSON in #data, drawn by the plotly.js
// inlined in the page (no network). The figures come whole from the data (orchestrator/analysis/charts.py): this
// script only places them, and sets every text of its own through textContent.
"use strict";
const data = JSON.parse(document.getElementById("data").textContent);
const CONFIG = {displaylogo: false, responsive: false, modeBarButtonsToRemove: ["select2d", "lasso2d"]};

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

function chart(parent, figure) {
  const div = document.createElement("div");
  div.className = "chart";
  parent.appendChild(div);
  Plotly.newPlot(div, figure.data, figure.layout, CONFIG);
  return div;
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
      for (const [k] of cols) tr.insertCell().textContent = (r.text || {})[k] ?? "–";
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

// Every run's per-container charts, one run at a time: a chooser names each run.
function containers() {
  const runs = data.containers.filter(c => c.figures.length);
  if (!runs.length) return;
  const parent = section("Per container, over time");
  const label = document.createElement("label");
  label.textContent = `Run (${runs.length}):`;
  const chooser = document.createElement("select");
  chooser.id = "run-chooser";
  runs.forEach((c, i) => {
    const option = document.createElement("option");
    option.value = String(i);
    option.textContent = c.run;
    chooser.appendChild(option);
  });
  label.appendChild(chooser);
  parent.parentNode.insertBefore(label, parent);
  const show = () => {
    for (const old of parent.querySelectorAll(".chart")) Plotly.purge(old);
    parent.textContent = "";
    for (const figure of runs[Number(chooser.value)].figures) chart(parent, figure);
  };
  chooser.onchange = show;
  show();
}

function main() {
  document.getElementById("title").textContent = data.title;
  document.getElementById("note").textContent = data.note || "";
  table();
  for (const s of data.sections) {
    const parent = section(s.title);
    for (const figure of s.figures) chart(parent, figure);
  }
  containers();
  document.body.dataset.rendered = "yes";
}

window.addEventListener("error", e => { document.body.dataset.errors = (document.body.dataset.errors || "") + e.message + "\n"; });
main();
