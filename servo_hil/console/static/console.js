// servo-hil web console: pages fed by the daemon's WebSocket state push and its JSON API (docs/console.md).
"use strict";

const WINDOW_S = 10;                 // the plot's time window [s]
const FIELDS = ["position", "position_measured", "velocity", "torque", "current", "voltage", "temperature", "goal"];
const MODES = {0: "voltage", 1: "position", 2: "velocity", 3: "dxl_pwm", 4: "erob_pd", 5: "current", 6: "torque", 7: "dxl"};
const FAULT_BITS = {1: "open_circuit", 2: "supply_sag", 4: "encoder_noise", 8: "derated", 16: "overheat",
  32: "encoder_stuck", 64: "encoder_slip", 128: "overload", 256: "drop", 512: "corrupt", 1024: "delay", 2048: "wrong_baud"};

const $ = (sel) => document.querySelector(sel);
const el = (tag, text, cls) => { const e = document.createElement(tag); if (text !== undefined) e.textContent = text; if (cls) e.className = cls; return e; };
const fmt = (v, d = 4) => (v === null || v === undefined) ? "–" : (typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toFixed(d)) : String(v));
const faultNames = (flags) => Object.entries(FAULT_BITS).filter(([b]) => flags & Number(b)).map(([, n]) => n);

const state = { overview: null, latest: {}, buffers: {}, paused: false, plot: null, plotKeys: [], events: [], page: "overview", servo: null };

