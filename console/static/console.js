// The tidelog console: plain JS, no framework, nothing fetched from elsewhere.
// One page per location hash (#cluster, #topics, #topic/NAME, #records/NAME, #groups, #group/ID,
// #chaos, #chaos/NAME); the current page alone polls, at a bounded rate, and stops when left.
// Reads: the admin API (/v1/...) and the console's views (/console/api/...). Writes: the admin
// API's own endpoints with the token typed in the header, so an action is what the CLI does.
"use strict";

const POLL_MS = 2000;        // cluster, topic and group pages
const CHAOS_POLL_MS = 1000;  // a running chaos report
const MAX_POINTS = 120;      // sparkline samples kept per page (4 minutes at POLL_MS)
const MAX_TRANSACTIONS = 50;  // transactional ids the groups page describes (one request each)
let timer = null;
let generation = 0;          // bumped on every navigation: a late answer for a page left is dropped

const $ = (sel) => document.querySelector(sel);
const esc = (v) => String(v ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;",
  '"': "&quot;", "'": "&#39;"}[c]));
const num = (v) => (v === null || v === undefined ? "—" : Number(v).toLocaleString("en-US"));
const list = (v) => (v && v.length ? v.join(", ") : "—");
const enc = encodeURIComponent;

function token() { return sessionStorage.getItem("tidelog-token") || ""; }

class ApiError extends Error {
  constructor(status, body) {
    super(body && body.message ? body.message : `HTTP ${status}`);
    this.status = status; this.code = body && body.error;
  }
}

async function api(method, path, body) {
  const headers = {"Accept": "application/json"};
  if (token()) headers["Authorization"] = "Bearer " + token();
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const answer = await fetch(path, {method, headers, body: body === undefined ? undefined : JSON.stringify(body)});
  const text = await answer.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = {message: text}; }
  if (!answer.ok) throw new ApiError(answer.status, data);
  return data;
}
const get = (path) => api("GET", path);

function say(text, kind) {
  const box = $("#message");
  box.textContent = text; box.className = kind || ""; box.hidden = !text;
}
function fail(err) {
  say(err instanceof ApiError ? `${err.code || "error"}: ${err.message}` : String(err));
}

// An action: confirm, send, say what happened, redraw. Refusals (a wrong token) leave all as it was.
async function act(what, method, path, body, after) {
  try {
    const answer = await api(method, path, body);
    say(`${what}: done`, "info");
    if (after) after(answer);
    return answer;
  } catch (err) {
    fail(err);
    return null;
  }
}

function sparkline(values, label) {
  const w = 1000, h = 100, pad = 6;
  const finite = values.filter((v) => v !== null && v !== undefined);
  if (finite.length < 2) return `<div class="chart-label">${esc(label)}: collecting…</div>`;
  const max = Math.max(...finite, 1);
  const step = (w - 2 * pad) / Math.max(values.length - 1, 1);
  const pts = values.map((v, i) => `${(pad + i * step).toFixed(1)},${(h - pad - ((v || 0) / max) * (h - 2 * pad)).toFixed(1)}`);
  return `<div class="chart-label">${esc(label)}: now ${num(Math.round(finite[finite.length - 1]))}, max ${num(Math.round(max))}</div>` +
    `<svg class="chart" viewBox="0 0 ${w} ${h}" preserveAspectRatio="none">` +
    `<polyline fill="none" stroke="#0b5cad" stroke-width="2" vector-effect="non-scaling-stroke" points="${pts.join(" ")}"/></svg>`;
}

function card(label, value, bad) {
  return `<div class="card${bad ? " bad" : ""}" data-card="${esc(label)}"><div class="value">${esc(value)}</div>` +
    `<div class="label">${esc(label)}</div></div>`;
}

function poll(fn, ms) {
  const mine = generation;
  const run = async () => {
    if (mine !== generation) return;
    try { await fn(mine); } catch (err) { if (mine === generation) fail(err); }
    if (mine === generation) timer = setTimeout(run, ms);
  };
  run();
}

// ---- Cluster -----------------------------------------------------------------------------

