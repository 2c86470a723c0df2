// attnlab serve: the page. Plain JavaScript, no build step. Every text from the server is put
// in with textContent (never as HTML), so a question or a corpus line cannot inject markup.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { runs: [], question: null, attention: null, layer: 0, head: 0, dev: null,
                sort: { key: null, dir: 1 }, editId: null, jobs: null, seenDone: new Set(), polling: null };

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
  return data;
}

// An error is shown next to the form that caused it (errorId), never above an old answer.
function showError(e, errorId = "error") {
  $(errorId).textContent = e.message;
  $(errorId).hidden = false;
}
function clearError(errorId) { $(errorId).hidden = true; $(errorId).textContent = ""; }

// ---- runs ------------------------------------------------------------------------------------
async function loadRuns() {
  const ticked = new Set(chosenRuns());
  const known = state.runs.length;
  state.runs = (await api("/api/runs")).runs;
  $("runs").replaceChildren(...state.runs.map((r) => {
    const box = el("input", { type: "checkbox", checked: known === 0 || ticked.has(r.id) || r.id >= known,
                              value: r.id, className: "run-choice" });
    return el("label", { title: `${r.parameters} parameters; relations: ${r.relations.join(", ")}; ${r.abstention}` },
              box, ` ${r.name}`);
  }));
  for (const select of ["why-run", "dev-run", "edit-run"]) {
    const kept = $(select).value;
    $(select).replaceChildren(...state.runs.map((r) => el("option", { value: r.id, textContent: r.name })));
    if (kept) $(select).value = kept;
  }
  editRelations();
}

const chosenRuns = () => [...document.querySelectorAll(".run-choice:checked")].map((b) => Number(b.value));

// ---- ask -------------------------------------------------------------------------------------
async function ask(event) {
  event.preventDefault();
  clearError("ask-error");
  $("answers").replaceChildren(el("p", { className: "note", textContent: "asking..." }));
  $("why").hidden = true;
  try {
    const data = await api("/api/ask", { question: $("question").value, runs: chosenRuns() });
    state.question = data.question;
    $("answers").replaceChildren(...data.answers.map(answerCard));
    $("why-run").value = String(data.answers.find((a) => !a.problem).run);
    $("why").hidden = false;
    $("trace").replaceChildren();
    $("trace-status").textContent = "";
    $("trace-sentence").textContent = "";
    await loadAttention();
  } catch (e) { $("answers").replaceChildren(); showError(e, "ask-error"); }
}

function answerCard(a) {
  if (a.problem) {  // a run of another fact set: this question is not one of its relations
    return el("div", { className: "card" }, el("h3", { textContent: a.name }),
      el("div", { className: "answer withheld", textContent: "not asked" }),
      el("div", { className: "in-words unsure", textContent: a.problem }));
  }
  const shown = a.given ? el("div", { className: "answer", textContent: a.answer || "(no answer)" })
    : el("div", { className: "answer withheld", textContent: "I don't know" });
  const card = el("div", { className: "card" }, el("h3", { textContent: a.name }), shown,
    el("div", { className: "relation", textContent: `relation: ${a.relation || "?"}` }),
    el("div", { className: "in-words " + (a.given ? "sure" : "unsure"), textContent: a.in_words }),
    el("details", { className: "rule" }, el("summary", { textContent: "the full rule" }),
      el("div", { textContent: `confidence ${a.confidence.toFixed(3)}` + (a.complete ? "" : " (unfinished answer)") +
        (a.chance_right === null || a.chance_right === undefined ? "" : `; chance right ${a.chance_right.toFixed(2)} (the run's stored correction)`) +
        (a.given ? "" : `; the model's answer was "${a.answer}"`) }),
      el("div", { textContent: a.abstention })));
  if (a.recalled !== null) {
    card.append(el("div", { className: "label", textContent: "what it recalled (the answer copied from the marked span):" }),
                marked(a.recalled, a.span, "recalled"));
  }
  const ev = a.evidence;
  card.append(el("div", { className: "evidence " + (ev.supported ? "supported" : "unsupported"), textContent: `corpus: ${ev.verdict}` }));
  if (ev.line) { const at = a.answer ? ev.line.indexOf(a.answer) : -1; card.append(marked(ev.line, at < 0 ? null : [at, at + a.answer.length], "line")); }
  return card;
}