async function api(path, body) {
  const opts = body === undefined ? {} : { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
  const r = await fetch(path, opts);
  return r.json();
}

// a request under way: the previous answer's text and colour go, so nobody mistakes it for this one's
function clearMessage(sel) { $(sel).textContent = ""; $(sel).className = "message"; }

function showMessage(sel, reply, okText) {
  const m = $(sel);
  if (!reply.ok) { m.textContent = reply.error; m.className = "message error"; return false; }
  if (reply.error) { m.textContent = `servo error ${reply.error}: ${reply.error_text}`; m.className = "message error"; return false; }
  // accepted, while the reply's error byte flags a hardware error (the Alert bit, Protocol 1.0's or Feetech's bits)
  m.textContent = reply.alert && reply.status_text ? `${okText}; the servo reports ${reply.status_text}` : okText;
  m.className = "message ok"; return true;
}

// ------------------------------------------------------------------ navigation
document.querySelectorAll("nav button").forEach((b) => b.addEventListener("click", () => showPage(b.dataset.page)));
function showPage(page) {
  state.page = page;
  document.querySelectorAll("nav button").forEach((b) => b.classList.toggle("active", b.dataset.page === page));
  document.querySelectorAll(".page").forEach((p) => p.classList.toggle("active", p.id === `page-${page}`));
  if (page === "servo") loadServo();
  if (page === "faults") loadFaults();
  if (page === "params") loadParams();
  if (page === "record") loadRecordings();
  if (page === "bus") loadBus();
  if (page === "plot" && state.plot) state.plot.setSize(plotSize());
  window.dispatchEvent(new CustomEvent("console-page", { detail: page }));
}

// ------------------------------------------------------------------ overview
async function loadOverview() {
  const o = await api("/api/overview");
  state.overview = o;
  $("#rig-name").textContent = o.rig;
  const buses = $("#bus-table tbody"); buses.replaceChildren();
  for (const b of o.buses) {
    const tr = el("tr");
    for (const v of [b.name, b.protocol, b.path, b.baud, b.ids.join(", "), b.joints.join(", ")]) tr.append(el("td", fmt(v)));
    buses.append(tr);
  }
  const acts = $("#actuator-table tbody"); acts.replaceChildren();
  for (const a of o.actuators) {
    const tr = el("tr"); tr.id = `act-${a.joint}`; tr.dataset.joint = a.joint;
    tr.append(el("td", a.joint), el("td", a.catalog || "inline"), el("td", a.bus ? `${a.bus} / ${a.id}` : "–"));
    for (const k of ["mode", "enable", "position", "velocity", "temperature", "faults"]) { const td = el("td", "", "num"); td.dataset.key = k; tr.append(td); }
    acts.append(tr);
  }
  for (const sel of ["#servo-select", "#fault-actuator", "#param-actuator", "#robot-hand .hand-joint"]) {
    const s = $(sel); s.replaceChildren();
    for (const a of o.actuators) s.append(new Option(a.joint, a.joint));
  }
  buildPlotChoices(o.actuators.map((a) => a.joint));
  $("#robot-tab").hidden = !o.robot;
  renderLoop(o.status);
}

function renderLoop(st) {
  if (!st) return;
  const rows = [["rig", st.rig], ["rate [Hz]", st.rate_hz], ["tick", st.tick], ["scheduling", st.rt_mode],
    ["overruns", st.overruns], ["lateness p50 [µs]", st.lateness_p50_us], ["lateness p99 [µs]", st.lateness_p99_us],
    ["lateness max [µs]", st.lateness_max_us], ["steal [%]", st.steal_fraction === undefined ? null : 100 * st.steal_fraction]];
  const tb = $("#loop-table tbody"); tb.replaceChildren();
  for (const [k, v] of rows) { const tr = el("tr"); tr.append(el("th", k), el("td", fmt(v, 2), "num")); tb.append(tr); }
}

function renderActuators() {
  for (const [joint, s] of Object.entries(state.latest)) {
    const tr = document.getElementById(`act-${joint}`);
    if (!tr) continue;
    const faults = faultNames(s.fault_flags || 0);
    const values = { mode: MODES[s.mode] || s.mode, enable: s.enable ? "on" : "off", position: fmt(s.position),
      velocity: fmt(s.velocity), temperature: fmt(s.temperature, 1), faults: faults.join(", ") || "none" };
    tr.querySelectorAll("td[data-key]").forEach((td) => { td.textContent = values[td.dataset.key]; td.classList.toggle("fault", td.dataset.key === "faults" && faults.length > 0); });
  }
}

// ------------------------------------------------------------------ live state over the WebSocket
function connect() {
  const ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`);
  ws.onopen = () => { $("#link").textContent = "live"; $("#link").className = "link-up"; };
  ws.onclose = () => { $("#link").textContent = "disconnected"; $("#link").className = "link-down"; setTimeout(connect, 1000); };
  ws.onmessage = (m) => {
    const msg = JSON.parse(m.data);
    if (msg.type === "state") onState(msg);
    else if (msg.type === "event") addEvent(msg.event);
    else if (msg.type === "hello") { state.events = []; $("#event-log").replaceChildren(); msg.events.forEach(addEvent); }
  };
}

function onState(msg) {
  Object.assign(state.latest, msg.latest);
  if (msg.poses) window.dispatchEvent(new CustomEvent("console-poses", { detail: msg.poses }));
  for (const [joint, cols] of Object.entries(msg.series)) {
    const buf = state.buffers[joint] || (state.buffers[joint] = { t: [], ...Object.fromEntries(FIELDS.map((f) => [f, []])) });
    for (const k of ["t", ...FIELDS]) buf[k].push(...cols[k]);
    const tEnd = buf.t[buf.t.length - 1];
    let cut = 0;
    while (cut < buf.t.length && buf.t[cut] < tEnd - WINDOW_S) cut++;
    if (cut) for (const k of ["t", ...FIELDS]) buf[k].splice(0, cut);
  }
  if (state.page === "overview") { renderActuators(); renderLoop(msg.stats); }
  if (state.page === "servo" || state.page === "robot") document.querySelectorAll(".hand-bar").forEach(renderHand);
  // the grid's live values: at most 5 reads a second (each reads the table as a Read packet would)
  if (state.page === "servo" && $("#servo-live").checked && !state.servoBusy && performance.now() - (state.servoRead || 0) > 200) {
    state.servoRead = performance.now();
    loadServo(true);
  }
}

// ------------------------------------------------------------------ servo: control table, torque, goal
async function loadServo(quiet) {
  const joint = $("#servo-select").value;
  const actuator = state.overview.actuators.find((a) => a.joint === joint);
  if (actuator && !actuator.table) return showLawControls(joint);
  state.servoBusy = true;
  try {
    const t = await api(`/api/servo/${encodeURIComponent(joint)}`);
    if (!t.ok) { showMessage("#servo-message", t); return; }
    state.servo = t;
    // a serial servo (Dynamixel 2.0 or 1.0, Feetech) names its hardware error and the bits set
    $("#servo-model").textContent = t.kind === "erob" ? `${t.model}, node ${t.id}, error code ${fmt(t.hardware_error)}`
      : `${t.model}, ID ${t.id}, ${t.hardware_label} ${t.hardware_error}${t.status_text ? ` (${t.status_text})` : ""}`;
    $("#servo-model").dataset.kind = t.kind;
    $("#torque-toggle").textContent = t.torque ? "Torque off" : "Torque on";
    $("#goal-label").textContent = `${t.goal_item} [${t.kind === "erob" ? "object unit" : "register"}]`;
    $("#factory-reset").hidden = t.kind === "erob"; $("#reboot").hidden = false;
    const tb = $("#register-table tbody");
    if (tb.children.length !== t.rows.length || tb.dataset.joint !== joint) {
      tb.replaceChildren(); tb.dataset.joint = joint;
      for (const r of t.rows) {
        const tr = el("tr", undefined, r.area === "EEPROM" ? "eeprom" : ""); tr.dataset.name = r.name;
        tr.append(el("td", r.name), el("td", r.address, "num"), el("td", r.size, "num"), el("td", r.area), el("td", r.access),
          el("td", r.unit), el("td", `${r.min}..${r.max}`), el("td", "", "num value"), el("td", "", "num si"));
        const td = el("td");
        if (r.writable) {
          const input = el("input", undefined, "write"); input.type = "number"; input.step = "any"; input.dataset.name = r.name;
          input.addEventListener("keydown", (e) => { if (e.key === "Enter") writeItem(r.name, input.value); });
          td.append(input);
        }
        tr.append(td); tb.append(tr);
      }
    }
    t.rows.forEach((r, k) => {
      const tr = tb.children[k];
      tr.querySelector(".value").textContent = fmt(r.value);
      tr.querySelector(".si").textContent = r.si === null ? "" : fmt(r.si, 4);
    });
  } finally { state.servoBusy = false; }
}

async function writeItem(name, value) {
  const joint = $("#servo-select").value;
  clearMessage("#servo-message");
  const reply = await api(`/api/servo/${encodeURIComponent(joint)}/write`, { name, value: Number(value) });
  showMessage("#servo-message", reply, `${name} = ${value} written`);
  loadServo(true);
}

$("#servo-select").addEventListener("change", () => loadServo());
$("#torque-toggle").addEventListener("click", async () => {
  const t = state.servo;
  if (!t) return;
  if (t.kind === "law") {   // not on a bus: the daemon's set_enable
    return showMessage("#servo-message", await api("/api/command", { cmd: "set_enable", actuator: t.joint, value: !t.torque }), "torque switched");
  }
  if (t.kind !== "erob") return writeItem(t.torque_item, t.torque ? 0 : 1);
  // CiA 402 controlword: shutdown (6), switch on (7), enable operation (15); disable operation (7)
  const cw = t.rows.find((r) => r.address === "0x6040:00").name;
  for (const v of t.torque ? [7] : [6, 7, 15]) await writeItem(cw, v);
});
$("#goal-send").addEventListener("click", async () => {
  const t = state.servo;
  if (!t) return;
  if (t.kind !== "law") return writeItem(t.goal_item, $("#goal-input").value);
  showMessage("#servo-message", await api("/api/command", { cmd: "set_goal", actuator: t.joint, value: Number($("#goal-input").value) }), "goal sent");
});

// an actuator on no bus: torque and goal through the daemon's commands, in the firmware law's unit
const LAW_UNITS = { voltage: "V", position: "gear·rad", velocity: "rad/s", dxl_pwm: "rad", erob_pd: "rad", current: "A", torque: "N·m", dxl: "rad" };
function showLawControls(joint) {
  const s = state.latest[joint] || {};
  const mode = MODES[s.mode] || s.mode;
  state.servo = { kind: "law", joint, torque: s.enable ? 1 : 0 };
  $("#servo-model").textContent = `${joint}: no control table (not on a bus); firmware law ${mode}`;
  $("#torque-toggle").textContent = s.enable ? "Torque off" : "Torque on";
  $("#goal-label").textContent = `goal [${LAW_UNITS[mode] || "law unit"}]`;
  $("#factory-reset").hidden = true; $("#reboot").hidden = true;
  const tb = $("#register-table tbody"); tb.replaceChildren(); tb.dataset.joint = joint;
}
for (const action of ["reboot", "factory-reset"]) {
  $(`#${action}`).addEventListener("click", async () => {
    clearMessage("#servo-message");
    const reply = await api(`/api/servo/${encodeURIComponent($("#servo-select").value)}/${action.replace("-", "_")}`, {});
    showMessage("#servo-message", reply, `${action} done`); loadServo(true);
  });
}