async function pageCluster() {
  $("#page").innerHTML = `<h1>Cluster</h1><div id="cluster"></div>`;
  poll(async (mine) => {
    const [here, overview] = await Promise.all([get("/v1/cluster"), get("/console/api/overview")]);
    if (mine !== generation) return;
    const cluster = overview.active_cluster || here;  // match indexes are the active controller's
    const voters = cluster.voters.map((v) => {
      // the leader's own log holds everything committed: its match index is the commit index
      const match = v.role === "leader" ? cluster.commit_index : v.match_index;
      const lag = match === null || match === undefined ? null : Math.max(cluster.commit_index - match, 0);
      return `<tr data-controller="${v.node_id}"><td>${v.node_id}</td><td>${esc(v.role)}${v.node_id === cluster.active_controller ? " (active)" : ""}</td>` +
        `<td>${esc(v.api_address)}</td><td class="num">${num(cluster.term)}</td><td class="num">${num(match)}</td>` +
        `<td class="num">${num(lag)}</td><td>${v.connected ? "yes" : "no"}</td></tr>`;
    }).join("");
    const brokers = overview.brokers.map((b) => `<tr data-broker="${b.broker_id}"><td>${b.broker_id}</td>` +
      `<td class="state-${esc(b.lifecycle)}" data-state data-source="${esc(b.lifecycle_source)}" title="as told by the ${esc(b.lifecycle_source)}">${esc(b.lifecycle)}</td><td class="num">${num(b.broker_epoch)}</td>` +
      `<td class="num">${b.heartbeat_age_ms === null ? "—" : num(b.heartbeat_age_ms) + " ms"}</td><td>${esc(b.rack || "—")}</td>` +
      `<td class="num" data-led>${num(b.partitions_led)}</td><td class="num">${num(b.bytes_in_per_s)}</td>` +
      `<td class="num">${num(b.bytes_out_per_s)}</td><td>${esc(b.listeners.map((l) => l.host + ":" + l.port).join(" "))}</td></tr>`).join("");
    const strip = overview.history.slice(-80).map((e) => `<span class="k-${esc(e.kind)}" title="metadata offset ${e.offset}">` +
      `${esc(e.text)}</span>`).join("");
    $("#cluster").innerHTML =
      `<div class="cards">${card("active controller", cluster.active_controller ?? "none", cluster.active_controller === null)}` +
      card("controller epoch", cluster.controller_epoch) + card("Raft term", cluster.term) +
      card("metadata offset", num(cluster.metadata_offset)) +
      card("brokers running", overview.brokers.filter((b) => b.lifecycle === "RUNNING").length + " / " + overview.brokers.length,
        overview.brokers.some((b) => b.fenced)) + `</div>` +
      `<p class="muted">cluster id ${esc(cluster.cluster_id)}; page served by controller ${here.node_id}` +
      `${cluster.is_active ? "" : " (no active controller answered: match index and lag are unknown here)"}</p>` +
      `<h2>Controllers</h2><table id="controllers"><tr><th>node</th><th>Raft role</th><th>admin API</th><th class="num">term</th>` +
      `<th class="num">match index</th><th class="num">lag</th><th>connected</th></tr>${voters}</table>` +
      `<h2>Brokers</h2><table id="brokers"><tr><th>broker</th><th>state</th><th class="num">epoch</th><th class="num">heartbeat age</th>` +
      `<th>rack</th><th class="num">partitions led</th><th class="num">bytes in/s</th><th class="num">bytes out/s</th><th>listeners</th></tr>${brokers}</table>` +
      (overview.metrics_port ? "" : `<p class="muted">bytes/s: set console.broker.metrics.port on the controllers</p>`) +
      `<h2>History</h2><div class="strip" id="history">${strip || "<span>no transitions in the recent metadata log</span>"}</div>`;
  }, POLL_MS);
}

// ---- Topics ------------------------------------------------------------------------------