function marked(text, span, className) {
  const box = el("div", { className });
  if (!span) { box.textContent = text; return box; }
  box.append(text.slice(0, span[0]), el("mark", { textContent: text.slice(span[0], span[1]) }), text.slice(span[1]));
  return box;
}

// ---- attention -------------------------------------------------------------------------------
async function loadAttention() {
  state.attention = null;
  const canvas = $("attention");
  canvas.width = canvas.height = 10;  // never the previous question's map while this one loads
  $("attention-note").textContent = "loading...";
  const data = await api("/api/attention", { question: state.question, run: Number($("why-run").value) });
  state.attention = data;
  const layers = data.layers.length, heads = data.layers[0].length;
  // first the head that looks most at the copied span: where the copying shows
  if (data.heads.length) { state.layer = data.heads[0].layer; state.head = data.heads[0].head; }
  state.layer = Math.min(state.layer, layers - 1);
  state.head = Math.min(state.head, heads - 1);
  $("layer").replaceChildren(...data.layers.map((_, i) => el("option", { value: i, textContent: i, selected: i === state.layer })));
  $("heads").replaceChildren(...data.layers[0].map((_, h) => el("button", {
    type: "button", textContent: `head ${h}`, className: h === state.head ? "active" : "",
    onclick: () => { state.head = h; drawAttention(); } })));
  const what = data.recalled ? "the text it recalled" : "the question";
  $("attention-note").textContent = `Each row is a character of the answer "${data.answer}" as it is written; ` +
    `each column a character of ${what}; darker = more attention. The copied span is underlined.`;
  $("head-summary").replaceChildren(...data.heads.slice(0, 4).map((h) => el("li", {},
    el("button", { type: "button", className: "link", textContent: `layer ${h.layer} head ${h.head}`,
                   onclick: () => { state.layer = h.layer; state.head = h.head; $("layer").value = h.layer; drawAttention(); } }),
    ` puts ${(100 * h.on_span).toFixed(0)}% of the answer's attention on the copied span`)));
  drawAttention();
}

function drawAttention() {
  const a = state.attention;
  if (!a) return;
  [...$("heads").children].forEach((b, h) => b.classList.toggle("active", h === state.head));
  $("attention").dataset.layer = state.layer;
  $("attention").dataset.head = state.head;
  heatmap($("attention"), a.layers[state.layer][state.head], a.rows, a.read, 0, 1,
          { cell: Number($("zoom").value), span: a.span, light: true });
}

