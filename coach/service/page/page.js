// Coach's page: the jobs, one job's curves, the cluster, a submit form. Live through /api/events (server-sent
// events read with fetch, so that a bearer token can go with them). No build step, no libraries.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { token: sessionStorage.getItem("coach-token") || "", selected: null, epochs: {}, jobs: [] };
const COLOURS = ["#1f6feb", "#d9480f", "#2b8a3e", "#7048e8", "#c2255c", "#0b7285", "#e67700", "#5c940d"];

function headers(extra = {}) {
  return state.token ? { ...extra, Authorization: `Bearer ${state.token}` } : extra;
}

async function api(path, options = {}) {
  const answer = await fetch(path, { ...options, headers: headers(options.headers || {}) });
  if (answer.status === 401) { askToken(); throw new Error("a bearer token is required"); }
  return answer;
}

function askToken() { $("token-form").hidden = false; }

$("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  state.token = $("token").value.trim();
  sessionStorage.setItem("coach-token", state.token);
  $("token-form").hidden = true;
  loadModels();
});

function fmt(value, digits = 4) { return value === null || value === undefined ? "–" : Number(value).toFixed(digits); }

function colourOf(job) {
  const names = state.jobs.map((j) => j.job);
  const index = Math.max(0, names.indexOf(job));
  return COLOURS[index % COLOURS.length];
}