// ------------------------------------------------------------------ a hand on a joint (the daemon's `hand` command)
// A spring toward a setpoint that moves at `speed` to the target: a torque-off joint follows, a holding one
// resists (docs/commands.md). The slider sends on release; the box takes degrees or rad.
function handBar(bar, jointOf, messageSel) {
  const joint = bar.id === "robot-hand" ? el("select", undefined, "hand-joint") : null;
  const slider = el("input", undefined, "hand-slider"); slider.type = "range"; slider.min = -180; slider.max = 180; slider.step = 1; slider.value = 0;
  const box = el("input", undefined, "hand-target"); box.type = "number"; box.step = "any"; box.value = 0;
  const unit = el("select", undefined, "hand-unit"); unit.append(new Option("°", "deg"), new Option("rad", "rad"));
  const speed = el("input", undefined, "hand-speed"); speed.type = "number"; speed.step = "any"; speed.min = 0; speed.value = 1;
  const drag = el("button", "Drag to target", "hand-drag"); const release = el("button", "Release", "hand-release");
  const shown = el("span", "no hand", "hand-state");
  const toRad = (v) => unit.value === "deg" ? v * Math.PI / 180 : v;
  const send = async (body, okText) => showMessage(messageSel, await api("/api/command", { cmd: "hand", actuator: jointOf(), ...body }), okText);
  const dragTo = () => send({ target: toRad(Number(box.value)), speed: Number(speed.value) }, `hand dragging ${jointOf()}`);
  slider.addEventListener("input", () => { box.value = unit.value === "deg" ? slider.value : (slider.value * Math.PI / 180).toFixed(3); });
  slider.addEventListener("change", dragTo);
  box.addEventListener("input", () => { slider.value = unit.value === "deg" ? box.value : Number(box.value) * 180 / Math.PI; });
  box.addEventListener("keydown", (e) => { if (e.key === "Enter") dragTo(); });
  drag.addEventListener("click", dragTo);
  release.addEventListener("click", () => send({ release: true }, `hand released ${jointOf()}`));
  const label = (text, input) => { const l = el("label", `${text} `); l.append(input); return l; };
  bar.append(el("strong", "hand"), ...(joint ? [label("joint", joint)] : []), slider, label("target", box), unit,
    label("speed [rad/s]", speed), drag, release, shown);
}
function renderHand(bar) {
  const joint = bar.id === "robot-hand" ? bar.querySelector(".hand-joint").value : $("#servo-select").value;
  const s = state.latest[joint];
  if (!s) return;
  const h = s.hand;
  bar.querySelector(".hand-state").textContent = h
    ? `hand on ${joint}: toward ${h.path.map((x) => fmt(x, 3)).join(" → ")} rad at ${fmt(h.speed, 2)} rad/s; joint at ${fmt(s.position, 3)} rad`
    : `no hand on ${joint}; joint at ${fmt(s.position, 3)} rad`;
  bar.dataset.held = h ? "1" : "0";
}
handBar($("#servo-hand"), () => $("#servo-select").value, "#servo-message");
handBar($("#robot-hand"), () => $("#robot-hand .hand-joint").value, "#robot-message");