async function pageTopics(params) {
  const q = params.get("q") || "", page = Number(params.get("page") || 0);
  $("#page").innerHTML = `<h1>Topics</h1><div id="totals" class="cards"></div>
    <form class="inline" id="search"><label>search<input name="q" value="${esc(q)}" placeholder="name contains"></label>
    <button>Search</button></form><div id="topics"></div>
    <h2>Create a topic</h2><form class="inline" id="create"><label>name<input name="name" required></label>
    <label>partitions<input name="partitions" type="number" min="1" value="3"></label>
    <label>replication factor<input name="rf" type="number" min="1" value="3"></label><button>Create</button></form>`;
  $("#search").onsubmit = (e) => { e.preventDefault(); location.hash = `#topics?q=${enc(e.target.q.value)}`; };
  $("#create").onsubmit = (e) => {
    e.preventDefault();
    const f = e.target;
    act(`create topic ${f.name.value}`, "POST", "/v1/topics", {name: f.name.value, partitions: Number(f.partitions.value),
      replication_factor: Number(f.rf.value)}, () => { location.hash = `#topic/${enc(f.name.value)}`; });
  };
  const data = await get(`/console/api/topics?q=${enc(q)}&page=${page}`);
  const t = data.totals;
  $("#totals").innerHTML = card("topics", num(t.topics)) + card("partitions", num(t.partitions)) +
    card("offline", num(t.offline_partitions), t.offline_partitions > 0) +
    card("under-replicated", num(t.under_replicated_partitions), t.under_replicated_partitions > 0) +
    card("under min ISR", num(t.under_min_isr_partitions), t.under_min_isr_partitions > 0);
  const rows = data.topics.map((r) => `<tr data-topic="${esc(r.name)}"><td><a href="#topic/${enc(r.name)}">${esc(r.name)}</a></td>` +
    `<td class="num">${num(r.partitions)}</td><td class="num">${num(r.replication_factor)}</td>` +
    `<td class="num ${r.offline_partitions ? "bad" : ""}">${num(r.offline_partitions)}</td>` +
    `<td class="num ${r.under_replicated_partitions ? "warn" : ""}">${num(r.under_replicated_partitions)}</td>` +
    `<td class="num ${r.under_min_isr_partitions ? "bad" : ""}">${num(r.under_min_isr_partitions)}</td></tr>`).join("");
  const link = (p, label) => `<a href="#topics?q=${enc(q)}&page=${p}">${label}</a>`;
  $("#topics").innerHTML = `<table id="topic-list"><tr><th>topic</th><th class="num">partitions</th><th class="num">RF</th>` +
    `<th class="num">offline</th><th class="num">under-replicated</th><th class="num">under min ISR</th></tr>${rows}</table>` +
    `<div class="pager">${page > 0 ? link(page - 1, "‹ previous") : ""}<span>page ${page + 1} of ${data.pages} ` +
    `(${num(data.matched)} topics)</span>${page + 1 < data.pages ? link(page + 1, "next ›") : ""}</div>`;
}