// viridis, five stops (trace); white to dark blue (attention: most cells are near zero)
const STOPS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
const LIGHT = [[255, 255, 255], [107, 174, 214], [8, 48, 107]];
function colour(v, stops = STOPS) {
  const x = Math.max(0, Math.min(1, v)) * (stops.length - 1), i = Math.min(Math.floor(x), stops.length - 2), f = x - i;
  const c = stops[i].map((s, k) => Math.round(s + f * (stops[i + 1][k] - s)));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

// Colour runs from low to high on a fixed scale; labels in a legible monospace font.
function heatmap(canvas, matrix, rowLabels, colLabels, low, high, opts = {}) {
  const cell = opts.cell || Math.max(10, Math.min(18, Math.floor(900 / colLabels.length)));
  const left = 34, top = 24;
  canvas.width = left + cell * colLabels.length + 2;
  canvas.height = top + cell * rowLabels.length + 8;
  const g = canvas.getContext("2d");
  g.fillStyle = "#fff"; g.fillRect(0, 0, canvas.width, canvas.height);
  g.font = `${Math.max(10, Math.min(14, cell))}px monospace`; g.fillStyle = "#000"; g.textAlign = "center";
  colLabels.forEach((c, j) => g.fillText(c === " " ? "\u2423" : c, left + (j + 0.5) * cell, top - 6));
  g.textAlign = "right";
  rowLabels.forEach((c, i) => g.fillText(c === " " ? "\u2423" : c, left - 6, top + (i + 0.75) * cell));
  matrix.forEach((row, i) => row.forEach((v, j) => {
    g.fillStyle = colour(high > low ? (v - low) / (high - low) : 0, opts.light ? LIGHT : STOPS);
    g.fillRect(left + j * cell, top + i * cell, cell, cell);
  }));
  if (opts.span) {
    g.fillStyle = "#d62728";
    g.fillRect(left + opts.span[0] * cell, top + cell * rowLabels.length + 2, (opts.span[1] - opts.span[0]) * cell, 4);
  }
}

// ---- causal trace ----------------------------------------------------------------------------
async function runTrace() {
  $("trace-status").textContent = "tracing (a few seconds per noise sample)...";
  $("trace").replaceChildren();
  $("trace-sentence").textContent = "";
  try {
    const t = await api("/api/trace", { question: state.question, run: Number($("why-run").value), samples: Number($("samples").value) });
    const layers = t.recovered.residual.map((_, l) => `${l}`);
    // an honest scale: 0 to the clean probability, so noise stays pale (as `attnlab trace` warns)
    $("trace").replaceChildren(...Object.entries(t.recovered).map(([kind, m]) => {
      const canvas = el("canvas", { className: "trace-map" });
      canvas.dataset.kind = kind;
      heatmap(canvas, m, layers, t.chars, t.scale[0], t.scale[1], { light: true, span: [t.name_start, t.name_end] });
      const name = kind === "residual" ? "the residual stream" : `the ${kind} output`;
      return el("figure", {}, canvas, el("figcaption", { textContent: `restoring ${name}: layer down, position across (the name underlined)` }));
    }));
    $("trace-sentence").textContent = t.strongest;
    $("trace-status").textContent = `P("${t.answer}"): clean ${t.clean.toFixed(3)}, name corrupted ${t.corrupted.toFixed(3)} ` +
      `(${t.samples} noise samples); colour: probability recovered by restoring one state, 0 (white) to the clean ${t.clean.toFixed(3)} (dark)`;
  } catch (e) { $("trace-status").textContent = ""; showError(e, "ask-error"); }
}

// ---- learn -----------------------------------------------------------------------------------
async function loadJobs() {
  const data = await api("/api/jobs");
  const first = state.jobs === null;
  state.jobs = data;
  if (first) {
    $("learn-facts").replaceChildren(...data.fact_sets.map((f) => el("option", { value: f.id,
      textContent: `${f.name} (${f.relations.join(", ")})`, title: f.description })));
    $("learn-minutes").min = data.budget[0]; $("learn-minutes").max = data.budget[1];
    $("learn-minutes").value = Math.min(Math.max(5, data.budget[0]), data.budget[1]);
  }
  $("learn-off").hidden = data.enabled;
  $("learn-form").hidden = !data.enabled;
  $("jobs").replaceChildren(...data.jobs.map(jobCard));
  for (const j of data.jobs) {
    if (j.state === "done" && !state.seenDone.has(j.id)) {
      state.seenDone.add(j.id);
      if (!first) await loadRuns();  // the new run joins the list
    }
  }
  const active = data.jobs.some((j) => j.state === "running" || j.state === "waiting");
  if (active && !state.polling) state.polling = setInterval(() => loadJobs().catch((e) => showError(e)), 3000);
  if (!active && state.polling) { clearInterval(state.polling); state.polling = null; }
}

async function startJob(event) {
  event.preventDefault();
  clearError("learn-error");
  try {
    await api("/api/jobs", { fact_set: Number($("learn-facts").value), minutes: Number($("learn-minutes").value) });
    await loadJobs();
  } catch (e) { showError(e, "learn-error"); }
}

function jobCard(j) {
  const p = j.progress;
  const card = el("div", { className: `job ${j.state}` });
  card.dataset.id = j.id;
  card.dataset.state = j.state;
  let status = `${j.state}`;
  if (j.state === "running" && p) {
    const left = Math.max(0, j.minutes - (Date.now() / 1000 - p.began) / 60);
    status += ` (${p.stage}); about ${left.toFixed(1)} of ${j.minutes} minutes left`;
  }
  if (j.state === "done") status += `: the run ${j.run_dir} is in the run list`;
  card.append(el("h3", { textContent: `job ${j.id}: ${j.fact_set} in ${j.minutes} minutes` +
                                      (j.resumes ? ` (resumes job ${j.resumes})` : "") }),
              el("div", { className: "job-status", textContent: status }));
  if (j.error) card.append(el("div", { className: "job-error", textContent: j.error }));
  if (j.state === "running" || j.state === "waiting") {
    card.append(el("button", { type: "button", className: "cancel", textContent: "Cancel",
      onclick: () => api(`/api/jobs/${j.id}/cancel`, {}).then(loadJobs).catch((e) => showError(e, "learn-error")) }));
  }
  if ((j.state === "interrupted" || j.state === "cancelled") && j.run_dir && state.jobs.enabled) {
    card.append(el("button", { type: "button", className: "resume", textContent: "Resume",
      onclick: () => api(`/api/jobs/${j.id}/resume`, {}).then(loadJobs).catch((e) => showError(e, "learn-error")) }));
  }
  if (p) card.append(curve(j, p));
  if (p && p.overall) card.append(el("div", { className: "job-result", textContent:
    `dev: ${p.overall.correct} of ${p.overall.total} right (${p.overall.percent}%, 95% CI ${p.overall.ci95[0]}-${p.overall.ci95[1]}); ` +
    `most frequent answer: ${p.overall.baseline.percent}%` }));
  if (p && p.log.length && j.state === "running") card.append(el("pre", { className: "job-log", textContent: p.log.slice(-3).join("\n") }));
  return card;
}

const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"];
function curve(job, p) {
  const ns = "http://www.w3.org/2000/svg", w = 520, h = 220, pad = 36, span = { x: w - 2 * pad - 90, y: h - 2 * pad };
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", w); svg.setAttribute("height", h); svg.classList.add("curve");
  const add = (tag, attrs, text) => {
    const node = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    svg.append(node); return node;
  };
  const maxX = Math.max(job.minutes, ...p.points.map((q) => q.minutes));
  const X = (m) => pad + (m / maxX) * span.x, Y = (v) => pad + span.y - (v / 100) * span.y;
  add("rect", { x: pad, y: pad, width: span.x, height: span.y, fill: "none", stroke: "#999" });
  for (const v of [0, 50, 100]) add("text", { x: pad - 4, y: Y(v) + 4, "text-anchor": "end", "font-size": 10 }, `${v}%`);
  for (const m of [0, maxX / 2, maxX]) add("text", { x: X(m), y: pad + span.y + 14, "text-anchor": "middle", "font-size": 10 }, `${m.toFixed(maxX < 1 ? 2 : 1)}`);
  add("text", { x: pad + span.x / 2, y: h - 4, "text-anchor": "middle", "font-size": 11 }, "minutes");
  const relations = [...new Set([...Object.keys(p.baseline), ...p.points.flatMap((q) => Object.keys(q.relations))])];
  relations.forEach((r, i) => {
    const c = PALETTE[i % PALETTE.length];
    if (r in p.baseline) add("line", { x1: pad, x2: pad + span.x, y1: Y(p.baseline[r]), y2: Y(p.baseline[r]), stroke: c, "stroke-dasharray": "4 3", class: "baseline" });
    const pts = p.points.filter((q) => r in q.relations);
    if (pts.length > 1) add("polyline", { points: pts.map((q) => `${X(q.minutes)},${Y(q.relations[r])}`).join(" "), fill: "none", stroke: c });
    for (const q of pts) add("circle", { cx: X(q.minutes), cy: Y(q.relations[r]), r: 3.5, fill: c, class: "point" }).append(
      Object.assign(document.createElementNS(ns, "title"), { textContent: `${r}: ${q.relations[r]}% of ${q.questions} dev questions (${q.stage}, ${q.minutes} min)` }));
    add("text", { x: pad + span.x + 8, y: pad + 12 + 14 * i, "font-size": 11, fill: c }, r);
  });
  if (p.loss.length > 1) {  // the training loss, grey, on its own scale (right axis): it moves between checkpoints
    const top = Math.max(...p.loss.map((l) => l[1]));
    const L = (v) => pad + span.y - (v / top) * span.y;
    add("polyline", { points: p.loss.map((l) => `${X(l[0])},${L(l[1])}`).join(" "), fill: "none", stroke: "#aaa", class: "loss" });
    add("text", { x: pad + span.x + 8, y: pad + span.y, "font-size": 10, fill: "#888" }, `loss (0-${top.toFixed(1)})`);
  }
  if (job.state === "running" && p.began) {
    const now = (Date.now() / 1000 - p.began) / 60;
    add("line", { x1: X(Math.min(now, maxX)), x2: X(Math.min(now, maxX)), y1: pad, y2: pad + span.y, stroke: "#bbb" });
  }
  return svg;
}

// ---- compare ---------------------------------------------------------------------------------
async function compareAsk(event) {
  event.preventDefault();
  clearError("compare-error");
  $("compare-answers").replaceChildren();
  try {
    const data = await api("/api/ask", { question: $("compare-question").value, runs: chosenRuns() });
    $("compare-answers").replaceChildren(el("div", { className: "cards" }, ...data.answers.map(answerCard)));
  } catch (e) { showError(e, "compare-error"); }
}

async function compareDev() {
  clearError("compare-error");
  $("compare-status").textContent = "scoring the dev set of each run...";
  $("compare-table").replaceChildren();
  try {
    const data = await api("/api/compare", { runs: chosenRuns() });
    $("compare-status").textContent = "";
    const relations = [...new Set(data.runs.flatMap((r) => Object.keys(r.relations)))];
    const head = el("tr", {}, ...["run", "dev (95% CI)", ...relations, "against the first run"].map((h) => el("th", { textContent: h })));
    const rows = data.runs.map((r) => el("tr", {}, el("td", { textContent: r.name }), el("td", { textContent: r.text }),
      ...relations.map((n) => el("td", { textContent: r.relations[n] ? r.relations[n].text : "-" })),
      el("td", { className: "verdict", textContent: r.paired === null ? "(the reference)" : r.paired.wins === undefined ? r.paired.verdict :
        `${r.paired.verdict} (${r.paired.wins} won, ${r.paired.losses} lost of the questions only one got right; p = ${r.paired.p.toPrecision(2)})` })));
    $("compare-table").replaceChildren(head, ...rows);
  } catch (e) { $("compare-status").textContent = ""; showError(e, "compare-error"); }
}

// ---- dev set ---------------------------------------------------------------------------------
async function loadDev() {
  $("dev-accuracy").textContent = "scoring...";
  try {
    state.dev = await api(`/api/dev?run=${Number($("dev-run").value)}`);
    $("dev-accuracy").textContent = `accuracy ${state.dev.text}; ECE ${state.dev.ece.toFixed(3)}` +
      (state.dev.ece_corrected === null ? "" : `, ${state.dev.ece_corrected.toFixed(3)} after the run's stored correction`) +
      (state.dev.ece_by_chance === null ? "" : ` (a calibrated confidence scores ${state.dev.ece_by_chance[0].toFixed(3)}-` +
        `${state.dev.ece_by_chance[1].toFixed(3)} on these answers by chance alone)`);
    const names = Object.keys(state.dev.relations);
    $("dev-relation").replaceChildren(el("option", { value: "", textContent: "every relation" }),
      ...names.map((n) => el("option", { value: n, textContent: n })));
    $("dev-relations").textContent = names.map((n) => `${n}: ${state.dev.relations[n].text}`).join("; ");
    drawDev();
    drawCalibration(state.dev.bins);
  } catch (e) { $("dev-accuracy").textContent = ""; showError(e); }
}

function devRows() {
  const text = $("dev-filter").value.toLowerCase(), show = $("dev-show").value, relation = $("dev-relation").value;
  let rows = state.dev.rows.filter((r) => (show === "all" || (show === "right" && r.right) ||
    (show === "wrong" && !r.right) || (show === "withheld" && !r.given)) && (!relation || r.relation === relation) &&
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
    el("td", { textContent: r.question }), el("td", { textContent: r.relation || "" }), el("td", { textContent: r.gold }),
    el("td", { textContent: r.answer }), el("td", { textContent: r.right ? "right" : "wrong" }),
    el("td", { textContent: r.confidence.toFixed(3) }), el("td", { textContent: r.given ? "yes" : "withheld" }))));
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
  clearError("edit-error");
  $("edit-status").textContent = "editing...";
  $("save-form").hidden = true;
  $("edit-after").hidden = true;
  $("edit-result").replaceChildren();
  try {
    const r = await api("/api/edit", { run: Number($("edit-run").value), person: $("person").value, place: $("place").value,
      method: $("edit-method").value, relation: $("edit-relation").value || null });
    state.editId = r.id;
    $("edit-status").textContent = "";
    const changed = el("table", {}, el("tr", {}, ...["question", "gold", "before", "after"].map((h) => el("th", { textContent: h }))),
      ...r.changed.map((c) => el("tr", {}, el("td", { textContent: c.question }), el("td", { textContent: c.gold }),
        el("td", { textContent: c.before }), el("td", { textContent: c.after }))));
    $("edit-result").replaceChildren(
      el("p", { id: "edit-answer", textContent: `${r.question} before: "${r.old_answer}"; after: "${r.new_answer}" ` +
        (r.efficacy ? "(the new place)" : "(NOT the new place)") }),
      el("p", { id: "edit-changed", textContent: `${r.others_changed} of ${r.others} other dev answers changed (${r.method}, layer ${r.layer}, ${r.parameters_added} parameters added)` }),
      changed);
    $("save-form").hidden = false;
    $("edit-after").hidden = false;
    $("save-status").textContent = "";
  } catch (e) { $("edit-status").textContent = ""; showError(e, "edit-error"); }
}

