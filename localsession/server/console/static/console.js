// The localsession console: polls the server's JSON API (api/...) and draws the sessions
// list, one session's timeline, metric curves (uPlot, vendored), samples and packages.
// Read-only; it loads nothing from anywhere but this server.
"use strict";

const POLL_MS = 1000;
const TIMELINE_OPS = 1500;  // training ops the timeline draws at most (the newest)
const SVG = "http://www.w3.org/2000/svg";
const state = {
  key: sessionStorage.getItem("localsession-key") || "",
  view: null,        // "list" | "detail"
  session: null,     // the session shown
  cursor: 0,         // the last event number read
  events: [],        // every event of the session shown, oldest first
  charts: {},        // metric -> {x: [...], y: [...], plot: uPlot}
  timer: null,
  lastRows: [],
};
// What the page drew, for tests and for the curious: window.lsConsole.charts.loss.y
window.lsConsole = state;

function $(id) { return document.getElementById(id); }

function el(tag, attrs, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function when(iso) {
  return iso ? new Date(iso).toLocaleString() : "";
}

async function api(path) {
  const headers = state.key ? { Authorization: "Bearer " + state.key } : {};
  const response = await fetch("api/" + path, { headers, cache: "no-store" });
  if (response.status === 403) {
    showKeyForm();
    throw new Error("the server wants the API key");
  }
  if (!response.ok) {
    const body = await response.json().catch(() => ({}));
    throw new Error(body.error || response.status + " " + response.statusText);
  }
  return response;
}

function showKeyForm() {
  $("key").hidden = false;
  $("list").hidden = true;
  $("detail").hidden = true;
}

function setStatus(text) { $("status").textContent = text; }

async function download(path, filename) {
  const blob = await (await api(path)).blob();
  const link = el("a", { href: URL.createObjectURL(blob), download: filename });
  document.body.appendChild(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 10000);
}

// -- the sessions list ------------------------------------------------------------------

async function refreshList() {
  const body = await (await api("sessions")).json();
  state.lastRows = body.sessions;
  const filter = $("status-filter");
  const statuses = new Set(body.sessions.map((s) => s.status));
  for (const status of statuses) {
    if (![...filter.options].some((o) => o.value === status)) {
      filter.appendChild(el("option", { value: status }, status));
    }
  }
  renderRows();
  const tbody = $("tinker").querySelector("tbody");
  tbody.replaceChildren();
  for (const t of body.tinker_sessions) {
    const row = el("tr", { "data-tinker-session": t.session_id });
    row.appendChild(el("td", {}, t.session_id));
    row.appendChild(el("td", {}, t.live ? "yes" : "ended"));
    row.appendChild(el("td", {}, when(t.last_heartbeat)));
    const runs = el("td");
    for (const run of t.training_runs) {
      const link = el("a", { href: "#/session/" + encodeURIComponent(run.session) }, run.model_id);
      runs.appendChild(link);
      runs.appendChild(el("br"));
    }
    row.appendChild(runs);
    row.appendChild(el("td", {}, t.samplers.map((s) => s.sampler_id + " (" +
      (s.path || s.base_model) + ")").join(", ")));
    const cell = el("td");
    const button = el("button", { type: "button" }, "Download trace");
    button.addEventListener("click", () =>
      download("tinker/" + encodeURIComponent(t.session_id) + "/trace.json",
        t.session_id + ".trace.json"));
    cell.appendChild(button);
    row.appendChild(cell);
    tbody.appendChild(row);
  }
  setStatus(body.sessions.length + " sessions · updated " + new Date().toLocaleTimeString());
}

function renderRows() {
  const wanted = $("status-filter").value;
  const tbody = $("sessions").querySelector("tbody");
  tbody.replaceChildren();
  for (const s of state.lastRows) {
    if (wanted && s.status !== wanted) continue;
    const row = el("tr", { "data-session": s.name, "data-dialect": s.dialect });
    const name = el("td");
    name.appendChild(el("a", { href: "#/session/" + encodeURIComponent(s.name) }, s.name));
    if (s.label) name.appendChild(el("div", { class: "muted" }, s.label));
    row.appendChild(name);
    row.appendChild(el("td", {}, s.dialect));
    row.appendChild(el("td", { class: "status-" + s.status }, s.status));
    for (const value of [s.base_model, s.rank, s.last_received,
      s.running_seq === null ? "" : s.running_seq, s.queue_depth, s.ops,
      when(s.created), when(s.last_activity)]) {
      row.appendChild(el("td", {}, value));
    }
    row.appendChild(el("td", { class: "error" }, s.error || ""));
    tbody.appendChild(row);
  }
}

// -- one session ------------------------------------------------------------------------

async function refreshDetail() {
  const name = state.session;
  const body = await (await api("sessions/" + encodeURIComponent(name) + "?since=" +
    state.cursor)).json();
  if (name !== state.session) return;  // the user moved on meanwhile
  state.events.push(...body.events);
  state.cursor = body.cursor;
  const s = body.session;
  $("detail-title").textContent = s.name + (s.label ? " · " + s.label : "");
  const summary = $("detail-summary");
  summary.replaceChildren();
  const facts = [["status", s.status], ["dialect", s.dialect], ["base model", s.base_model],
    ["rank", s.rank], ["last sequence number", s.last_received], ["queued", s.queue_depth],
    ["running", s.running_seq === null ? "none" : s.running_seq], ["created", when(s.created)],
    ["last activity", when(s.last_activity)], ["error", s.error || "none"]];
  for (const [label, value] of facts) {
    const item = el("span");
    item.appendChild(el("b", {}, label + ": "));
    item.appendChild(document.createTextNode(String(value)));
    summary.appendChild(item);
  }
  if (body.events.length || !$("timeline").firstChild) {
    drawTimeline();
    drawCharts();
  }
  drawSamples(body.samples);
  drawPackages(body.packages);
  setStatus(state.events.length + " events · updated " + new Date().toLocaleTimeString());
}

function opsOf(events) {
  // op id -> {kind, seq, submitted, started, finished, status, metrics, tokens, batch}
  const ops = new Map();
  const batches = [];
  for (const e of events) {
    if (e.phase === "batch") { batches.push(e); continue; }
    const op = ops.get(e.op_id) || { id: e.op_id, kind: e.kind, seq: e.seq };
    op[e.phase] = e.t;
    if (e.phase === "finished") {
      op.status = e.status; op.metrics = e.metrics || {}; op.tokens = e.tokens || 0;
      op.error = e.error;
    }
    ops.set(e.op_id, op);
  }
  for (const b of batches) for (const id of b.ops || []) {
    const op = ops.get(id);
    if (op) op.batch = b.batch;
  }
  return { ops: [...ops.values()], batches };
}

function drawTimeline() {
  const { ops, batches } = opsOf(state.events);
  const box = $("timeline");
  box.replaceChildren();
  if (!state.events.length) {
    box.appendChild(el("p", { class: "muted" }, "no ops yet"));
    return;
  }
  // a long session: the window of its last TIMELINE_OPS training ops
  let training = ops.filter((o) => o.seq !== undefined && o.seq !== null)
    .sort((a, b) => a.seq - b.seq);
  let t0 = Infinity, t1 = -Infinity;
  for (const e of state.events) { t0 = Math.min(t0, e.t); t1 = Math.max(t1, e.end || e.t); }
  if (training.length > TIMELINE_OPS) {
    training = training.slice(-TIMELINE_OPS);
    t0 = training[0].submitted || training[0].started || t0;
    box.appendChild(el("p", { class: "muted" }, "the last " + TIMELINE_OPS +
      " training ops (the trace has every op the server still holds)"));
  }
  t1 = Math.max(t1, t0 + 1e-3);
  const width = Math.max(box.clientWidth || 900, 600), left = 130, lane = 26;
  const requests = ops.filter((o) => (o.seq === undefined || o.seq === null) &&
    (o.finished === undefined || o.finished >= t0));
  const rows = Math.min(requests.length, 8);
  const height = lane * (3 + rows) + 24;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("width", width); svg.setAttribute("height", height);
  const x = (t) => left + Math.max(t - t0, 0) / (t1 - t0) * (width - left - 10);
  const add = (tag, attrs, title) => {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (title) {
      const tip = document.createElementNS(SVG, "title");
      tip.textContent = title;
      node.appendChild(tip);
    }
    svg.appendChild(node);
    return node;
  };
  const label = (y, text) => add("text", { x: 4, y: y + 16 }).textContent = text;
  label(0, "training ops"); label(lane, "sampling batches"); label(2 * lane, "sampling requests");
  const colour = { forwardBackward: "#3b6fd4", forward: "#7aa0e8", optimizerStep: "#d4803b",
    sample: "#2f9e5b", computeLogprobs: "#8bc34a" };
  for (const op of training) {
    const start = op.started || op.finished || op.submitted;
    const end = op.finished || start;
    if (op.submitted !== undefined && start !== undefined) {
      add("line", { x1: x(op.submitted), x2: x(start), y1: 13, y2: 13, stroke: "#aab",
        "stroke-width": 1 });
    }
    const title = op.seq + " " + op.kind + " · " + (op.status || "running") +
      (op.finished && op.started ? " · " + ((op.finished - op.started) * 1000).toFixed(1) +
        " ms" : "") + (op.error ? " · " + op.error : "");
    add("rect", { class: "op", x: x(start), y: 4, height: 18,
      width: Math.max(x(end) - x(start), 2), fill: colour[op.kind] || "#888",
      "data-seq": op.seq, "data-kind": op.kind, "data-op": op.id,
      "data-status": op.status || "" }, title);
  }
  for (const b of batches) {
    if (b.end < t0) continue;
    add("rect", { class: "batch", x: x(b.t), y: lane + 4, height: 18,
      width: Math.max(x(b.end) - x(b.t), 2), fill: "#2f9e5b", "data-batch": b.batch },
    "batch " + b.batch + ": " + (b.ops || []).length + " requests, " + b.tokens + " tokens");
  }
  requests.forEach((op, i) => {
    const y = 2 * lane + 6 + (i % Math.max(rows, 1)) * lane;
    const start = op.submitted || op.started, end = op.finished || t1;
    add("rect", { class: "request", x: x(start), y, height: 14,
      width: Math.max(x(end) - x(start), 2), fill: colour[op.kind] || "#888", opacity: 0.7,
      "data-op": op.id, "data-kind": op.kind, "data-batch": op.batch || "" },
    op.kind + " · " + (op.status || "pending") + (op.batch ? " · batch " + op.batch : ""));
  });
  add("text", { x: left, y: height - 6 }).textContent = "0 s";
  add("text", { x: width - 60, y: height - 6 }).textContent = (t1 - t0).toFixed(2) + " s";
  box.appendChild(svg);
}

function short(value) {
  // an axis label: big counts (FLOPs) as 1.2e12 rather than a clipped "0,000"
  if (value === null || value === undefined) return "";
  const size = Math.abs(value);
  if (size >= 1e5 || (size > 0 && size < 1e-3)) return value.toExponential(1);
  return String(+value.toPrecision(4));
}

function seriesOf(ops) {
  // metric -> [[x], [y]] over training ops in sequence order; tokens/s from run times
  const series = {};
  const put = (name, x, y) => {
    if (!Number.isFinite(y)) return;
    series[name] = series[name] || [[], []];
    series[name][0].push(x); series[name][1].push(y);
  };
  const training = ops.filter((o) => o.seq !== undefined && o.seq !== null && o.finished &&
    o.status === "Completed").sort((a, b) => a.seq - b.seq);
  for (const op of training) {
    for (const [name, value] of Object.entries(op.metrics || {})) put(name, op.seq, value);
    if (op.tokens && op.started && op.finished > op.started) {
      put("tokens/s", op.seq, op.tokens / (op.finished - op.started));
    }
  }
  return series;
}

function drawCharts() {
  const { ops } = opsOf(state.events);
  const series = seriesOf(ops);
  const order = ["loss", "grad_norm", "learning_rate", "tokens/s"];
  const names = Object.keys(series).sort((a, b) =>
    ((order.indexOf(a) + 1) || 99) - ((order.indexOf(b) + 1) || 99) || a.localeCompare(b));
  const box = $("charts");
  for (const name of names) {
    const [xs, ys] = series[name];
    let chart = state.charts[name];
    if (!chart) {
      const holder = el("div", { class: "chart", "data-metric": name });
      box.appendChild(holder);
      const plot = new uPlot({
        title: name, width: 420, height: 220,
        scales: { x: { time: false } },
        axes: [{ label: "sequence number" }, { size: 60, values: (u, ticks) => ticks.map(short) }],
        series: [{ label: "seq" }, { label: name, stroke: "#3b6fd4", width: 2,
          points: { show: xs.length < 60 } }],
      }, [xs, ys], holder);
      chart = state.charts[name] = { x: xs, y: ys, plot };
    } else if (xs.length !== chart.x.length) {
      chart.plot.setData([xs, ys]);
      chart.x = xs; chart.y = ys;
    }
  }
}

function drawSamples(samples) {
  const box = $("samples");
  box.replaceChildren();
  if (!samples.length) { box.appendChild(el("p", { class: "muted" }, "no samples yet")); return; }
  for (const s of samples) {
    const text = s.text !== null && s.text !== undefined ? s.text : "tokens " +
      s.tokens.join(" ");
    const pre = el("pre", { title: "stop: " + s.stop_reason + " · " + when(s.finished) }, text);
    box.appendChild(pre);
  }
}

function drawPackages(packages) {
  const tbody = $("packages").querySelector("tbody");
  tbody.replaceChildren();
  for (const p of packages) {
    const row = el("tr");
    for (const value of [p.group + "/" + p.version, p.kind, when(p.created), p.description,
      p.s3_uri]) row.appendChild(el("td", {}, value));
    const cell = el("td");
    const button = el("button", { type: "button" }, "Download .tar");
    button.addEventListener("click", () => download(p.download, p.group + "-" + p.version +
      ".tar"));
    cell.appendChild(button);
    row.appendChild(cell);
    tbody.appendChild(row);
  }
}

// -- routing and polling ----------------------------------------------------------------

function route() {
  const match = location.hash.match(/^#\/session\/(.+)$/);
  $("key").hidden = true;
  if (match) {
    const name = decodeURIComponent(match[1]);
    if (state.session !== name) {
      state.session = name; state.cursor = 0; state.events = []; state.charts = {};
      $("charts").replaceChildren(); $("timeline").replaceChildren();
    }
    state.view = "detail";
    $("list").hidden = true; $("detail").hidden = false;
  } else {
    state.view = "list"; state.session = null;
    $("list").hidden = false; $("detail").hidden = true;
  }
  poll();
}

async function poll() {
  clearTimeout(state.timer);
  try {
    if (state.view === "detail") await refreshDetail(); else await refreshList();
  } catch (err) {
    setStatus(String(err.message || err));
  }
  state.timer = setTimeout(poll, POLL_MS);
}

$("status-filter").addEventListener("change", renderRows);
$("trace-all").addEventListener("click", () => download("trace.json", "all.trace.json"));
$("trace-one").addEventListener("click", () => download("sessions/" +
  encodeURIComponent(state.session) + "/trace.json", state.session + ".trace.json"));
$("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  state.key = $("key-input").value.trim();
  sessionStorage.setItem("localsession-key", state.key);
  route();
});
window.addEventListener("hashchange", route);
route();