async function pageTopic(name, params) {
  const page = Number(params.get("page") || 0);
  $("#page").innerHTML = `<h1>Topic <span id="topic-name">${esc(name)}</span></h1><div id="topic"></div><div id="rates"></div>
    <h2>Actions</h2>
    <form class="inline" id="alter"><label>config<input name="key" placeholder="retention.ms" required></label>
      <label>value (empty: delete)<input name="value"></label><button>Alter config</button></form>
    <form class="inline" id="grow"><label>partitions (new total)<input name="count" type="number" min="1"></label><button>Add partitions</button></form>
    <form class="inline" id="reassign"><label>partition<input name="partition" type="number" min="0" value="0"></label>
      <label>replicas (e.g. 4,5,6)<input name="replicas" required></label><button>Reassign</button></form>
    <form class="inline" id="elect"><label>election<select name="type"><option>preferred</option><option>unclean</option></select></label>
      <button>Elect leaders</button></form>
    <form class="inline" id="delete"><button class="danger">Delete topic</button></form>
    <h2>Configs</h2><div id="configs"></div>`;
  const path = `/v1/topics/${enc(name)}`;
  const redraw = () => {};
  $("#alter").onsubmit = (e) => { e.preventDefault(); const f = e.target;
    act(`alter ${f.key.value}`, "PATCH", `${path}/configs`, {configs: {[f.key.value]: f.value.value === "" ? null : f.value.value}}, redraw); };
  $("#grow").onsubmit = (e) => { e.preventDefault();
    act("add partitions", "POST", `${path}/partitions`, {count: Number(e.target.count.value)}, redraw); };
  $("#reassign").onsubmit = (e) => { e.preventDefault(); const f = e.target;
    act("reassign", "POST", "/v1/reassignments", {version: 1, partitions: [{topic: name, partition: Number(f.partition.value),
      replicas: f.replicas.value.split(",").map((s) => Number(s.trim()))}]}, redraw); };
  $("#elect").onsubmit = (e) => { e.preventDefault();
    act("elect leaders", "POST", "/v1/elections", {type: e.target.type.value, partitions: null}, redraw); };
  $("#delete").onsubmit = (e) => { e.preventDefault();
    if (confirm(`Delete topic ${name} and all its records?`)) act(`delete ${name}`, "DELETE", path, undefined, () => { location.hash = "#topics"; }); };
  const ends = [], consumed = [];  // [time ms, total] per poll: log end offsets, consumers' fetched bytes
  let configsShown = false;
  poll(async (mine) => {
    const t = await get(`/console/api/topics/${enc(name)}?page=${page}`);
    if (mine !== generation) return;
    const total = t.partitions.reduce((s, p) => s + (p.log_end_offset || 0), 0);
    ends.push([Date.now(), total]);
    if (ends.length > MAX_POINTS) ends.shift();
    const perSecond = ends.map((e, i) => (i === 0 ? null : Math.max(0, (e[1] - ends[i - 1][1]) / ((e[0] - ends[i - 1][0]) / 1000))));
    consumed.push([Date.now(), t.consumer_bytes_total]);
    if (consumed.length > MAX_POINTS) consumed.shift();
    // null where a sample is missing (no /metrics answered); 0, not negative, after a broker restart
    const bytesOut = consumed.map((e, i) => (i === 0 || e[1] === null || consumed[i - 1][1] === null ? null :
      Math.max(0, (e[1] - consumed[i - 1][1]) / ((e[0] - consumed[i - 1][0]) / 1000))));
    $("#topic").innerHTML = `<div class="cards">${card("partitions", num(t.partition_count))}${card("replication factor", t.replication_factor)}` +
      card("offline", t.offline_partitions, t.offline_partitions > 0) + card("under-replicated", t.under_replicated_partitions, t.under_replicated_partitions > 0) +
      card("under min ISR", t.under_min_isr_partitions, t.under_min_isr_partitions > 0) + card("min.insync.replicas", t.min_insync_replicas) + `</div>` +
      `<table id="partitions"><tr><th class="num">partition</th><th class="num">leader</th><th class="num">leader epoch</th><th>replicas</th>` +
      `<th>ISR</th><th>ELR</th><th>recovery</th><th class="num">log start</th><th class="num">log end</th><th class="num">size (bytes)</th><th></th></tr>` +
      t.partitions.map((p) => `<tr data-partition="${p.partition}"><td class="num">${p.partition}</td>` +
        `<td class="num ${p.leader < 0 ? "bad" : ""}">${p.leader < 0 ? "none" : p.leader}</td><td class="num">${p.leader_epoch}</td>` +
        `<td>${list(p.replicas)}</td><td class="${p.isr.length < p.replicas.length ? "warn" : ""}">${list(p.isr)}</td><td>${list(p.elr)}</td>` +
        `<td>${esc(p.leader_recovery_state)}</td><td class="num">${num(p.log_start_offset)}</td><td class="num" data-end>${num(p.log_end_offset)}</td>` +
        `<td class="num">${num(p.size_bytes)}</td><td><a href="#records/${enc(name)}?partition=${p.partition}">records</a></td></tr>`).join("") + `</table>` +
      (t.pages > 1 ? `<div class="pager" id="partition-pager">${page > 0 ? `<a href="#topic/${enc(name)}?page=${page - 1}">‹ previous</a>` : ""}` +
        `<span>partitions ${num(page * t.size)}–${num(Math.min((page + 1) * t.size, t.partition_count) - 1)} of ${num(t.partition_count)}</span>` +
        `${page + 1 < t.pages ? `<a href="#topic/${enc(name)}?page=${page + 1}">next ›</a>` : ""}</div>` : "");
    $("#rates").innerHTML = `<div id="produce-rate">${sparkline(perSecond, t.pages > 1 ?
      "records appended per second (partitions of this page)" : "records appended per second")}</div>` +
      `<div id="consume-rate" data-max="${Math.max(0, ...bytesOut.filter((v) => v !== null))}">${t.consumer_bytes_total === null ? `<div class="chart-label muted">bytes fetched by consumers ` +
        `per second: no broker /metrics answered (console.broker.metrics.port)</div>` :
        sparkline(bytesOut, "bytes fetched by consumers per second (all partitions)")}</div>`;
    if (!configsShown) {
      configsShown = true;
      $("#configs").innerHTML = t.configs_error ? `<p class="bad">${esc(t.configs_error)}</p>` :
        `<table id="config-list"><tr><th>name</th><th>value</th><th>source</th></tr>` + t.configs.map((c) =>
          `<tr><td>${esc(c.name)}</td><td>${c.sensitive ? "(sensitive)" : esc(c.value)}</td><td class="${c.source === "DYNAMIC_TOPIC_CONFIG" ? "ok" : "muted"}">${esc(c.source)}</td></tr>`).join("") + `</table>`;
    }
  }, POLL_MS);
}