// ------------------------------------------------------------------ plot (uPlot)
function buildPlotChoices(joints) {
  const box = $("#plot-choices"); box.replaceChildren();
  joints.forEach((j, n) => FIELDS.forEach((f) => {
    const label = el("label"); const c = el("input"); c.type = "checkbox"; c.value = `${j}.${f}`;
    c.checked = n === 0 && (f === "position" || f === "goal");
    c.addEventListener("change", makePlot);
    label.append(c, ` ${j}.${f}`); box.append(label);
  }));
  makePlot();
}

const plotSize = () => ({ width: Math.max(400, window.innerWidth - 60), height: Math.max(300, window.innerHeight - 200) });

function makePlot() {
  state.plotKeys = [...document.querySelectorAll("#plot-choices input:checked")].map((c) => c.value);
  if (state.plot) state.plot.destroy();
  const colors = ["#1e88e5", "#e53935", "#43a047", "#fb8c00", "#8e24aa", "#00897b", "#6d4c41", "#3949ab"];
  const opts = { ...plotSize(), title: "live state (10 s)", scales: { x: { time: false } },
    axes: [{ label: "t [s]" }, {}],
    series: [{ label: "t [s]" }, ...state.plotKeys.map((k, i) => ({ label: k, stroke: colors[i % colors.length], width: 1.5 }))],
    hooks: { setSelect: [() => { state.paused = true; $("#plot-pause").textContent = "Resume"; }] } };
  state.plot = new uPlot(opts, plotData(), $("#plot"));
  state.plot.root.addEventListener("dblclick", () => { state.paused = false; $("#plot-pause").textContent = "Pause"; });
}

