// Coach's page: the jobs of one run, a page per job (/jobs/NAME), the cluster, a submit form. Live through
// /api/events (server-sent events read with fetch, so that a bearer token can go with them). Charts are drawn by
// uPlot, served by this server (static/vendor). Everything the page keeps is keyed by run and job: a server
// restarted on another results folder starts a new run, and nothing of the old one is shown for it.
"use strict";

const $ = (id) => document.getElementById(id);
const TOKEN_KEY = "coach-token";
const RETRY_MS = 2000;
const ENDED = ["done", "failed", "interrupted", "stopped_by_user"];
const state = {
  token: localStorage.getItem(TOKEN_KEY) || "", run: null, jobs: [], nodes: [], online: false, lastUpdate: null,
  compare: new Set(), logs: new Map(), marks: new Map(), view: null, tail: null,
};

// -- the API ------------------------------------------------------------------------------------------------------
function headers(extra = {}) {
  return state.token ? { ...extra, Authorization: `Bearer ${state.token}` } : extra;
}

class ApiError extends Error {}

async function api(path, options = {}) {
  const answer = await fetch(path, { ...options, headers: headers(options.headers || {}) });
  if (answer.status === 401) {
    askToken(Boolean(state.token));
    throw new ApiError(state.token ? "the bearer token is not this server's" : "this server needs its bearer token");
  }
  return answer;
}

async function detailOf(answer) {
  try {
    const body = await answer.json();
    return Array.isArray(body.detail) ? body.detail.map((d) => d.msg).join("; ") : String(body.detail);
  } catch (error) { return `HTTP ${answer.status}`; }
}

function askToken(wrong) {
  $("token-form").hidden = false;
  $("token-why").textContent = wrong ? "That token is not this server's: enter the right one."
    : "This server needs its bearer token.";
}

$("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  state.token = $("token").value.trim();
  localStorage.setItem(TOKEN_KEY, state.token);
  $("token-form").hidden = true;
  loadModels();
  reconnect();
});

// -- formatting ---------------------------------------------------------------------------------------------------
function fmt(value, digits = 4) { return value === null || value === undefined ? "–" : Number(value).toFixed(digits); }
function money(value) {
  if (value === null || value === undefined) return "–";
  const v = Number(value);
  return v !== 0 && Math.abs(v) < 0.01 ? v.toPrecision(2) : v.toFixed(v >= 100 ? 0 : 3);
}
function clock(date) { return date ? date.toLocaleTimeString() : "–"; }
function when(iso) { return iso ? new Date(iso).toLocaleString() : "–"; }
function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const s = Math.round(seconds);
  return s < 60 ? `${s} s` : s < 3600 ? `${Math.floor(s / 60)} min ${s % 60} s` : `${(s / 3600).toFixed(1)} h`;
}
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value; else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  node.append(...children);
  return node;
}
const key = (job) => `${state.run}/${job}`;  // what everything cached is keyed by: the run and the job

function tone(job) {
  if (job.ending) return job.ending.tone;
  if (job.phase === "failed") return "bad";
  return "run";
}
const SLOTLESS = ["waiting", "requeued", "deploying"];  // phases in which a job with pending functions runs nothing
function phaseWords(job) {
  if (job.ending) return { target: "done · target reached", budget: "done · budget spent",
    max_epochs: "done · max epochs", stopped: "stopped by user", interrupted: "interrupted",
    failed: "failed" }[job.ending.kind] || job.phase;
  if (job.waiting && SLOTLESS.includes(job.phase)) return "waiting for slots";
  if (job.waiting) return `${job.phase} · more wait for slots`;  // it runs with the functions placed so far
  return job.phase;
}
function noteOf(job) {
  if (job.ending) return job.ending.words;
  if (job.waiting) return [job.waiting.needs, ...(job.waiting.why || [])].join("; ");
  if (job.phase === "deploying" && job.shown_at_s) {
    return `${job.message} (for ${duration(Date.now() / 1000 - job.shown_at_s)})`;
  }
  return job.message;
}
function countsOf(job) {
  return job.step_workers === null || job.step_workers === undefined ? "–" : `${job.step_workers} / ${job.step_servers}`;
}

// -- the jobs table: rows are kept and updated in place, so that focus and a ticked box stay where they are --------
const rows = new Map();  // key(job) -> its row's elements