// ---- Records -----------------------------------------------------------------------------

async function pageRecords(name, params) {
  const topics = await get("/console/api/topics?size=500");
  const chosen = name || (topics.topics[0] && topics.topics[0].name) || "";
  const v = (k, d) => esc(params.get(k) ?? d);
  $("#page").innerHTML = `<h1>Records</h1><form class="inline" id="browse">
    <label>topic<input name="topic" list="topic-names" value="${esc(chosen)}" required></label>
    <datalist id="topic-names">${topics.topics.map((t) => `<option value="${esc(t.name)}">`).join("")}</datalist>
    <label>partition<input name="partition" type="number" min="0" value="${v("partition", 0)}"></label>
    <label>from offset (empty: the last N)<input name="offset" type="number" min="0" value="${v("offset", "")}"></label>
    <label>or from timestamp (ms)<input name="timestamp" type="number" min="0" value="${v("timestamp", "")}"></label>
    <label>N<input name="limit" type="number" min="1" max="500" value="${v("limit", 20)}"></label>
    <label>as<select name="format">${["text", "json", "hex"].map((f) => `<option${params.get("format") === f ? " selected" : ""}>${f}</option>`).join("")}</select></label>
    <button>Read</button></form><div id="records"></div>`;
  $("#browse").onsubmit = (e) => {
    e.preventDefault();
    const f = e.target, q = new URLSearchParams();
    for (const k of ["partition", "offset", "timestamp", "limit", "format"]) if (f[k].value !== "") q.set(k, f[k].value);
    location.hash = `#records/${enc(f.topic.value)}?${q}`;
  };
  if (!name) return;
  const q = new URLSearchParams();
  for (const k of ["partition", "offset", "timestamp", "limit", "format"]) if (params.get(k)) q.set(k, params.get(k));
  const data = await get(`/console/api/topics/${enc(name)}/records?${q}`);
  const show = (s) => (s.null ? `<span class="muted">null</span>` : `<pre>${esc(s.text)}</pre>${s.truncated ? `<span class="muted">(${num(s.size)} bytes, cut)</span>` : ""}` +
    (s.json_error ? `<span class="muted">not JSON</span>` : ""));
  $("#records").innerHTML = `<p class="muted">partition ${data.partition} on leader ${data.leader}: log start ${num(data.log_start_offset)}, ` +
    `high watermark ${num(data.high_watermark)}; ${data.records.length} records from offset ${num(data.from_offset)}</p>` +
    `<table id="record-list"><tr><th class="num">offset</th><th>timestamp</th><th>key</th><th>value</th><th>headers</th><th>batch</th></tr>` +
    data.records.map((r) => `<tr data-offset="${r.offset}"><td class="num">${r.offset}</td><td>${new Date(r.timestamp).toISOString()}<br>` +
      `<span class="muted">${r.timestamp}</span></td><td>${show(r.key)}</td><td>${show(r.value)}</td>` +
      `<td>${r.headers.map((h) => `${esc(h.key)}: ${h.value.null ? "null" : esc(h.value.text)}`).join("<br>") || "—"}</td>` +
      `<td class="muted">base ${r.batch.base_offset}, ${r.batch.records} rec, ${num(r.batch.bytes)} B, ${esc(r.batch.compression)}` +
      `${r.batch.transactional ? ", transactional" : ""}, pid ${r.batch.producer_id}</td></tr>`).join("") + `</table>`;
}

// ---- Groups ------------------------------------------------------------------------------

