// The page over serve's /api/ui/* answers. No framework, no CDN: served from the package.
"use strict";

const state = {
  generation: null,
  sort: "updated",
  order: "desc",
  limit: 100,
  taskId: null,
  traceId: null,
  tokenRefused: false, // said until a token is taken: the polls, still without one, would hide it
};

const $ = (selector) => document.querySelector(selector);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("data-")) node.setAttribute(key, value);
    else node[key] = value;
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

async function getJson(path) {
  const response = await fetch(path, { headers: { Accept: "application/json" } });
  if (response.status === 401 || response.status === 403) {
    // serve wants a token: Ray's dashboard way, traded once for an HttpOnly cookie.
    $("#sign-in").hidden = false;
    const refused = response.status === 403 || state.tokenRefused;
    throw new Error(refused ? "the token was refused" : "this store needs a token");
  }
  $("#sign-in").hidden = true;  // (a request sent before signing in may have shown it since)
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || `${path}: HTTP ${response.status}`);
  return body;
}

async function signIn(event) {
  event.preventDefault();
  const token = $("#sign-in-token").value.trim();
  const response = await fetch("/api/authenticate", { method: "POST", headers: { Authorization: `Bearer ${token}` } });
  $("#sign-in-token").value = "";
  state.tokenRefused = response.status === 403;
  if (!response.ok) {
    showError(new Error(state.tokenRefused ? "the token was refused" : "no token given"));
    return;
  }
  $("#sign-in").hidden = true;
  state.generation = null;
  await refresh();
}

function short(id, n = 8) {
  return id ? String(id).slice(0, n) : "";
}

function clock(ms) {
  if (ms === null || ms === undefined) return "";
  const d = new Date(ms);
  return d.toLocaleTimeString([], { hour12: false }) + "." + String(d.getMilliseconds()).padStart(3, "0");
}

function duration(ms) {
  if (ms === null || ms === undefined) return "";
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(2)} s`;
  return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
}

function badge(value) {
  return el("span", { class: `state state-${String(value || "NIL").toLowerCase()}`, text: value || "NIL" });
}

// An actor's creation task and a driver's task have no unique part of their own (all f): their
// id is the actor id (or, for a driver, the job id) after it, so that is what tells them apart.
const NIL_UNIQUE = /^(?:ff)+/;

function taskLabel(taskId, type) {
  const id = String(taskId || "");
  if (!id.startsWith("ffffffffffffffff")) return short(id, 16);
  const rest = id.replace(NIL_UNIQUE, "");
  if (type === "DRIVER_TASK") return `driver ${rest.slice(-8)}`;
  if (type === "ACTOR_CREATION_TASK") return `actor ${short(rest, 16)}`;
  return `…${short(rest, 16)}`;
}

function taskLink(taskId, attempt, type) {
  return el("a", { href: `/task/${taskId}`, class: "task-link", "data-task-id": taskId, title: taskId, text: taskLabel(taskId, type) },
    attempt ? el("small", { text: ` #${attempt}` }) : null);
}

// -- overview ---------------------------------------------------------------------------------

function renderOverview(overview) {
  const counts = $("#counts");
  counts.replaceChildren(
    ...Object.entries(overview.task_counts).sort().map(([s, n]) => el("span", {}, badge(s), ` ${n}`)),
    el("span", { text: `${overview.actors} actors` }),
  );
  const jobSelect = $("#filter-job");
  const chosen = jobSelect.value;
  jobSelect.replaceChildren(el("option", { value: "", text: "any job" }),
    ...overview.jobs.map((j) => el("option", { value: j.job_id, text: j.job_id })));
  jobSelect.value = chosen;
  $("#jobs-table tbody").replaceChildren(...overview.jobs.map((job) => el("tr", { "data-job-id": job.job_id },
    el("td", {}, el("code", { text: job.job_id })),
    el("td", {}, badge(job.status)),
    el("td", { text: job.entrypoint || "" }),
    el("td", { text: clock(job.start_time) }),
    el("td", { text: clock(job.end_time) }),
    el("td", {}, ...Object.entries(job.task_counts || {}).sort().map(([s, n]) => el("span", { class: "count" }, badge(s), ` ${n} `))),
  )));
}