function newRow(job) {
  const tr = el("tr", { "data-job": job.job });
  const cells = {};
  for (const [name, label] of [["compare", "compare"], ["name", "job"], ["phase", "phase"], ["epoch", "epochs"],
    ["loss", "loss"], ["val-loss", "val loss"], ["counts", "workers / servers"], ["cost", "cost / budget"],
    ["note", "why / note"], ["actions", "actions"]]) {
    cells[name] = el("td", { class: name, "data-label": label });
    tr.append(cells[name]);
  }
  const box = el("input", { type: "checkbox", "aria-label": `compare ${job.job}` });
  box.checked = state.compare.has(job.job);
  box.addEventListener("change", () => {
    if (box.checked) state.compare.add(job.job); else state.compare.delete(job.job);
    drawCompare();
  });
  cells.compare.append(box);
  cells.name.append(el("a", { href: `/jobs/${encodeURIComponent(job.job)}`, "data-route": "" }, job.job));
  const stop = el("button", { type: "button", class: "danger", "aria-label": `Stop ${job.job}` }, "Stop");
  stop.addEventListener("click", () => confirmStop(job.job, error));
  const clone = el("button", { type: "button", "aria-label": `Clone ${job.job} into the submit form` }, "Clone");
  clone.addEventListener("click", () => cloneJob(job.job, error));
  const error = el("span", { class: "action-error", role: "status" });
  cells.actions.append(stop, " ", clone, " ", error);
  const meter = el("meter", { min: "0", max: "1", low: "0.75", high: "0.95", optimum: "0",
    "aria-label": `${job.job}: share of the budget spent` });
  const costText = el("span");
  cells.cost.append(el("span", {}, meter, " ", costText));
  const note = el("span");
  cells.note.append(note);
  for (const name of ["phase", "epoch", "loss", "val-loss", "counts"]) cells[name].append(el("span"));
  return { tr, cells, stop, clone, error, meter, costText, note };
}

function setText(node, text) { if (node.textContent !== text) node.textContent = text; }

function renderJobs() {
  const body = $("jobs").tBodies[0];
  const filter = $("filter").value.trim().toLowerCase();
  const which = $("phase-filter").value;
  const wanted = [];
  for (const job of state.jobs) {
    const ended = ENDED.includes(job.phase);
    if (filter && !job.job.toLowerCase().includes(filter)) continue;
    if ((which === "running" && ended) || (which === "ended" && !ended)) continue;
    wanted.push(job);
  }
  const keep = new Set(wanted.map((job) => key(job.job)));
  for (const [k, row] of rows) if (!keep.has(k)) { row.tr.remove(); rows.delete(k); }
  let previous = null;
  for (const job of wanted) {
    let row = rows.get(key(job.job));
    if (!row) { row = newRow(job); rows.set(key(job.job), row); }
    const expected = previous ? previous.nextSibling : body.firstChild;
    if (expected !== row.tr) body.insertBefore(row.tr, expected);  // only moved when out of place: focus stays
    previous = row.tr;
    const phase = row.cells.phase.firstChild;
    setText(phase, phaseWords(job));
    phase.className = `tone-${tone(job)}`;
    setText(row.cells.epoch.firstChild, job.max_epochs ? `${job.epoch} / ${job.max_epochs}` : String(job.epoch));
    setText(row.cells.loss.firstChild, fmt(job.loss));
    setText(row.cells["val-loss"].firstChild, fmt(job.val_loss));
    setText(row.cells.counts.firstChild, countsOf(job));
    const m = job.money || { share: job.budget ? job.cost / job.budget : 0, level: "ok", per_epoch: null };
    row.meter.value = Math.min(1, m.share);
    setText(row.costText, `${money(job.cost)} / ${money(job.budget)}` + (m.per_epoch ? ` · ${money(m.per_epoch)}/epoch` : ""));
    row.costText.className = `money-${m.level}`;
    setText(row.note, noteOf(job));
    const ended = ENDED.includes(job.phase);
    row.stop.hidden = ended;
    for (const button of [row.stop, row.clone]) button.setAttribute("aria-disabled", String(!state.online));
  }
  $("no-jobs").hidden = state.jobs.length > 0;
  $("no-jobs").textContent = state.jobs.length ? "" : "No jobs yet: submit one below.";
}

$("filter").addEventListener("input", renderJobs);
$("phase-filter").addEventListener("change", renderJobs);