async function pageGroups() {
  const groups = await get("/v1/groups");
  $("#page").innerHTML = `<h1>Groups</h1><table id="group-list"><tr><th>group</th><th>protocol type</th><th class="num">coordinator</th></tr>` +
    groups.map((g) => `<tr data-group="${esc(g.group_id)}"><td><a href="#group/${enc(g.group_id)}">${esc(g.group_id)}</a></td>` +
      `<td>${esc(g.protocol_type || "—")}</td><td class="num">${g.coordinator}</td></tr>`).join("") + `</table>` +
    (groups.length ? "" : `<p class="muted">no consumer groups</p>`) +
    `<h2>Transactions</h2><div id="transactions"><p class="muted">asking the coordinators…</p></div>`;
  // ListTransactions on every broker, then DescribeTransactions at each id's coordinator: the admin
  // API's own endpoints (what `tidelog transactions list` and `describe` show), the first MAX_TRANSACTIONS.
  const mine = generation;
  let listed;
  try {
    listed = await get("/v1/transactions");
  } catch (err) {  // the groups above stay: only this table says what failed
    if (mine === generation) $("#transactions").innerHTML = `<p class="bad">${esc(err.message)}</p>`;
    return;
  }
  const described = await Promise.all(listed.slice(0, MAX_TRANSACTIONS).map((t) =>
    get(`/v1/transactions/${enc(t.transactional_id)}`).catch((err) => ({...t, error: err.message}))));
  if (mine !== generation) return;
  $("#transactions").innerHTML = `<table id="transaction-list"><tr><th>transactional id</th><th>state</th>` +
    `<th class="num">producer id</th><th class="num">epoch</th><th class="num">coordinator</th><th>partitions</th>` +
    `<th>started</th><th class="num">timeout (ms)</th></tr>` +
    described.map((d) => `<tr data-transaction="${esc(d.transactional_id)}"><td>${esc(d.transactional_id)}</td>` +
      `<td data-state class="${d.state === "Ongoing" ? "warn" : ""}">${esc(d.error ? `${d.state} (${d.error})` : d.state)}</td>` +
      `<td class="num">${num(d.producer_id)}</td><td class="num">${num(d.producer_epoch)}</td>` +
      `<td class="num">${num(d.coordinator_id ?? d.coordinator)}</td>` +
      `<td>${esc((d.partitions || []).map((p) => p.topic + "-" + p.partition).join(", ") || "—")}</td>` +
      `<td data-started>${d.transaction_start_time_ms ? esc(new Date(d.transaction_start_time_ms).toISOString()) : "—"}</td>` +
      `<td class="num">${num(d.transaction_timeout_ms)}</td></tr>`).join("") + `</table>` +
    (listed.length ? "" : `<p class="muted">no transactional ids</p>`) +
    (listed.length > MAX_TRANSACTIONS ? `<p class="muted">the first ${MAX_TRANSACTIONS} of ${num(listed.length)}</p>` : "");
}