async function loadTasks() {
  const params = new URLSearchParams({ sort: state.sort, order: state.order, limit: String(state.limit) });
  const q = $("#filter-q").value.trim();
  if (q) params.set("q", q);
  if ($("#filter-state").value) params.set("state", $("#filter-state").value);
  if ($("#filter-job").value) params.set("job_id", $("#filter-job").value);
  const page = await getJson(`/api/ui/tasks?${params}`);
  $("#tasks-count").textContent = `${page.rows.length} shown, ${page.matched} matching, ${page.total} stored`;
  $("#tasks-table tbody").replaceChildren(...page.rows.map((t) => el("tr", { "data-task-id": t.task_id, "data-state": t.state },
    el("td", {}, taskLink(t.task_id, t.attempt_number, t.type)),
    el("td", { class: "num", text: String(t.attempt_number) }),
    el("td", { text: t.func_or_class_name || t.name || "" }),
    el("td", {}, badge(t.state)),
    el("td", {}, el("code", { text: short(t.node_id) })),
    el("td", { text: clock(t.start_time_ms) }),
    el("td", { class: "num", text: duration(t.duration_ms) }),
    el("td", { class: "error", text: t.error_type || "" }),
  )));
  $("#more-tasks").hidden = page.matched <= page.rows.length;
  for (const th of document.querySelectorAll("#tasks-table th[data-sort]")) {
    th.classList.toggle("sorted", th.dataset.sort === state.sort);
    th.dataset.order = th.dataset.sort === state.sort ? state.order : "";
  }
}

async function loadTimeline() {
  const events = await getJson("/api/ui/timeline");
  const chart = $("#timeline-chart");
  const slices = events.filter((e) => e.ph === "X" && e.cat === "task");
  if (!slices.length) {
    chart.replaceChildren(el("p", { class: "empty", text: "no task has started yet" }));
    return;
  }
  const names = new Map();
  for (const e of events) {
    if (e.ph === "M" && e.name === "thread_name") names.set(`${e.pid}/${e.tid}`, e.args.name);
  }
  const start = Math.min(...slices.map((s) => s.ts));
  const end = Math.max(...slices.map((s) => s.ts + Math.max(s.dur, 1)));
  const span = Math.max(end - start, 1);
  const rows = new Map();
  for (const s of slices) {
    const key = `${s.pid}/${s.tid}`;
    if (!rows.has(key)) rows.set(key, []);
    rows.get(key).push(s);
  }
  chart.replaceChildren(...[...rows.entries()].map(([key, list]) => el("div", { class: "lane" },
    el("span", { class: "lane-name", text: names.get(key) || key }),
    el("div", { class: "lane-track" }, ...list.map((s) => {
      const bar = el("a", {
        class: `bar state-${String(s.args.state || "").toLowerCase()}`,
        href: `/task/${s.args.task_id}`,
        title: `${s.name} ${s.args.state} ${duration(Math.round(s.dur / 1000))}`,
        "data-task-id": s.args.task_id,
      });
      bar.style.left = `${((s.ts - start) / span) * 100}%`;
      bar.style.width = `${Math.max((s.dur / span) * 100, 0.3)}%`;
      return bar;
    })),
  )), el("div", { class: "axis" }, el("span", { text: "0" }), el("span", { text: duration(Math.round(span / 1000)) })));
}

function spanTree(spans, onlyIds) {
  const byParent = new Map();
  const ids = new Set(spans.map((s) => s.span_id));
  for (const s of spans) {
    const parent = ids.has(s.parent_span_id) ? s.parent_span_id : "";
    if (!byParent.has(parent)) byParent.set(parent, []);
    byParent.get(parent).push(s);
  }
  const origin = Math.min(...spans.map((s) => s.start_ns));
  const lines = [];
  const walk = (parent, depth) => {
    for (const s of (byParent.get(parent) || []).sort((a, b) => a.start_ns - b.start_ns)) {
      const row = el("div", { class: `span-row status-${String(s.status).toLowerCase()}` },
        el("span", { class: "indent", text: "  ".repeat(depth) }),
        el("span", { class: "kind", text: s.kind }),
        " ",
        s.task_id ? el("a", { href: `/task/${s.task_id}`, text: s.name }) : el("span", { text: s.name }),
        el("span", { class: "muted", text: ` +${duration(Math.round((s.start_ns - origin) / 1e6))} · ${duration(Math.round((s.end_ns - s.start_ns) / 1e6))}` }),
        s.status === "ERROR" ? el("span", { class: "error", text: ` ${s.status_message || "error"}` }) : null,
      );
      if (!onlyIds || onlyIds.has(s.span_id)) lines.push(row);
      walk(s.span_id, depth + 1);
    }
  };
  walk("", 0);
  return lines;
}