function plotData() {
  const keys = state.plotKeys;
  const first = keys.length ? state.buffers[keys[0].split(".")[0]] : null;
  if (!first) return [[], ...keys.map(() => [])];
  let n = first.t.length;
  for (const k of keys) { const b = state.buffers[k.split(".")[0]]; n = Math.min(n, b ? b.t.length : 0); }
  const x = first.t.slice(first.t.length - n);
  return [x, ...keys.map((k) => { const [j, f] = k.split("."); const b = state.buffers[j][f]; return b.slice(b.length - n); })];
}

function drawPlot() {
  if (state.page === "plot" && state.plot && !state.paused) { state.plot.setData(plotData()); state.frames++; }
  requestAnimationFrame(drawPlot);
}
state.frames = 0;
// read by the browser tests: the plotted data's newest value of a series, its time span [s], frames drawn
window.consolePlotLast = (key) => { const i = state.plotKeys.indexOf(key); const s = i < 0 ? [] : state.plot.data[i + 1]; return s.length ? s[s.length - 1] : null; };
window.consolePlotSpan = () => { const x = state.plot.data[0]; return x.length ? x[x.length - 1] - x[0] : 0; };
window.consoleFrames = () => state.frames;

$("#plot-pause").addEventListener("click", () => {
  state.paused = !state.paused; $("#plot-pause").textContent = state.paused ? "Resume" : "Pause";
});
$("#plot-csv").addEventListener("click", () => {
  const data = state.plot.data;
  const lines = [["t", ...state.plotKeys].join(",")];
  for (let i = 0; i < data[0].length; i++) lines.push(data.map((s) => s[i]).join(","));
  download(new Blob([lines.join("\n") + "\n"], { type: "text/csv" }), "servo-hil-plot.csv");
});
$("#plot-png").addEventListener("click", () => state.plot.ctx.canvas.toBlob((b) => download(b, "servo-hil-plot.png")));
function download(blob, name) {
  const a = el("a"); a.href = URL.createObjectURL(blob); a.download = name; document.body.append(a); a.click(); a.remove();
}