async function pageGroup(id) {
  $("#page").innerHTML = `<h1>Group <span id="group-id">${esc(id)}</span></h1><div id="group"></div><div id="lag-chart"></div>
    <h2>Reset offsets</h2><p class="muted">Only an empty group (no members); a dry run shows the new offsets first.</p>
    <form class="inline" id="reset"><label>topic<input name="topic" required></label>
      <label>to<select name="to"><option>earliest</option><option>latest</option><option>offset</option><option>timestamp</option><option>shift</option></select></label>
      <label>value<input name="value" type="number"></label><button class="secondary" name="dry">Dry run</button>
      <button name="execute">Execute</button></form><div id="plan"></div>`;
  const lags = [];
  const reset = async (execute) => {
    const f = $("#reset"), body = {topic: f.topic.value, to: f.to.value, execute};
    if (f.value.value !== "") body.value = Number(f.value.value);
    const answer = await act(execute ? "reset offsets" : "dry run", "POST", `/v1/groups/${enc(id)}/offsets`, body);
    if (answer) $("#plan").innerHTML = `<table id="reset-plan"><tr><th>topic</th><th class="num">partition</th><th class="num">committed</th><th class="num">new offset</th></tr>` +
      (answer.offsets || []).map((p) => `<tr><td>${esc(answer.topic)}</td><td class="num">${p.partition}</td>` +
        `<td class="num">${num(p.committed_offset)}</td><td class="num" data-new>${num(p.new_offset)}</td></tr>`).join("") + `</table><p class="muted">${execute ? "executed" : "dry run: nothing changed"}</p>`;
  };
  $("#reset").onsubmit = (e) => { e.preventDefault(); reset(e.submitter && e.submitter.name === "execute"); };
  poll(async (mine) => {
    const g = await get(`/v1/groups/${enc(id)}`);
    // a KIP-932 share group commits no offsets: its partitions' start offsets (SPSO) are the coordinator's
    const share = g.type === "share" ? await get(`/console/api/share-groups/${enc(id)}`) : null;
    if (mine !== generation) return;
    const total = (share ? share.partitions : g.offsets).reduce((s, o) => s + (o.lag || 0), 0);
    lags.push(total);
    if (lags.length > MAX_POINTS) lags.shift();
    const first = share ? share.partitions[0] : g.offsets[0];
    if (!$("#reset").topic.value && first) $("#reset").topic.value = first.topic;
    $("#group").innerHTML = `<div class="cards">${card("type", g.type || "classic")}${card("state", g.state)}` +
      (g.type === "classic" || !g.type ? card("protocol", g.protocol || "—") : card("group epoch", g.group_epoch)) +
      card("members", g.members.length) + card("coordinator", g.coordinator) + card("total lag", num(total), total > 0) + `</div>` +
      `<h2>Members</h2><table id="members"><tr><th>member</th><th>client id</th><th>host</th><th class="num">epoch</th><th>assignment</th></tr>` +
      g.members.map((m) => `<tr data-member="${esc(m.member_id)}"><td>${esc(m.member_id)}</td><td>${esc(m.client_id)}</td><td>${esc(m.client_host)}</td>` +
        `<td class="num">${num(m.member_epoch)}</td><td data-assignment>${esc(m.assignment.map((a) => a.topic + "-" + a.partition).join(", ") || "—")}</td></tr>`).join("") + `</table>` +
      (g.members.length ? "" : `<p class="muted">no members</p>`) + (share ?
      `<h2>Share partitions</h2><table id="share-partitions"><tr><th>topic</th><th class="num">partition</th>` +
      `<th class="num">start offset (SPSO)</th><th class="num">log end</th><th class="num">lag</th></tr>` +
      share.partitions.map((o) => `<tr data-partition="${esc(o.topic)}-${o.partition}"><td>${esc(o.topic)}</td><td class="num">${o.partition}</td>` +
        `<td class="num" data-start>${num(o.start_offset)}</td><td class="num">${num(o.log_end_offset)}</td>` +
        `<td class="num ${o.lag ? "warn" : ""}" data-lag>${num(o.lag)}</td></tr>`).join("") + `</table>` : "") + (share && !g.offsets.length ? "" :
      `<h2>Offsets</h2><table id="offsets"><tr><th>topic</th><th class="num">partition</th><th class="num">committed</th>` +
      `<th class="num">log end</th><th class="num">lag</th><th>member</th></tr>` +
      g.offsets.map((o) => `<tr data-partition="${esc(o.topic)}-${o.partition}"><td>${esc(o.topic)}</td><td class="num">${o.partition}</td>` +
        `<td class="num">${num(o.committed_offset)}</td><td class="num">${num(o.log_end_offset)}</td>` +
        `<td class="num ${o.lag ? "warn" : ""}" data-lag>${num(o.lag)}</td><td>${esc(o.member_id || "—")}</td></tr>`).join("") + `</table>`);
    $("#lag-chart").innerHTML = sparkline(lags, "total lag over the last minutes");
  }, POLL_MS * 1.5);
}

// ---- Chaos -------------------------------------------------------------------------------

async function pageChaos() {
  const data = await get("/console/api/chaos/reports");
  $("#page").innerHTML = `<h1>Chaos</h1><p class="muted">reports in ${esc(data.dir)}</p>` +
    `<table id="report-list"><tr><th>report</th><th>scenario</th><th>status</th></tr>` +
    data.reports.map((r) => `<tr data-report="${esc(r.name)}"><td><a href="#chaos/${enc(r.name)}">${esc(r.name)}</a></td>` +
      `<td>${esc(r.scenario || "—")}</td><td class="${r.passed ? "ok" : r.finished ? "bad" : "warn"}">` +
      `${r.finished ? (r.passed ? "as promised" : "expectations failed") : "running"}</td></tr>`).join("") + `</table>` +
    (data.reports.length ? "" : `<p class="muted">no reports yet: tidelog chaos run SCENARIO --report-dir ${esc(data.dir)}/NAME</p>`);
}