async function loadTraces() {
  const { traces } = await getJson("/api/ui/traces");
  $("#traces-list").replaceChildren(...traces.map((t) => el("li", {},
    el("a", { href: "#traces", "data-trace-id": t.trace_id, text: t.root || short(t.trace_id, 16),
      onclick: (event) => { event.preventDefault(); state.traceId = t.trace_id; loadTrace(); } }),
    el("small", { class: "muted", text: ` ${t.spans} spans · ${duration(Math.round((t.end_ns - t.start_ns) / 1e6))}` }),
  )));
  if (!state.traceId && traces.length) state.traceId = traces[0].trace_id;
  if (state.traceId) await loadTrace();
}

async function loadTrace() {
  const trace = await getJson(`/api/ui/traces/${state.traceId}`);
  $("#trace-tree").replaceChildren(el("div", { class: "muted", text: `trace ${trace.trace_id}` }), ...spanTree(trace.spans));
}

async function refreshOverview() {
  const overview = await getJson("/api/ui/overview");
  state.generation = overview.generation;
  renderOverview(overview);
  await Promise.all([loadTasks(), loadTimeline(), loadTraces()]);
}

// -- one task -----------------------------------------------------------------------------------

async function refreshTask() {
  let task;
  try {
    task = await getJson(`/api/ui/tasks/${state.taskId}`);
  } catch (error) {
    $("#task-title").textContent = `${state.taskId}: ${error.message}`;
    $("#task-detail").hidden = true;
    throw error;
  }
  $("#task-detail").hidden = false;
  $("#task-title").textContent = task.task_id;
  $("#attempts-table tbody").replaceChildren(...task.attempts.map((a) => el("tr", { "data-state": a.state },
    el("td", { class: "num", text: String(a.attempt_number) }),
    el("td", { text: a.func_or_class_name || a.name || "" }),
    el("td", {}, badge(a.state)),
    el("td", {}, el("code", { text: short(a.node_id) })),
    el("td", {}, el("code", { text: short(a.worker_id) })),
    el("td", { text: a.worker_pid ? String(a.worker_pid) : "" }),
    el("td", { class: "num", text: duration(a.duration_ms) }),
    el("td", { class: "error", text: a.error_type || "" }),
  )));
  const failed = task.attempts.filter((a) => a.error_type || a.error_message);
  $("#task-error-section").hidden = !failed.length;
  $("#task-error").textContent = failed.map((a) => `attempt ${a.attempt_number}: ${a.error_type || ""}\n${a.error_message || ""}`).join("\n");
  const unread = task.attempts.flatMap((a) => (a.unread_fields || []).map((name) => [a, name]));
  $("#task-fields-section").hidden = !unread.length;
  $("#task-fields tbody").replaceChildren(...unread.map(([a, name]) => el("tr", {},
    el("td", { class: "num", text: String(a.attempt_number) }),
    el("td", {}, el("code", { text: name })),
    el("td", {}, el("code", { text: JSON.stringify(a[name]) })),
  )));
  $("#task-transitions").replaceChildren(...task.transitions.map((t) => el("li", {},
    badge(t.state), ` attempt ${t.attempt} at ${clock(Math.round(t.ts_ns / 1e6))}`)));
  $("#task-logs").textContent = task.logs.length
    ? task.logs.map((l) => `${clock(Math.round(l.ts_ns / 1e6))} [${l.stream === "log" ? l.severity : l.stream}] ${l.body}`).join("\n")
    : "(no log lines stored for this task)";
  $("#task-logs").classList.toggle("empty", !task.logs.length);
  if (task.trace_id) {
    const trace = await getJson(`/api/ui/traces/${task.trace_id}`);
    // The task's own spans and what ran inside them, with the span that submitted it.
    const shown = new Set(task.spans.map((s) => s.span_id));
    for (let grew = true; grew;) {
      grew = false;
      for (const s of trace.spans) {
        if (!shown.has(s.span_id) && shown.has(s.parent_span_id)) { shown.add(s.span_id); grew = true; }
      }
    }
    for (const s of task.spans) if (s.parent_span_id) shown.add(s.parent_span_id);
    $("#task-spans").replaceChildren(
      el("div", { class: "muted", text: `trace ${task.trace_id}` }), ...spanTree(trace.spans, shown));
  } else {
    $("#task-spans").replaceChildren(el("p", { class: "empty", text: "no spans stored for this task" }));
  }
}