// ------------------------------------------------------------------ faults and events
async function loadFaults() {
  const f = await api("/api/faults");
  const tb = $("#fault-table tbody"); tb.replaceChildren();
  for (const c of f.catalog) {
    const tr = el("tr"); tr.dataset.fault = c.fault;
    const args = el("td");
    for (const [name, unit] of c.args) {
      const input = el("input", undefined, "write"); input.dataset.arg = name; input.placeholder = `${name} [${unit}]`; input.title = `${name} [${unit}]`;
      args.append(input);
    }
    const inject = el("button", "Inject"); inject.className = "inject";
    inject.addEventListener("click", () => sendFault("inject_fault", c.fault, tr));
    const clear = el("button", "Clear"); clear.addEventListener("click", () => sendFault("clear_fault", c.fault, tr));
    const td1 = el("td"); td1.append(inject); const td2 = el("td"); td2.append(clear);
    tr.append(el("td", c.fault), el("td", c.kind), args, td1, td2); tb.append(tr);
  }
}

async function sendFault(cmd, fault, tr) {
  clearMessage("#fault-message");
  const body = { cmd, actuator: $("#fault-actuator").value, fault };
  if (cmd === "inject_fault") {
    body.args = {};
    tr.querySelectorAll("input").forEach((i) => { if (i.value !== "") body.args[i.dataset.arg] = Number(i.value); });
  }
  showMessage("#fault-message", await api("/api/command", body), `${cmd} ${fault} sent`);
}
// the daemon's clear_fault names one fault: Clear all sends one for each fault injected into the actuator
$("#fault-clear-all").addEventListener("click", async () => {
  const joint = $("#fault-actuator").value;
  clearMessage("#fault-message");
  const faults = await api("/api/faults");
  if (!faults.ok) return showMessage("#fault-message", faults);
  const active = Object.keys(faults.active[joint] || {});
  for (const fault of active) {
    if (!showMessage("#fault-message", await api("/api/command", { cmd: "clear_fault", actuator: joint, fault }), "")) return;
  }
  showMessage("#fault-message", { ok: true }, active.length ? `cleared on ${joint}: ${active.join(", ")}` : `no fault injected into ${joint}`);
});

function addEvent(ev) {
  const when = ev.t_wall ? new Date(ev.t_wall * 1000).toISOString().slice(11, 23) : "";
  const rest = Object.entries(ev).filter(([k]) => !["type", "actuator", "t_wall"].includes(k)).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(" ");
  const li = el("li", `${when} ${ev.type} ${ev.actuator || ""} ${rest}`); li.dataset.type = ev.type;
  $("#event-log").prepend(li);
}

// ------------------------------------------------------------------ parameters
async function loadParams() {
  const joint = $("#param-actuator").value;
  const seq = state.paramSeq = (state.paramSeq || 0) + 1;
  const p = await api(`/api/params/${encodeURIComponent(joint)}`);
  if (seq !== state.paramSeq) return;   // a newer load is under way: an older answer must not overwrite it
  const tb = $("#param-table tbody");
  // what the user has typed survives a reload of the same actuator's table
  const typed = tb.dataset.joint === joint
    ? Object.fromEntries([...tb.querySelectorAll("tr")].map((tr) => [tr.dataset.param, tr.querySelector("input").value])) : {};
  tb.replaceChildren(); tb.dataset.joint = joint;
  for (const r of p.params) {
    const tr = el("tr"); tr.dataset.param = r.name; tr.title = r.doc;
    const input = el("input", undefined, "write"); input.type = "number"; input.step = "any"; input.min = r.min; input.max = r.max;
    if (typed[r.name]) input.value = typed[r.name];
    const set = el("button", "Set", "set"); set.addEventListener("click", () => setParam(r.name, Number(input.value)));
    const reset = el("button", "Reset", "reset"); reset.addEventListener("click", () => setParam(r.name, r.configured));
    const tdI = el("td"); tdI.append(input, set); const tdR = el("td"); tdR.append(reset);
    tr.append(el("td", r.name), el("td", fmt(r.value, 6), "num"), el("td", r.unit), el("td", `${r.min}..${r.max}`), el("td", fmt(r.configured, 6), "num"), tdI, tdR);
    tb.append(tr);
  }
}
async function setParam(name, value) {
  const reply = await api("/api/command", { cmd: "set_param", actuator: $("#param-actuator").value, name, value });
  if (showMessage("#param-message", reply, `${name} = ${value}`)) loadParams();
}
$("#param-actuator").addEventListener("change", loadParams);