async function pageChaosRun(name) {
  $("#page").innerHTML = `<h1>Chaos run <span id="run-name">${esc(name)}</span></h1><div id="run"></div>`;
  let reportShown = false;
  poll(async (mine) => {
    const r = await get(`/console/api/chaos/reports/${enc(name)}`);
    if (mine !== generation) return;
    const faults = r.faults.map((f) => `<tr><td>${esc(f.id)}</td><td>${esc(f.description || "—")}</td>` +
      `<td class="num">${f.start_s === null ? (f.planned_start_s ?? "—") + " (planned)" : f.start_s.toFixed(1)}</td>` +
      `<td class="num">${f.end_s === null ? "—" : f.end_s.toFixed(1)}</td><td>${esc(f.skipped || (f.end_s !== null ? "healed" : f.start_s !== null ? "active" : "pending"))}</td></tr>`).join("");
    const verdicts = r.verdicts.map((v) => `<tr><td class="${v.ok ? "ok" : "bad"}">${v.ok ? "PASS" : "FAIL"}</td>` +
      `<td>${esc(v.expectation)}</td><td>${esc(v.detail)}</td></tr>`).join("");
    $("#run").innerHTML = `<div class="cards">${card("scenario", r.scenario || "—")}${card("phase", r.phase)}${card("t (s)", r.t)}` +
      card("writes acknowledged", num(r.acks_total)) + card("result", r.finished ? (r.passed ? "as promised" : "failed") : "running", r.finished && !r.passed) + `</div>` +
      sparkline(r.per_second.map((s) => s.acks), "acknowledgements per second") +
      sparkline(r.per_second.map((s) => s.p99_ms), "produce latency p99 (ms)") +
      `<h2>Faults</h2><table id="faults"><tr><th>id</th><th>fault</th><th class="num">start (s)</th><th class="num">end (s)</th><th>state</th></tr>${faults}</table>` +
      `<h2>Checkers</h2>` + (verdicts ? `<table id="verdicts"><tr><th></th><th>expectation</th><th>detail</th></tr>${verdicts}</table>` :
        `<p class="muted">the checkers decide when the run ends</p>`) + `<div id="report-frame"></div>`;
    if (r.finished && !reportShown) reportShown = true;
    if (reportShown) $("#report-frame").innerHTML = `<h2>Report</h2><iframe class="report" src="/console/api/chaos/reports/${enc(name)}/report.html"></iframe>`;
    if (r.finished) generation++;  // nothing more will change: stop polling
  }, CHAOS_POLL_MS);
}

// ---- routing -----------------------------------------------------------------------------

async function route() {
  generation++;
  clearTimeout(timer);
  say("");
  const [path, query] = (location.hash.slice(1) || "cluster").split("?");
  const params = new URLSearchParams(query || "");
  const [page, ...rest] = path.split("/");
  const arg = rest.length ? decodeURIComponent(rest.join("/")) : null;
  const nav = {topic: "topics", group: "groups"}[page] || page;
  document.querySelectorAll("header nav a").forEach((a) => a.classList.toggle("current", a.dataset.page === nav));
  document.body.dataset.page = page;
  const pages = {
    cluster: () => pageCluster(), topics: () => pageTopics(params), topic: () => pageTopic(arg, params),
    records: () => pageRecords(arg, params), groups: () => pageGroups(), group: () => pageGroup(arg),
    chaos: () => (arg ? pageChaosRun(arg) : pageChaos()),
  };
  try {
    await (pages[page] || (() => { throw new Error(`no page ${page}`); }))();
  } catch (err) {
    fail(err);
  } finally {
    document.body.dataset.loaded = page;
  }
}

$("#token").value = token();
$("#token").addEventListener("change", (e) => { sessionStorage.setItem("tidelog-token", e.target.value); });
window.addEventListener("hashchange", route);
route();