// -- sessions -------------------------------------------------------------------------------------

const SESSION_COOKIE = "ray_otel_events_session";

function chosenSession() {
  const found = document.cookie.split("; ").find((c) => c.startsWith(`${SESSION_COOKIE}=`));
  return found ? decodeURIComponent(found.slice(SESSION_COOKIE.length + 1)) : "";
}

// Every answer is about one session: the cookie's (set here), else the newest.
async function loadSessions() {
  const { current, newest, sessions } = await getJson("/api/sessions");
  const picker = $("#session-picker");
  const chosen = chosenSession();
  const when = (s) => new Date(s * 1000).toLocaleString([], { hour12: false });
  picker.replaceChildren(
    el("option", { value: "", text: sessions.length ? `newest (${newest})` : "no sessions yet" }),
    ...sessions.map((s) => el("option", {
      value: s.name,
      text: `${s.name} · ${s.tasks} tasks · ${when(s.last_seen)}`,
    })),
  );
  picker.value = sessions.some((s) => s.name === chosen) ? chosen : "";
  picker.dataset.current = current || "";
}

$("#session-picker").addEventListener("change", (event) => {
  const name = event.target.value;
  document.cookie = name
    ? `${SESSION_COOKIE}=${encodeURIComponent(name)}; path=/; SameSite=Lax`
    : `${SESSION_COOKIE}=; path=/; max-age=0; SameSite=Lax`;
  location.reload();
});

// -- routing and live updates -------------------------------------------------------------------

function route() {
  const match = location.pathname.match(/^\/task\/([0-9a-fA-F]+)$/);
  state.taskId = match ? match[1] : null;
  $("#overview-view").hidden = Boolean(state.taskId);
  $("#task-view").hidden = !state.taskId;
  return refresh();
}

function refresh() {
  return Promise.all([loadSessions(), state.taskId ? refreshTask() : refreshOverview()]).then(markLive, showError);
}

function markLive() {
  const live = $("#live-status");
  live.textContent = "live";
  live.className = "live ok";
}

function showError(error) {
  const live = $("#live-status");
  live.textContent = `error: ${error.message}`;
  live.className = "live broken";
}

async function poll() {
  try {
    const { generation } = await getJson("/api/ui/generation");
    markLive();
    if (generation !== state.generation) {
      state.generation = generation;
      await refresh();
    }
  } catch (error) {
    showError(error);
  }
}

document.addEventListener("click", (event) => {
  const link = event.target.closest("a");
  if (!link || link.origin !== location.origin || event.ctrlKey || event.metaKey) return;
  if (link.pathname.startsWith("/task/") || (link.pathname === "/" && !link.hash)) {
    event.preventDefault();
    history.pushState(null, "", link.pathname);
    route();
  }
});
window.addEventListener("popstate", route);

for (const th of document.querySelectorAll("#tasks-table th[data-sort]")) {
  th.addEventListener("click", () => {
    state.order = state.sort === th.dataset.sort && state.order === "desc" ? "asc" : "desc";
    state.sort = th.dataset.sort;
    loadTasks().catch(showError);
  });
}
let typing = null;
$("#filter-q").addEventListener("input", () => {
  clearTimeout(typing);
  typing = setTimeout(() => loadTasks().catch(showError), 150);
});
$("#filter-state").addEventListener("change", () => loadTasks().catch(showError));
$("#filter-job").addEventListener("change", () => loadTasks().catch(showError));
$("#task-filters").addEventListener("submit", (event) => event.preventDefault());
$("#sign-in").addEventListener("submit", (event) => signIn(event).catch(showError));
$("#more-tasks").addEventListener("click", () => {
  state.limit += 100;
  loadTasks().catch(showError);
});

route().then(() => setInterval(poll, 1000));