function renderNodes() {
  const box = $("nodes");
  box.replaceChildren();
  const names = state.jobs.map((j) => j.job);
  for (const node of state.nodes) {
    if (node.name === null && node.functions.length === 0) continue;
    const div = el("div", { class: node.name === null ? "node pending" : "node", "data-node": node.name || "(pending)" });
    div.append(el("h3", { text: node.name === null ? `waiting for a node (${node.functions.length})`
      : `${node.name}: ${node.functions.length} of ${node.slots} slots used` }));
    for (const f of node.functions) {
      const chip = el("span", { class: "chip", title: f.name }, `${f.job} ${f.role}`);
      chip.style.setProperty("--chip", `var(--s${(Math.max(0, names.indexOf(f.job)) % 6) + 1})`);
      div.append(chip);
    }
    box.append(div);
  }
}

// -- actions: each says how it went beside what it acted on -------------------------------------------------------
function blocked(button) { return button && button.getAttribute("aria-disabled") === "true"; }

function confirmStop(job, errorBox) {
  if (!state.online) { errorBox.textContent = "offline: the server does not answer"; return; }
  const dialog = $("stop-dialog");
  for (const span of dialog.querySelectorAll(".stop-job")) span.textContent = job;
  const opener = document.activeElement;
  dialog.returnValue = "";
  dialog.onclose = async () => {
    if (opener && opener.focus) opener.focus();
    if (dialog.returnValue !== "stop") return;
    errorBox.textContent = `stopping ${job}…`;
    try {
      const answer = await api(`/api/jobs/${encodeURIComponent(job)}/stop`, { method: "POST" });
      errorBox.textContent = answer.ok ? `${job} stops after its epoch in flight` : await detailOf(answer);
    } catch (error) { errorBox.textContent = `could not stop ${job}: ${error.message || error}`; }
  };
  dialog.showModal();
}

function specYaml(spec, name) {
  return Object.entries({ ...spec, name }).filter(([, v]) => v !== null && v !== undefined)
    .map(([k, v]) => `${k}: ${typeof v === "object" ? JSON.stringify(v) : v}`).join("\n") + "\n";
}

async function cloneJob(job, errorBox) {
  if (!state.online) { errorBox.textContent = "offline: the server does not answer"; return; }
  try {
    const answer = await api(`/api/jobs/${encodeURIComponent(job)}/overview`);
    if (!answer.ok) { errorBox.textContent = await detailOf(answer); return; }
    const { job_file: spec } = await answer.json();
    const taken = new Set(state.jobs.map((j) => j.job));
    let n = 2, name = `${job}-${n}`;
    while (taken.has(name)) name = `${job}-${++n}`;
    if (state.view !== "list") navigate("/");
    $("job-text").value = specYaml(spec, name);
    showProblems([]);
    $("submit-result").textContent = `cloned ${job} as ${name}: change what you like, then submit`;
    $("job-text").focus();
    $("job-text").scrollIntoView({ block: "center" });
    errorBox.textContent = "";
  } catch (error) { errorBox.textContent = `could not clone ${job}: ${error.message || error}`; }
}