function editRelations() {
  const run = state.runs.find((r) => r.id === Number($("edit-run").value));
  $("edit-relation").replaceChildren(...(run ? run.relations : []).map((n) => el("option", { value: n, textContent: n })));
}

async function askEdited() {
  try {
    const r = await api(`/api/edit/${state.editId}/ask`, {});
    await loadRuns();
    document.querySelectorAll(".run-choice").forEach((b) => { b.checked = Number(b.value) === r.run; });
    $("question").value = $("person").value;
    showView($("tab-ask"));
    $("ask-form").requestSubmit();
  } catch (e) { showError(e, "edit-error"); }
}

async function saveEdit(event) {
  event.preventDefault();
  clearError("save-error");
  try {
    const r = await api(`/api/edit/${state.editId}/save`, { name: $("save-name").value });
    $("save-status").textContent = `saved: ${r.run_dir}`;
  } catch (e) { showError(e, "save-error"); }
}

// ---- wiring ----------------------------------------------------------------------------------
function showView(button) {
  document.querySelectorAll(".tab").forEach((t) => t.classList.toggle("active", t === button));
  document.querySelectorAll(".view").forEach((v) => { v.hidden = v.id !== button.dataset.view; });
  if (button.id === "tab-learn") loadJobs().catch((e) => showError(e, "learn-error"));
}

document.querySelectorAll(".tab").forEach((t) => t.addEventListener("click", () => showView(t)));
$("ask-form").addEventListener("submit", ask);
$("layer").addEventListener("change", () => { state.layer = Number($("layer").value); drawAttention(); });
$("zoom").addEventListener("input", drawAttention);
$("why-run").addEventListener("change", () => loadAttention().catch((e) => showError(e, "ask-error")));
$("trace-button").addEventListener("click", runTrace);
$("learn-form").addEventListener("submit", startJob);
$("compare-form").addEventListener("submit", compareAsk);
$("compare-dev").addEventListener("click", compareDev);
$("dev-load").addEventListener("click", loadDev);
$("dev-filter").addEventListener("input", drawDev);
$("dev-show").addEventListener("change", drawDev);
$("dev-relation").addEventListener("change", drawDev);
document.querySelectorAll("#dev-table th").forEach((th) => th.addEventListener("click", () => sortBy(th.dataset.key)));
$("edit-form").addEventListener("submit", applyEdit);
$("edit-run").addEventListener("change", editRelations);
$("edit-ask").addEventListener("click", askEdited);
$("save-form").addEventListener("submit", saveEdit);
loadRuns().then(() => loadJobs()).catch(showError);
