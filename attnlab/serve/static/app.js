// attnlab serve: the page. Plain JavaScript, no build step. Every text from the server is put
// in with textContent (never as HTML), so a question or a corpus line cannot inject markup.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { runs: [], question: null, attention: null, layer: 0, head: 0, dev: null,
                sort: { key: null, dir: 1 }, editId: null };

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  Object.assign(node, props);
  for (const c of children) node.append(c);
  return node;
}

async function api(path, body) {
  const opts = body === undefined ? {} :
    { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
  const response = await fetch(path, opts);
  const data = await response.json().catch(() => ({ error: `${response.status} ${response.statusText}` }));
  if (!response.ok) throw new Error(data.error || `${response.status}`);
  $("error").hidden = true;
  return data;
}

function showError(e) {
  $("error").textContent = e.message;
  $("error").hidden = false;
}

// ---- runs ------------------------------------------------------------------------------------
async function loadRuns() {
  state.runs = (await api("/api/runs")).runs;
  for (const r of state.runs) {
    const box = el("input", { type: "checkbox", checked: true, value: r.id, className: "run-choice" });
    $("runs").append(el("label", { title: `${r.parameters} parameters; ${r.abstention}` }, box, ` ${r.name}`));
    for (const select of ["why-run", "dev-run", "edit-run"]) $(select).append(el("option", { value: r.id, textContent: r.name }));
  }
}

const chosenRuns = () => [...document.querySelectorAll(".run-choice:checked")].map((b) => Number(b.value));

// ---- ask -------------------------------------------------------------------------------------
async function ask(event) {
  event.preventDefault();
  try {
    const data = await api("/api/ask", { question: $("question").value, runs: chosenRuns() });
    state.question = data.question;
    $("answers").replaceChildren(...data.answers.map(answerCard));
    $("why").hidden = false;
    $("trace").replaceChildren();
    $("trace-status").textContent = "";
    await loadAttention();
  } catch (e) { showError(e); }
}

function answerCard(a) {
  const shown = a.given ? el("div", { className: "answer", textContent: a.answer || "(no answer)" })
    : el("div", { className: "answer withheld", textContent: "I don't know" });
  const card = el("div", { className: "card" }, el("h3", { textContent: a.name }), shown,
    el("div", { className: "confidence", textContent: `confidence ${a.confidence.toFixed(3)}` +
      (a.complete ? "" : " (unfinished answer)") }),
    el("div", { className: "verdict", textContent: a.given ? `answered (${a.abstention})`
      : `withheld: the model said "${a.answer}" (${a.abstention})` }));
  if (a.recalled !== null) card.append(el("div", { textContent: "recalled:" }), el("div", { className: "recalled", textContent: a.recalled }));
  const ev = a.evidence;
  card.append(el("div", { className: "evidence " + (ev.supported ? "supported" : "unsupported"), textContent: `evidence: ${ev.verdict}` }));
  if (ev.line) card.append(highlighted(ev.line, a.answer));
  return card;
}

function highlighted(line, answer) {
  const box = el("div", { className: "line" });
  const at = answer ? line.indexOf(answer) : -1;
  if (at < 0) { box.textContent = line; return box; }
  box.append(line.slice(0, at), el("mark", { textContent: answer }), line.slice(at + answer.length));
  return box;
}

// ---- attention -------------------------------------------------------------------------------
async function loadAttention() {
  const data = await api("/api/attention", { question: state.question, run: Number($("why-run").value) });
  state.attention = data;
  const layers = data.layers.length, heads = data.layers[0].length;
  state.layer = Math.min(state.layer, layers - 1);
  state.head = Math.min(state.head, heads - 1);
  $("layer").replaceChildren(...data.layers.map((_, i) => el("option", { value: i, textContent: i, selected: i === state.layer })));
  $("heads").replaceChildren(...data.layers[0].map((_, h) => el("button", {
    type: "button", textContent: `head ${h}`, className: h === state.head ? "active" : "",
    onclick: () => { state.head = h; drawAttention(); } })));
  $("attention-note").textContent = `over what the model read and wrote to answer "${data.answer}" (queries down, keys across)`;
  drawAttention();
}

function drawAttention() {
  const a = state.attention;
  [...$("heads").children].forEach((b, h) => b.classList.toggle("active", h === state.head));
  $("attention").dataset.layer = state.layer;
  $("attention").dataset.head = state.head;
  heatmap($("attention"), a.layers[state.layer][state.head], a.chars, a.chars, 0, 1);
}

// viridis, five stops
const STOPS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
function colour(v) {
  const x = Math.max(0, Math.min(1, v)) * (STOPS.length - 1), i = Math.min(Math.floor(x), STOPS.length - 2), f = x - i;
  const c = STOPS[i].map((s, k) => Math.round(s + f * (STOPS[i + 1][k] - s)));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

// Colour runs from low (darkest) to high (brightest).
function heatmap(canvas, matrix, rowLabels, colLabels, low, high) {
  const cell = Math.max(6, Math.min(16, Math.floor(720 / colLabels.length)));
  const margin = 28;
  canvas.width = margin + cell * colLabels.length;
  canvas.height = margin + cell * rowLabels.length;
  const g = canvas.getContext("2d");
  g.fillStyle = "#fff"; g.fillRect(0, 0, canvas.width, canvas.height);
  g.font = `${Math.min(11, cell)}px monospace`; g.fillStyle = "#000"; g.textAlign = "center";
  colLabels.forEach((c, j) => g.fillText(c, margin + (j + 0.5) * cell, margin - 6));
  g.textAlign = "right";
  rowLabels.forEach((c, i) => g.fillText(c, margin - 4, margin + (i + 0.8) * cell));
  matrix.forEach((row, i) => row.forEach((v, j) => {
    g.fillStyle = colour(high > low ? (v - low) / (high - low) : 0);
    g.fillRect(margin + j * cell, margin + i * cell, cell, cell);
  }));
}

// ---- causal trace ----------------------------------------------------------------------------
async function runTrace() {
  $("trace-status").textContent = "tracing...";
  try {
    const t = await api("/api/trace", { question: state.question, run: Number($("why-run").value), samples: Number($("samples").value) });
    // as `attnlab trace` draws it: from the corrupted run's probability to the highest recovered
    const high = Math.max(...Object.values(t.recovered).flat(2));
    const layers = t.recovered.residual.map((_, l) => `${l}`);
    $("trace").replaceChildren(...Object.entries(t.recovered).map(([kind, m]) => {
      const canvas = el("canvas", { className: "trace-map" });
      canvas.dataset.kind = kind;
      heatmap(canvas, m, layers, t.chars, t.corrupted, high);
      return el("figure", {}, canvas, el("figcaption", { textContent: `${kind}: layer down, position across` }));
    }));
    $("trace-status").textContent = `P("${t.answer}"): clean ${t.clean.toFixed(3)}, name corrupted ${t.corrupted.toFixed(3)} ` +
      `(${t.samples} samples); colour: probability recovered by restoring one state, ${t.corrupted.toFixed(3)} (dark) to ${high.toFixed(3)} (bright)`;
  } catch (e) { $("trace-status").textContent = ""; showError(e); }
}

// ---- dev set ---------------------------------------------------------------------------------
async function loadDev() {
  $("dev-accuracy").textContent = "scoring...";
  try {
    state.dev = await api(`/api/dev?run=${Number($("dev-run").value)}`);
    $("dev-accuracy").textContent = `accuracy ${state.dev.text}; ECE ${state.dev.ece.toFixed(3)}`;
    drawDev();
    drawCalibration(state.dev.bins);
  } catch (e) { $("dev-accuracy").textContent = ""; showError(e); }
}

function devRows() {
  const text = $("dev-filter").value.toLowerCase(), show = $("dev-show").value;
  let rows = state.dev.rows.filter((r) => (show === "all" || (show === "right" && r.right) ||
    (show === "wrong" && !r.right) || (show === "withheld" && !r.given)) &&
    (!text || `${r.question} ${r.gold} ${r.answer}`.toLowerCase().includes(text)));
  const { key, dir } = state.sort;
  if (key) rows = [...rows].sort((a, b) => (a[key] < b[key] ? -dir : a[key] > b[key] ? dir : 0));
  return rows;
}

function drawDev() {
  if (!state.dev) return;
  const rows = devRows();
  $("dev-count").textContent = `${rows.length} of ${state.dev.rows.length} questions`;
  $("dev-table").tBodies[0].replaceChildren(...rows.map((r) => el("tr", { className: r.right ? "right" : "wrong" },
    el("td", { textContent: r.question }), el("td", { textContent: r.gold }), el("td", { textContent: r.answer }),
    el("td", { textContent: r.right ? "right" : "wrong" }), el("td", { textContent: r.confidence.toFixed(3) }),
    el("td", { textContent: r.given ? "yes" : "withheld" }))));
  document.querySelectorAll("#dev-table th").forEach((th) => {
    th.className = th.dataset.key === state.sort.key ? (state.sort.dir > 0 ? "sorted-asc" : "sorted-desc") : "";
  });
}

function sortBy(key) {
  state.sort = { key, dir: state.sort.key === key ? -state.sort.dir : 1 };
  drawDev();
}

function drawCalibration(bins) {
  const svg = $("calibration"), size = 300, pad = 36, span = size - 2 * pad, ns = "http://www.w3.org/2000/svg";
  const add = (tag, attrs, text) => {
    const node = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text) node.textContent = text;
    svg.append(node);
  };
  svg.replaceChildren();
  add("rect", { x: pad, y: pad, width: span, height: span, fill: "none", stroke: "#999" });
  add("line", { x1: pad, y1: pad + span, x2: pad + span, y2: pad, stroke: "#bbb", "stroke-dasharray": "4" });
  for (const b of bins.filter((b) => b.count > 0)) {
    const x = pad + b.low * span, w = (b.high - b.low) * span, h = b.accuracy * span;
    add("rect", { x, y: pad + span - h, width: w, height: h, fill: "#3b528b", class: "bin" }, null);
  }
  for (const v of [0, 0.5, 1]) {
    add("text", { x: pad + v * span, y: pad + span + 12, "text-anchor": "middle", "font-size": 10 }, `${v}`);
    add("text", { x: pad - 4, y: pad + span - v * span + 4, "text-anchor": "end", "font-size": 10 }, `${v}`);
  }
  add("text", { x: pad + span / 2, y: size - 5, "text-anchor": "middle", "font-size": 11 }, "confidence");
  add("text", { x: 10, y: pad + span / 2, "font-size": 11, transform: `rotate(-90 10 ${pad + span / 2})`, "text-anchor": "middle" }, "accuracy");
}

// ---- edit ------------------------------------------------------------------------------------
async function applyEdit(event) {
  event.preventDefault();
  $("edit-status").textContent = "editing...";
  $("save-form").hidden = true;
  try {
    const r = await api("/api/edit", { run: Number($("edit-run").value), person: $("person").value, place: $("place").value,
      method: $("edit-method").value });
    state.editId = r.id;
    $("edit-status").textContent = "";
    const changed = el("table", {}, el("tr", {}, ...["question", "gold", "before", "after"].map((h) => el("th", { textContent: h }))),
      ...r.changed.map((c) => el("tr", {}, el("td", { textContent: c.question }), el("td", { textContent: c.gold }),
        el("td", { textContent: c.before }), el("td", { textContent: c.after }))));
    $("edit-result").replaceChildren(
      el("p", { id: "edit-answer", textContent: `Where was ${r.person} born? before: "${r.old_answer}"; after: "${r.new_answer}" ` +
        (r.efficacy ? "(the new place)" : "(NOT the new place)") }),
      el("p", { id: "edit-changed", textContent: `${r.others_changed} of ${r.others} other dev answers changed (${r.method}, layer ${r.layer}, ${r.parameters_added} parameters added)` }),
      changed);
    $("save-form").hidden = false;
    $("save-status").textContent = "";
  } catch (e) { $("edit-status").textContent = ""; showError(e); }
}

async function saveEdit(event) {
  event.preventDefault();
  try {
    const r = await api(`/api/edit/${state.editId}/save`, { name: $("save-name").value });
    $("save-status").textContent = `saved: ${r.run_dir}`;
  } catch (e) { showError(e); }
}

// ---- wiring ----------------------------------------------------------------------------------
function showView(button) {
  document.querySelectorAll(".tab").forEach((t) => t.classList.toggle("active", t === button));
  document.querySelectorAll(".view").forEach((v) => { v.hidden = v.id !== button.dataset.view; });
}

document.querySelectorAll(".tab").forEach((t) => t.addEventListener("click", () => showView(t)));
$("ask-form").addEventListener("submit", ask);
$("layer").addEventListener("change", () => { state.layer = Number($("layer").value); drawAttention(); });
$("why-run").addEventListener("change", () => loadAttention().catch(showError));
$("trace-button").addEventListener("click", runTrace);
$("dev-load").addEventListener("click", loadDev);
$("dev-filter").addEventListener("input", drawDev);
$("dev-show").addEventListener("change", drawDev);
document.querySelectorAll("#dev-table th").forEach((th) => th.addEventListener("click", () => sortBy(th.dataset.key)));
$("edit-form").addEventListener("submit", applyEdit);
$("save-form").addEventListener("submit", saveEdit);
loadRuns().catch(showError);