function lineOf(text, field) {
  const lines = text.split("\n");
  const at = lines.findIndex((line) => line.replace(/^["']/, "").startsWith(`${field}`) && /^["']?[\w.-]+["']?\s*:/.test(line)
    && line.replace(/^["']/, "").split(/["']?\s*:/)[0] === field);
  return at < 0 ? null : at + 1;
}

function selectLine(number) {
  const area = $("job-text");
  const lines = area.value.split("\n");
  const start = lines.slice(0, number - 1).reduce((n, line) => n + line.length + 1, 0);
  area.focus();
  area.setSelectionRange(start, start + (lines[number - 1] || "").length);
}

function showProblems(details) {
  const list = $("problems");
  list.replaceChildren();
  const text = $("job-text").value;
  const found = details.map((d) => {
    const field = Array.isArray(d.loc) ? d.loc[d.loc.length - 1] : "(file)";
    return { field, msg: d.msg || String(d), line: lineOf(text, field) };
  }).sort((a, b) => (a.line || 1e9) - (b.line || 1e9));
  for (const p of found) {
    const words = p.msg.replace(/^request: /, "");
    const item = el("li", { "data-field": p.field });
    if (p.line) {
      const go = el("button", { type: "button" }, `line ${p.line}`);
      go.addEventListener("click", () => selectLine(p.line));
      item.append(go, `: ${words}`);
    } else item.append(words);
    list.append(item);
  }
  $("job-text").setAttribute("aria-invalid", String(found.length > 0));
}

$("submit-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const result = $("submit-result");
  if (!state.online) { result.textContent = "offline: the server does not answer; nothing was sent"; return; }
  result.textContent = "submitting…";
  try {
    const answer = await api("/api/jobs", { method: "POST", body: $("job-text").value,
      headers: { "Content-Type": "application/yaml" } });
    const body = await answer.json();
    if (answer.ok) {
      showProblems([]);
      result.replaceChildren(`submitted ${body.job}: `,
        el("a", { href: `/jobs/${encodeURIComponent(body.job)}`, "data-route": "" }, `its page`));
      state.compare.add(body.job);
    } else if (Array.isArray(body.detail)) {
      result.textContent = `not submitted: ${body.detail.length} problem${body.detail.length > 1 ? "s" : ""}`;
      showProblems(body.detail);
    } else {
      result.textContent = `not submitted: ${body.detail}`;
      showProblems([]);
    }
  } catch (error) { result.textContent = `not submitted: ${error.message || error}`; }
});

$("job-file").addEventListener("change", async () => {
  const file = $("job-file").files[0];
  if (!file) return;
  if (file.size > 64 * 1024) { $("submit-result").textContent = `${file.name} is larger than 64 KiB`; return; }
  $("job-text").value = await file.text();
  showProblems([]);
  $("submit-result").textContent = `loaded ${file.name}: check it, then submit`;
});

// -- charts (uPlot) -----------------------------------------------------------------------------------------------
function cssVar(name) { return getComputedStyle(document.documentElement).getPropertyValue(name).trim(); }

function tooltip() {  // the values under the cursor, next to it
  let tip;
  return {
    hooks: {
      init: (u) => { tip = el("div", { class: "chart-tip", "aria-hidden": "true" }); tip.hidden = true; u.over.append(tip); },
      setCursor: (u) => {
        const i = u.cursor.idx;
        if (i === null || i === undefined || u.cursor.left < 0) { tip.hidden = true; return; }
        const parts = [`${u.series[0].label} ${u.series[0].value ? u.series[0].value(u, u.data[0][i]) : u.data[0][i]}`];
        u.series.forEach((s, k) => {
          if (k > 0 && s.show && u.data[k][i] !== null && u.data[k][i] !== undefined) parts.push(`${s.label}: ${fmt(u.data[k][i], 4)}`);
        });
        tip.textContent = parts.join(" · ");
        tip.hidden = false;
        tip.style.left = `${Math.min(u.cursor.left + 10, u.over.clientWidth - tip.offsetWidth)}px`;
        tip.style.top = `${Math.max(0, u.cursor.top - 30)}px`;
      },
    },
  };
}

function markers(list) {  // vertical lines at calibration steps and resumes, labelled
  return {
    hooks: {
      draw: (u) => {
        const ctx = u.ctx;
        ctx.save();
        ctx.strokeStyle = cssVar("--muted"); ctx.fillStyle = cssVar("--muted");
        ctx.setLineDash([4, 4]); ctx.lineWidth = devicePixelRatio;
        ctx.font = `${11 * devicePixelRatio}px system-ui`;
        for (const m of list) {
          const x = Math.round(u.valToPos(m.x, "x", true));
          if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
          ctx.beginPath(); ctx.moveTo(x, u.bbox.top); ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke();
          ctx.fillText(m.label, x + 3 * devicePixelRatio, u.bbox.top + 12 * devicePixelRatio);
        }
        ctx.restore();
      },
    },
  };
}

const charts = new Map();  // element id -> uPlot

function drawChart(id, { x, series, time, log, markerList = [], yLabel }) {
  const box = $(id);
  const old = charts.get(id);
  if (old) { old.destroy(); charts.delete(id); }
  box.replaceChildren();
  if (x.length === 0) { box.append(el("p", { class: "hint", text: "no data yet" })); return; }
  const axis = { stroke: cssVar("--fg"), grid: { stroke: cssVar("--line"), width: 1 }, ticks: { stroke: cssVar("--line") } };
  const safe = (values) => (log ? values.map((v) => (v !== null && v > 0 ? v : null)) : values);
  const opts = {
    width: Math.max(200, box.clientWidth), height: 220,
    scales: { x: { time }, y: log ? { distr: 3 } : {} },
    axes: [{ ...axis, label: time ? "time" : "epoch" }, { ...axis, label: yLabel, size: 60 }],
    series: [{ label: time ? "time" : "epoch", value: time ? (u, v) => (v === null ? "–" : new Date(v * 1000).toLocaleTimeString()) : undefined },
      ...series.map((s) => ({ label: s.label, stroke: s.colour, width: 2, dash: s.dash, spanGaps: true,
        points: { show: x.length <= 60, size: 5 }, paths: s.stepped ? uPlot.paths.stepped({ align: 1 }) : undefined }))],
    legend: { live: true },
    cursor: { focus: { prox: 16 } },
    plugins: [tooltip(), markers(markerList)],
  };
  const u = new uPlot(opts, [x, ...series.map((s) => safe(s.values))], box);
  charts.set(id, u);
  box.setAttribute("data-points", String(x.length));
}

const resize = new ResizeObserver((entries) => {
  for (const entry of entries) {
    const u = charts.get(entry.target.id);
    if (u && Math.abs(u.width - entry.target.clientWidth) > 2) u.setSize({ width: Math.max(200, entry.target.clientWidth), height: 220 });
  }
});
for (const id of ["compare-chart", "loss-chart", "acc-chart", "counts-chart"]) resize.observe($(id));
matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => redraw());

function controls(id) {
  const box = $(id);
  return { time: box.querySelector(".x-axis").value === "time", log: box.querySelector(".log-scale").checked };
}
for (const id of ["compare-controls", "job-controls"]) {
  for (const input of $(id).querySelectorAll("select, input")) input.addEventListener("change", () => redraw());
}
$("compare-metric").addEventListener("change", () => drawCompare());

// -- logs: read once, then only what is new; keyed by run and job -------------------------------------------------
const reading = new Map();  // key(job) -> the read in flight: two callers at once (the compare chart and a job's
// page) share it, or both would append the same records to the job's log
function recordsOf(job) {
  const k = key(job);
  if (!reading.has(k)) reading.set(k, readRecords(job, k).finally(() => reading.delete(k)));
  return reading.get(k);
}

async function readRecords(job, k) {
  const log = state.logs.get(k) || [];
  state.logs.set(k, log);
  for (;;) {
    const answer = await api(`/api/jobs/${encodeURIComponent(job)}?start=${log.length}`);
    if (!answer.ok) return log;
    const { records, total, status } = await answer.json();
    if (status && status.run_id && status.run_id !== state.run) return [];  // another run answered meanwhile
    log.push(...records);
    if (records.length === 0 || log.length >= total) return log;
  }
}

const epochSeconds = (iso) => new Date(iso).getTime() / 1000;
const COLOURS = () => [1, 2, 3, 4, 5, 6].map((n) => cssVar(`--s${n}`));

function seriesOf(records, metric, time) {
  const epochs = records.filter((r) => r.phase === "training");
  return { x: epochs.map((r) => (time ? epochSeconds(r.end) : r.epoch)), y: epochs.map((r) => r[metric] ?? null) };
}

async function drawCompare() {
  const jobs = state.jobs.filter((j) => state.compare.has(j.job)).map((j) => j.job);
  const metric = $("compare-metric").value;
  const { time, log } = controls("compare-controls");
  const logs = await Promise.all(jobs.map((job) => recordsOf(job).catch(() => [])));
  const xs = [...new Set(logs.flatMap((records) => seriesOf(records, metric, time).x))].sort((a, b) => a - b);
  const colours = COLOURS();
  const series = jobs.map((job, i) => {
    const { x, y } = seriesOf(logs[i], metric, time);
    const at = new Map(x.map((v, k) => [v, y[k]]));
    return { label: job, colour: colours[i % colours.length], values: xs.map((v) => (at.has(v) ? at.get(v) : null)) };
  });
  drawChart("compare-chart", { x: xs, series, time, log: log && metric !== "accuracy", yLabel: $("compare-metric").selectedOptions[0].text });
  $("compare-chart").setAttribute("aria-label", jobs.length
    ? `${$("compare-metric").selectedOptions[0].text} of ${jobs.join(", ")}` : "no job ticked");
  $("compare-hint").hidden = jobs.length > 0;
}

// -- a job's page ---------------------------------------------------------------------------------------------------
function dl(box, pairs) {
  box.replaceChildren();
  for (const [term, value] of pairs) box.append(el("dt", { text: term }), el("dd", { text: value }));
}

function placementWords(placement) {
  const per = {};
  for (const [fn, node] of Object.entries(placement || {})) {
    const role = fn.match(/-(scheduler|server|worker)-\d+$/);
    (per[node] = per[node] || []).push(role ? role[1] : fn);
  }
  return Object.entries(per).sort().map(([node, roles]) => `${node}: ${roles.join(", ")}`).join("; ");
}

async function drawJob(job) {
  const records = await recordsOf(job);
  if (state.view !== "job" || state.viewJob !== job) return;
  const status = state.jobs.find((j) => j.job === job);
  const { time, log } = controls("job-controls");
  const epochs = records.filter((r) => r.phase === "training");
  const steps = records.filter((r) => r.phase === "training" || r.phase === "calibration");
  const x = epochs.map((r) => (time ? epochSeconds(r.end) : r.epoch));
  const marks = [];
  records.forEach((r, i) => {
    if (r.phase === "calibration") marks.push({ x: time ? epochSeconds(r.end) : 0, label: "calibration" });
    if (r.phase === "interrupted" || r.phase === "recovered") {
      const next = records.slice(i + 1).find((n) => n.phase === "training");
      if (next) marks.push({ x: time ? epochSeconds(next.start) : next.epoch - 0.5, label: "resumed" });
    }
  });
  const shownMarks = time ? marks : marks.filter((m, i) => m.label !== "calibration" || i === marks.findIndex((n) => n.label === "calibration"));
  const c = COLOURS();
  const target = status && status.target_loss !== undefined ? status.target_loss : null;
  drawChart("loss-chart", { x, time, log, markerList: shownMarks, yLabel: "loss", series: [
    { label: "training loss", colour: c[0], values: epochs.map((r) => r.loss) },
    { label: "validation loss", colour: c[1], values: epochs.map((r) => r.val_loss) },
    ...(target !== null ? [{ label: "target", colour: cssVar("--target"), dash: [6, 4], values: epochs.map(() => target) }] : []),
  ] });
  drawChart("acc-chart", { x, time, log: false, markerList: shownMarks, yLabel: "accuracy", series: [
    { label: "validation accuracy", colour: c[2], values: epochs.map((r) => r.accuracy) },
    { label: "training accuracy", colour: c[3], values: epochs.map((r) => r.train_accuracy) },
  ] });
  drawChart("counts-chart", { x: steps.map((r, i) => (time ? epochSeconds(r.end) : i + 1)), time, log: false,
    yLabel: "functions", series: [
      { label: "workers", colour: c[0], stepped: true, values: steps.map((r) => r.workers) },
      { label: "servers", colour: c[1], stepped: true, values: steps.map((r) => r.servers) },
    ] });
  $("loss-chart").dataset.epochs = String(epochs.length);
  const body = $("epochs").tBodies[0];
  body.replaceChildren();
  for (const r of epochs) {
    const tr = el("tr");
    for (const text of [String(r.epoch), fmt(r.loss), fmt(r.val_loss), fmt(r.accuracy, 3), `${fmt(r.epoch_time_s, 2)} s`,
      money(r.cost), `${r.workers} / ${r.servers}`, placementWords(r.placement)]) tr.append(el("td", { text }));
    body.append(tr);
  }
  const decisions = $("decisions");
  decisions.replaceChildren();
  for (const r of records.filter((r) => r.decision && r.phase === "training")) {
    const details = Object.entries(r.decision).map(([k, v]) => `${k}: ${typeof v === "number" ? fmt(v, 4) : JSON.stringify(v)}`).join("; ");
    decisions.append(el("li", { text: `epoch ${r.epoch}: ${r.workers} workers, ${r.servers} servers — ${details}` }));
  }
  if (!decisions.children.length) decisions.append(el("li", { text: "the job's policy recorded no decision details (a static policy runs the counts of its job file)" }));
}

function renderJobHead(job) {
  const status = state.jobs.find((j) => j.job === job);
  $("job-name").textContent = job;
  if (!status) { $("job-phase").textContent = "(not in this run)"; return; }
  $("job-phase").textContent = phaseWords(status);
  $("job-phase").className = `tone tone-${tone(status)}`;
  const ending = $("job-ending");
  ending.hidden = !status.ending;
  if (status.ending) { ending.textContent = status.ending.words; ending.className = `ending tone-${status.ending.tone}`; }
  const waiting = $("job-waiting");
  waiting.hidden = !status.waiting;
  if (status.waiting) {
    const w = status.waiting;
    const items = [w.needs, ...(w.why || []).map((why) => `why: ${why}`), w.held_by, w.queue, w.next_try, w.fewer].filter(Boolean);
    waiting.replaceChildren(el("strong", { text: "Waiting for slots" }), el("ul", {}, ...items.map((t) => el("li", { text: t }))));
  }
  const m = status.money;
  if (m) {
    dl($("job-money"), [["spent", `${money(m.spent)} of ${money(m.budget)} (${Math.round(m.share * 100)} %)`],
      ["per epoch", m.per_epoch === null ? "– (no epoch yet)" : money(m.per_epoch)],
      ["per hour", m.per_hour === null ? "–" : money(m.per_hour)],
      ["money left buys", m.epochs_affordable === null ? "–" : `${m.epochs_affordable} more epochs (${money(m.left)} left)`],
      [`cost at max_epochs (${status.max_epochs})`, m.projected_at_max === null ? "–"
        : `${money(m.projected_at_max)}${m.projected_over_budget ? " — over the budget: it will stop early" : ""}`]]);
    $("job-meter").value = Math.min(1, m.share);
    $("job-meter-label").textContent = `budget spent: ${Math.round(m.share * 100)} %`;
    $("job-meter-label").className = `money-${m.level}`;
  }
  $("job-stop").hidden = ENDED.includes(status.phase);
  $("job-stop").setAttribute("aria-label", `Stop ${job}`);
  for (const b of [$("job-stop"), $("job-clone")]) b.setAttribute("aria-disabled", String(!state.online));
}

async function loadOverview(job) {
  try {
    const answer = await api(`/api/jobs/${encodeURIComponent(job)}/overview`);
    if (!answer.ok) { $("job-action-error").textContent = await detailOf(answer); return; }
    const o = await answer.json();
    if (o.run_id !== state.run || state.viewJob !== job) return;
    $("job-spec").textContent = specYaml(o.job_file, job);
    dl($("job-times"), [["submitted", when(o.times.submitted)], ["started", when(o.times.started)],
      ["finished", when(o.times.finished)], ["job completion time", duration(o.times.jct_s)]]);
  } catch (error) { $("job-action-error").textContent = String(error.message || error); }
}

async function followTail(job) {
  if (state.tail) state.tail.abort();
  const controller = new AbortController();
  state.tail = controller;
  const pre = $("log-tail");
  pre.textContent = "";
  const lines = [];
  const show = (fn, new_) => {
    for (const line of new_) lines.push(`${fn} | ${line}`);
    lines.splice(0, Math.max(0, lines.length - 500));
    const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.textContent = lines.join("\n") || "no function logs yet";
    if (atEnd) pre.scrollTop = pre.scrollHeight;
  };
  const follow = $("follow-logs").checked;
  try {
    const answer = await api(`/api/jobs/${encodeURIComponent(job)}/logs?lines=200&follow=${follow}`, { signal: controller.signal });
    if (!answer.ok) { pre.textContent = await detailOf(answer); return; }
    if (!follow) {
      const body = await answer.json();
      for (const [fn, l] of Object.entries(body.functions)) show(fn, l);
      if (!lines.length) show("", []);
      return;
    }
    show("", []);
    await readEvents(answer, (event, data) => { if (event === "log") show(data.function, data.lines); });
  } catch (error) { if (!controller.signal.aborted) pre.textContent += `\n(log tail stopped: ${error.message || error})`; }
}
$("follow-logs").addEventListener("change", () => { if (state.view === "job") followTail(state.viewJob); });

$("job-stop").addEventListener("click", () => confirmStop(state.viewJob, $("job-action-error")));
$("job-clone").addEventListener("click", () => cloneJob(state.viewJob, $("job-action-error")));

async function download(format) {
  const job = state.viewJob;
  $("download-error").textContent = "";
  try {
    const answer = await api(`/api/jobs/${encodeURIComponent(job)}/records.${format}`);
    if (!answer.ok) { $("download-error").textContent = await detailOf(answer); return; }
    const url = URL.createObjectURL(await answer.blob());
    const link = el("a", { href: url, download: `${job}.${format}` });
    document.body.append(link); link.click(); link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  } catch (error) { $("download-error").textContent = `download failed: ${error.message || error}`; }
}
for (const button of document.querySelectorAll(".download")) button.addEventListener("click", () => download(button.dataset.format));

// -- views and links ------------------------------------------------------------------------------------------------
function route() {
  const found = location.pathname.match(/^\/jobs\/(.+)$/);
  const job = found ? decodeURIComponent(found[1]) : null;
  state.view = job ? "job" : "list";
  state.viewJob = job;
  $("list-view").hidden = Boolean(job);
  $("job-view").hidden = !job;
  document.title = job ? `${job} · Coach` : "Coach";
  if (job) {
    renderJobHead(job);
    loadOverview(job);
    drawJob(job).catch(() => {});
    followTail(job);
  } else {
    if (state.tail) { state.tail.abort(); state.tail = null; }
    drawCompare().catch(() => {});
  }
}

function navigate(path) {
  history.pushState({}, "", path);
  route();
  window.scrollTo(0, 0);
}

document.addEventListener("click", (event) => {
  const link = event.target.closest("a[data-route]");
  if (!link || event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
  event.preventDefault();
  navigate(link.getAttribute("href"));
  if (state.view === "job") $("job-title").focus({ preventScroll: true });
});
$("job-title").tabIndex = -1;
window.addEventListener("popstate", route);

function redraw() {
  if (state.view === "job") drawJob(state.viewJob).catch(() => {}); else drawCompare().catch(() => {});
}

// -- live updates ---------------------------------------------------------------------------------------------------
function onBoard(board) {
  if (board.run_id !== state.run) {  // another run: forget everything of the old one
    state.run = board.run_id;
    state.logs.clear(); state.marks.clear();
    for (const row of rows.values()) row.tr.remove();
    rows.clear();
    state.compare = new Set(board.jobs.length ? [board.jobs[board.jobs.length - 1].job] : []);
  }
  if (state.compare.size === 0 && board.jobs.length) state.compare.add(board.jobs[board.jobs.length - 1].job);
  state.jobs = board.jobs;
  state.nodes = board.nodes;
  $("run").textContent = `run ${board.run_id}`;
  renderJobs();
  renderNodes();
  const changed = new Set();  // curves are read again when a job has a new step; only the charts that show it
  for (const job of board.jobs) {  // are drawn again (a redraw would hide the tooltip under the cursor)
    const mark = `${job.epoch}:${job.phase}:${job.step_workers}`;
    if (state.marks.get(key(job.job)) !== mark) { state.marks.set(key(job.job), mark); changed.add(job.job); }
  }
  if (state.view === "job") {
    renderJobHead(state.viewJob);
    if (changed.has(state.viewJob)) { drawJob(state.viewJob).catch(() => {}); loadOverview(state.viewJob); }
  } else if ([...changed].some((job) => state.compare.has(job))) drawCompare().catch(() => {});
}

function setOnline(on) {
  const was = state.online;
  state.online = on;
  document.body.classList.toggle("offline", !on);
  $("live").className = on ? "on" : "off";
  $("live").textContent = on ? "live" : "offline";
  const banner = $("offline");
  banner.hidden = on;
  if (!on) {
    banner.textContent = `Offline: the server does not answer. What you see is as of ${clock(state.lastUpdate)}; `
      + "actions are disabled until it answers again (trying every 2 s).";
  }
  if (was !== on) {
    renderJobs();
    if (state.view === "job") renderJobHead(state.viewJob);
    if (on && state.view === "job") followTail(state.viewJob);
  }
}

async function readEvents(answer, onEvent) {
  const decoder = new TextDecoder();
  const reader = answer.body.getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const message = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const name = (message.match(/^event: (.*)$/m) || [])[1];
      const data = message.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
      state.lastUpdate = new Date();
      if (name && data) onEvent(name, JSON.parse(data));
    }
  }
}

let wake = null;
function reconnect() { if (wake) wake(); }

async function follow() {
  for (;;) {
    try {
      const answer = await api("/api/events");
      if (answer.ok && answer.body) {
        await readEvents(answer, (event, data) => {
          if (event === "board") { setOnline(true); onBoard(data); }
        });
      }
    } catch (error) { /* the server went away, or wants a token: try again */ }
    setOnline(false);
    await new Promise((resolve) => { wake = resolve; setTimeout(resolve, RETRY_MS); });
  }
}

async function loadModels() {
  try {
    const answer = await api("/api/models");
    const body = await answer.json();
    $("models").textContent = body.models.join(", ") || "none";
    if (!$("job-text").value) {
      $("job-text").value = Object.entries(body.example).map(([k, v]) => `${k}: ${v}`).join("\n") + "\n";
    }
  } catch (error) { /* asked for the token */ }
}

if (typeof uPlot !== "function") {  // a server installed without `make web`: say so instead of blank charts
  window.uPlot = function missing(opts, data, box) {
    box.append(el("p", { class: "hint", text: "charts need uPlot (make web copies it into coach/service/page/vendor)" }));
    return { destroy() {}, setSize() {}, width: 0 };
  };
  window.uPlot.paths = { stepped: () => undefined };
}
route();
loadModels();
follow();