// ------------------------------------------------------------------ recording
function renderRecordings(r) {
  $("#record-state").textContent = r.recording ? `recording to ${r.dir}` : "not recording";
  const tb = $("#record-table tbody"); tb.replaceChildren();
  for (const f of r.files) {
    const tr = el("tr"); const a = el("a", f.name); a.href = `/api/record/file/${encodeURIComponent(f.name)}`;
    const td = el("td"); td.append(a); tr.append(td, el("td", f.bytes, "num"), foxgloveCell(a.href)); tb.append(tr);
  }
}
// Foxglove opens a remote MCAP by URL (it reads it with Range requests; the file route answers with CORS)
const FOXGLOVE_APP = "https://app.foxglove.dev/";
function foxgloveCell(fileUrl) {
  const token = new URLSearchParams(location.search).get("token");   // Foxglove cannot send the console's cookie
  const url = token ? `${fileUrl}?token=${encodeURIComponent(token)}` : fileUrl;
  const a = el("a", "Open in Foxglove", "foxglove");
  a.href = `${FOXGLOVE_APP}?ds=remote-file&ds.url=${encodeURIComponent(url)}`; a.target = "_blank"; a.rel = "noopener";
  const td = el("td"); td.append(a); return td;
}
async function loadRecordings() { renderRecordings(await api("/api/record")); }
$("#record-start").addEventListener("click", async () => renderRecordings(await api("/api/record/start", {})));
$("#record-stop").addEventListener("click", async () => renderRecordings(await api("/api/record/stop", {})));

// ------------------------------------------------------------------ bus monitor
async function loadBus() {
  const b = await api("/api/bus");
  const tb = $("#busmon-table tbody"); tb.replaceChildren();
  for (const bus of b.buses) {
    const tr = el("tr");
    tr.dataset.bus = bus.name;
    tr.append(el("td", bus.name), el("td", bus.protocol), el("td", fmt(bus.packets), "num packets"),
      el("td", bus.packets_per_s === undefined ? "–" : bus.packets_per_s.toFixed(1), "num pps"),
      el("td", bus.errors_isolated, "num"),
      el("td", Object.entries(bus.wire).map(([k, v]) => `${k} ${fmt(v, 2)}`).join(", ") || "–"));
    tb.append(tr);
  }
  const box = $("#busmon-last"); box.replaceChildren();
  for (const bus of b.buses) {
    if (!bus.last) continue;
    box.append(el("h2", `${bus.name}: last packets`));
    const t = el("table"); t.dataset.bus = bus.name;
    const head = el("tr"); for (const h of ["age [s]", ...bus.columns.map(([, h]) => h)]) head.append(el("th", h));
    t.append(head);
    for (const p of bus.last) {
      const tr = el("tr"); tr.append(el("td", p.age_s.toFixed(3), "num"));
      for (const [k] of bus.columns) tr.append(el("td", fmt(p[k]), k));
      t.append(tr);
    }
    box.append(t);
  }
  if (state.page === "bus") setTimeout(loadBus, 1000);
}

loadOverview().then(() => { connect(); requestAnimationFrame(drawPlot); });