function cell(row, text, cls) {
  const td = row.insertCell();
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

function renderJobs(jobs) {
  const body = $("jobs").tBodies[0];
  body.replaceChildren();
  $("no-jobs").hidden = jobs.length > 0;
  for (const job of jobs) {
    const row = body.insertRow();
    row.dataset.job = job.job;
    if (job.job === state.selected) row.classList.add("selected");
    cell(row, job.job, "name");
    cell(row, job.phase, `phase phase-${job.phase}`);
    cell(row, String(job.epoch), "epoch");
    cell(row, fmt(job.loss), "loss");
    cell(row, fmt(job.val_loss), "val-loss");
    cell(row, `${job.workers}/${job.servers}`, "counts");
    const money = cell(row, "", "cost");
    const meter = document.createElement("meter");
    meter.min = 0; meter.max = job.budget; meter.value = Math.min(job.cost, job.budget);
    money.append(meter, ` ${fmt(job.cost)} / ${job.budget}`);
    cell(row, job.message, "note");
    const actions = row.insertCell();
    if (!["done", "failed", "interrupted", "stopped_by_user"].includes(job.phase)) {
      const stop = document.createElement("button");
      stop.textContent = "stop";
      stop.className = "stop";
      stop.addEventListener("click", (event) => { event.stopPropagation(); stopJob(job.job); });
      actions.append(stop);
    }
    row.addEventListener("click", () => select(job.job));
  }
}

function renderNodes(nodes) {
  const box = $("nodes");
  box.replaceChildren();
  for (const node of nodes) {
    if (node.name === null && node.functions.length === 0) continue;
    const div = document.createElement("div");
    div.className = node.name === null ? "node pending" : "node";
    div.dataset.node = node.name || "(pending)";
    const title = document.createElement("h3");
    title.textContent = node.name === null ? `pending (${node.functions.length})`
      : `${node.name}: ${node.functions.length}/${node.slots} slots`;
    div.append(title);
    for (const f of node.functions) {
      const chip = document.createElement("span");
      chip.className = "chip";
      chip.style.background = colourOf(f.job);
      chip.title = f.name;
      chip.textContent = `${f.job} ${f.role}`;
      div.append(chip);
    }
    box.append(div);
  }
}

function polyline(svg, points, colour, box) {
  if (points.length === 0) return;
  const [x0, x1, y0, y1] = box;
  const sx = (x) => 30 + (x1 === x0 ? 0 : (x - x0) / (x1 - x0)) * 360;
  const sy = (y) => 165 - (y1 === y0 ? 0.5 : (y - y0) / (y1 - y0)) * 150;
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", points.map(([x, y]) => `${sx(x)},${sy(y)}`).join(" "));
  line.setAttribute("fill", "none");
  line.setAttribute("stroke", colour);
  line.setAttribute("stroke-width", "2");
  svg.append(line);
  if (points.length > 100) return;  // dots only where they can be told apart
  for (const [x, y] of points) {
    const dot = document.createElementNS("http://www.w3.org/2000/svg", "circle");
    dot.setAttribute("cx", sx(x)); dot.setAttribute("cy", sy(y)); dot.setAttribute("r", "2.5");
    dot.setAttribute("fill", colour);
    svg.append(dot);
  }
}

function axisLabels(svg, box) {
  const [x0, x1, y0, y1] = box;
  for (const [x, y, text] of [[2, 20, fmt(y1, 3)], [2, 168, fmt(y0, 3)], [30, 178, String(x0)], [380, 178, String(x1)]]) {
    const label = document.createElementNS("http://www.w3.org/2000/svg", "text");
    label.setAttribute("x", x); label.setAttribute("y", y); label.setAttribute("font-size", "10");
    label.textContent = text;
    svg.append(label);
  }
}

const MAX_POINTS = 500;  // a long log is drawn from every k-th point (the last one always)

function thinned(points) {
  if (points.length <= MAX_POINTS) return points;
  const step = Math.ceil(points.length / MAX_POINTS);
  return points.filter((_, i) => i % step === 0 || i === points.length - 1);
}

function chart(svg, series) {
  svg.replaceChildren();
  series = series.map((s) => ({ ...s, points: thinned(s.points) }));
  const all = series.flatMap((s) => s.points);
  if (all.length === 0) return;
  const xs = all.map(([x]) => x), ys = all.map(([, y]) => y);
  const box = [xs.reduce((a, b) => Math.min(a, b)), xs.reduce((a, b) => Math.max(a, b)),
               Math.min(0, ys.reduce((a, b) => Math.min(a, b))), ys.reduce((a, b) => Math.max(a, b))];
  axisLabels(svg, box);
  for (const s of series) polyline(svg, s.points, s.colour, box);
}

const logs = {};  // job -> the records read so far (a log only grows: each update reads what is new)

async function recordsOf(name) {
  const log = logs[name] || (logs[name] = []);
  for (;;) {
    const answer = await api(`/api/jobs/${encodeURIComponent(name)}?start=${log.length}`);
    if (!answer.ok) return log;
    const { records, total } = await answer.json();
    log.push(...records);
    if (records.length === 0 || log.length >= total) return log;
  }
}

const drawing = {};  // job -> the drawing in flight; a request for another while one runs draws once more after

function drawDetail(name) {
  const current = drawing[name];
  if (current) { current.again = true; return current.promise; }
  const state = { again: false };
  state.promise = (async () => {
    do { state.again = false; await drawOnce(name); } while (state.again);
  })().finally(() => { delete drawing[name]; });
  drawing[name] = state;
  return state.promise;
}

async function drawOnce(name) {
  const records = await recordsOf(name);
  const epochs = records.filter((r) => r.phase === "training");
  const steps = records.filter((r) => r.phase === "training" || r.phase === "calibration");
  $("detail-name").textContent = name;
  chart($("loss-chart"), [
    { colour: "#1f6feb", points: epochs.filter((r) => r.loss !== null).map((r) => [r.epoch, r.loss]) },
    { colour: "#d9480f", points: epochs.filter((r) => r.val_loss !== null).map((r) => [r.epoch, r.val_loss]) },
  ]);
  chart($("counts-chart"), [
    { colour: "#1f6feb", points: steps.map((r, i) => [i + 1, r.workers]) },
    { colour: "#d9480f", points: steps.map((r, i) => [i + 1, r.servers]) },
  ]);
  $("loss-chart").dataset.epochs = String(epochs.length);
}

function select(name) {
  state.selected = name;
  for (const row of $("jobs").tBodies[0].rows) row.classList.toggle("selected", row.dataset.job === name);
  drawDetail(name).catch(() => {});
}

function onBoard(board) {
  state.jobs = board.jobs;
  $("run").textContent = `run ${board.run_id}`;
  if (!state.selected && board.jobs.length) state.selected = board.jobs[board.jobs.length - 1].job;
  renderJobs(board.jobs);
  renderNodes(board.nodes);
  for (const job of board.jobs) {  // a job's curves are fetched again when it has a new step
    const mark = `${job.epoch}:${job.phase}:${job.message}`;
    if (job.job === state.selected && state.epochs[job.job] !== mark) {
      state.epochs[job.job] = mark;
      drawDetail(job.job).catch(() => {});
    }
  }
}

function setLive(on) {
  $("live").className = on ? "on" : "off";
  $("live").textContent = on ? "live" : "offline";
}

async function follow() {
  const decoder = new TextDecoder();
  for (;;) {
    try {
      const answer = await api("/api/events");
      if (answer.ok && answer.body) {
        setLive(true);
        const reader = answer.body.getReader();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          let end;
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            const message = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            const data = message.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
            if (message.startsWith("event: board") && data) onBoard(JSON.parse(data));
          }
        }
      }
    } catch (error) { /* the server went away, or wants a token: try again */ }
    setLive(false);
    await new Promise((resolve) => setTimeout(resolve, 2000));
  }
}

async function stopJob(name) {
  const answer = await api(`/api/jobs/${encodeURIComponent(name)}/stop`, { method: "POST" });
  const body = await answer.json();
  showResult(answer.ok ? `stopping ${name}` : body.detail, !answer.ok);
}

function showResult(text, error) {
  $("submit-result").textContent = text;
  $("submit-result").className = error ? "error" : "";
}

$("submit-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  try {
    const answer = await api("/api/jobs", { method: "POST", body: $("job-text").value,
                                            headers: { "Content-Type": "application/yaml" } });
    const body = await answer.json();
    if (answer.ok) {
      showResult(`submitted ${body.job}`, false);
      state.selected = body.job;
    } else {
      const lines = Array.isArray(body.detail) ? body.detail.map((d) => d.msg) : [body.detail];
      showResult(lines.join("\n"), true);
    }
  } catch (error) { showResult(String(error.message || error), true); }
});

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

loadModels();
follow();
