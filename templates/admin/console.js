// The operator console: plain JavaScript over the /admin API (see docs/console.md).
// Every text from the server goes into the page through textContent, never as HTML.
"use strict";
(() => {
  const TOKEN_KEY = "herald.adminToken";
  const RETRY_STREAM_MS = 5000;
  const CHART_REFRESH_MS = 30000;
  const REMOVABLE_STATES = ["waiting", "delayed", "paused", "completed", "failed"];
  const CLEANABLE_STATES = ["completed", "failed", "delayed"];
  const QUEUE_FIELDS = ["waiting", "active", "delayed", "paused", "completed", "failed",
                        "failed_24h", "concurrency"];
  const QUEUE_ACTIONS = {
    retry: { title: "Retry every failed job", text: "Every failed job of QUEUE goes back to waiting." },
    pause: { title: "Pause the queue", text: "Workers stop taking jobs from QUEUE until it is resumed." },
    resume: { title: "Resume the queue", text: "Workers take jobs from QUEUE again." },
    remove: { title: "Remove jobs", text: "Every job of QUEUE in the chosen state is deleted.",
              states: REMOVABLE_STATES },
    drain: { title: "Drain the queue", text: "Every waiting and delayed job of QUEUE is deleted." },
    clean: { title: "Clean finished jobs", text: "Jobs of QUEUE in the chosen state, older than the grace period, are deleted.",
             states: CLEANABLE_STATES, grace: true },
    obliterate: { title: "Obliterate the queue", text: "Every job and every record of QUEUE is deleted. This cannot be undone." },
  };
  const WEBHOOK_RETRY = { title: "Send the message again",
                          text: "Message JOB goes back to pending and is sent to its endpoint now." };
  const WEBHOOK_COUNTS = ["pending", "retrying", "failed", "delivered"];
  const JOB_ACTIONS = {
    retry: { title: "Retry the job", text: "Job JOB of QUEUE goes back to waiting." },
    remove: { title: "Remove the job", text: "Job JOB of QUEUE is deleted." },
  };

  const $ = (id) => document.getElementById(id);
  const view = {
    token: null,
    latest: new Map(),     // queue name -> its row in the latest sample
    selected: null,        // the queue whose panel is open
    jobsPage: 1, jobsPages: 1,
    auditPage: 1,
    chartAt: 0,
    job: null,             // { queue, id } of the job dialog
    endpoint: null,        // the webhook endpoint whose failed messages are shown
    stream: null,          // AbortController of the live stream
  };

  class ApiError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  // ---------------------------------------------------------------- small helpers
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "className") node.className = value;
      else if (key === "dataset") Object.assign(node.dataset, value);
      else node.setAttribute(key, value);
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function when(iso) {
    if (!iso) return "";
    const date = new Date(iso);
    return Number.isNaN(date.getTime()) ? String(iso) : date.toLocaleString();
  }

  function say(text, isError) {
    const notice = $("notice");
    notice.textContent = text;
    notice.classList.toggle("error", Boolean(isError));
  }

  function pretty(value) {
    if (value === null || value === undefined) return "";
    if (typeof value === "string") {
      try { return JSON.stringify(JSON.parse(value), null, 2); } catch (_) { return value; }
    }
    return JSON.stringify(value, null, 2);
  }

  function delay(ms, signal) {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
    });
  }

  // ---------------------------------------------------------------- the API
  async function request(path, token, options) {
    const init = Object.assign({ cache: "no-store" }, options || {});
    init.headers = Object.assign({ Accept: "application/json", Authorization: "Bearer " + token },
                                 init.headers || {});
    return fetch(path, init);
  }

  async function api(path, options) {
    const response = await request(path, view.token, options);
    let body = null;
    if ((response.headers.get("content-type") || "").includes("json")) body = await response.json();
    if (response.status === 401) {
      signOut("The token was refused: sign in again.");
      throw new ApiError(401, "signed out");
    }
    if (!response.ok) {
      const message = body && body.error ? body.error.message : response.statusText;
      throw new ApiError(response.status, message || "HTTP " + response.status);
    }
    return body;
  }

  const queuePath = (name) => "/admin/health/queues/" + encodeURIComponent(name);
  const jobPath = (name, id) => queuePath(name) + "/jobs/" + encodeURIComponent(id);
  const endpointPath = (id) => "/admin/webhooks/" + encodeURIComponent(id);

  // ---------------------------------------------------------------- signing in and out
  async function signIn(token, remembered) {
    const error = $("sign-in-error");
    error.textContent = "";
    let response;
    try {
      response = await request("/admin/health/queues", token);
    } catch (_) {
      error.textContent = "The server did not answer.";
      return;
    }
    if (!response.ok) {
      if (remembered) sessionStorage.removeItem(TOKEN_KEY);
      error.textContent = response.status === 401 ? "That token was refused."
        : "The server answered " + response.status + ".";
      return;
    }
    view.token = token;
    sessionStorage.setItem(TOKEN_KEY, token);
    $("token").value = "";
    $("sign-in").hidden = true;
    $("console").hidden = false;
    $("session").hidden = false;
    applySample(await response.json());
    startStream();
    loadAudit();
    loadWebhooks();
  }

  function signOut(message) {
    sessionStorage.removeItem(TOKEN_KEY);
    if (view.stream) view.stream.abort();
    // a reload drops every row, chart and job the page had read
    if (message) sessionStorage.setItem("herald.signOutReason", message);
    window.location.reload();
  }

  // ---------------------------------------------------------------- the queue table
  function backlog(row) { return row.waiting + row.delayed + row.paused; }

  // Red when the backlog grew between the last two samples by more than the registry
  // concurrency drains; amber when failures happened in the last 24 hours.
  function health(row, before) {
    const growth = before ? backlog(row) - backlog(before) : 0;
    if (growth > row.concurrency) {
      return ["red", "backlog growing", "backlog +" + growth + " since the last sample; concurrency " + row.concurrency];
    }
    if (row.failed_24h > 0) return ["amber", "recent failures", row.failed_24h + " failed in the last 24 hours"];
    return ["ok", "ok", "no recent failures, backlog not growing"];
  }

  function rateLimit(limit) {
    return limit ? limit.max + " / " + limit.per_s + " s" : "none";
  }

  function queueRow(name) {
    const tbody = document.querySelector("#queues tbody");
    const existing = tbody.querySelector("tr[data-queue=\"" + CSS.escape(name) + "\"]");
    if (existing) return existing;
    const open = el("button", { type: "button", className: "link" }, name);
    open.addEventListener("click", () => selectQueue(name));
    const row = el("tr", { dataset: { queue: name } },
      el("th", { scope: "row" }, open, " ", el("span", { className: "tag", dataset: { field: "is_paused" } })),
      el("td", { dataset: { field: "health" } }, el("span", { className: "badge" })));
    for (const field of QUEUE_FIELDS) row.append(el("td", { className: "num", dataset: { field } }));
    row.append(el("td", { dataset: { field: "rate_limit" } }));
    tbody.append(row);
    return row;
  }

  function renderQueue(row, before) {
    const tr = queueRow(row.name);
    for (const field of QUEUE_FIELDS) tr.querySelector("[data-field=\"" + field + "\"]").textContent = String(row[field]);
    tr.querySelector("[data-field=rate_limit]").textContent = rateLimit(row.rate_limit);
    tr.querySelector("[data-field=is_paused]").textContent = row.is_paused ? "paused" : "";
    const [level, label, why] = health(row, before);
    const badge = tr.querySelector(".badge");
    badge.className = "badge " + level;
    badge.textContent = label;
    badge.title = why;
    tr.classList.toggle("selected", row.name === view.selected);
  }

  function applySample(sample) {
    for (const row of sample.queues) {
      const before = view.latest.get(row.name);
      view.latest.set(row.name, row);
      renderQueue(row, before);
      if (row.name === view.selected) followSelected(row, before);
    }
    if (sample.generated_at) $("live").textContent = "live · " + when(sample.generated_at);
  }

  // The open queue's job list and chart follow the stream: the list is read again when
  // the count of the state it shows changed.
  function followSelected(row, before) {
    const state = $("job-state").value;
    if (before && before[state] !== row[state]) loadJobs();
    if (Date.now() - view.chartAt > CHART_REFRESH_MS) loadChart();
  }

  // ---------------------------------------------------------------- the live stream
  // EventSource cannot send a bearer header: the stream is read with fetch().
  async function startStream() {
    if (view.stream) view.stream.abort();
    const control = new AbortController();
    view.stream = control;
    while (!control.signal.aborted) {
      try {
        const response = await request("/admin/health/queues/stream", view.token,
                                        { signal: control.signal, headers: { Accept: "text/event-stream" } });
        if (response.status === 401) { signOut("The token was refused: sign in again."); return; }
        if (!response.ok || !response.body) throw new Error("the stream answered " + response.status);
        $("live").textContent = "live";
        await readEvents(response.body, (data) => applySample(JSON.parse(data)));
      } catch (_) {
        if (control.signal.aborted) return;
      }
      $("live").textContent = "reconnecting…";
      await delay(RETRY_STREAM_MS, control.signal);
    }
  }

  async function readEvents(body, onData) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value.replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) !== -1) {
        const event = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = event.split("\n").filter((line) => line.startsWith("data:"))
          .map((line) => line.slice(5).replace(/^ /, "")).join("\n");
        if (data) onData(data);
      }
    }
  }

  // ---------------------------------------------------------------- one queue
  function selectQueue(name) {
    view.selected = name;
    view.jobsPage = 1;
    document.querySelectorAll("#queues tbody tr").forEach((tr) => {
      tr.classList.toggle("selected", tr.dataset.queue === name);
    });
    $("queue-panel").hidden = false;
    $("queue-title").textContent = "Queue " + name;
    $("queue-title").focus();
    loadJobs();
    loadChart();
  }

  async function loadJobs() {
    const name = view.selected;
    const state = $("job-state").value;
    const tbody = document.querySelector("#jobs tbody");
    let body;
    try {
      body = await api(queuePath(name) + "/jobs?state=" + encodeURIComponent(state) + "&page=" + view.jobsPage);
    } catch (error) {
      say("Jobs of " + name + ": " + error.message, true);
      return;
    }
    if (name !== view.selected || state !== $("job-state").value) return;  // a newer choice won
    view.jobsPages = Math.max(1, Math.ceil(body.total / body.per_page));
    tbody.replaceChildren(...body.jobs.map((job) => jobRow(name, job)));
    if (!body.jobs.length) tbody.append(el("tr", {}, el("td", { colspan: "5", className: "muted" }, "No " + state + " jobs.")));
    $("jobs-total").textContent = body.total + " " + state;
    $("jobs-page").textContent = "page " + body.page + " of " + view.jobsPages;
    $("jobs-prev").disabled = body.page <= 1;
    $("jobs-next").disabled = body.page >= view.jobsPages;
  }

  function jobRow(name, job) {
    const open = el("button", { type: "button", className: "link" }, job.id);
    open.addEventListener("click", () => openJob(name, job.id));
    const stamps = job.timestamps || {};
    const payload = job.data === undefined ? job.payload : job.data;
    const summary = job.failed_reason || (typeof payload === "string" ? payload : pretty(payload));
    return el("tr", { dataset: { job: job.id } },
      el("td", {}, open),
      el("td", { className: "num" }, job.attempts_made),
      el("td", {}, when(stamps.created)),
      el("td", {}, when(stamps.finished)),
      el("td", { className: "wrap" }, summary + (job.truncated ? " …" : "")));
  }

  function drawChart(minutes) {
    const NS = "http://www.w3.org/2000/svg";
    const svgEl = (tag, attrs) => {
      const node = document.createElementNS(NS, tag);
      for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
      return node;
    };
    const width = 600, height = 120, top = 14, bottom = 16;
    const step = width / Math.max(minutes.length, 1);
    const peak = Math.max(1, ...minutes.map((m) => Math.max(m.completed, m.failed)));
    const scale = (value) => (value / peak) * (height - top - bottom);
    const completed = minutes.reduce((sum, m) => sum + m.completed, 0);
    const failed = minutes.reduce((sum, m) => sum + m.failed, 0);
    const svg = svgEl("svg", { viewBox: "0 0 " + width + " " + height, role: "img",
                               "aria-label": "Last hour: " + completed + " completed, " + failed + " failed" });
    svg.append(svgEl("line", { x1: 0, x2: width, y1: height - bottom, y2: height - bottom, class: "axis" }));
    minutes.forEach((minute, index) => {
      const x = index * step;
      const group = svgEl("g", {});
      const title = svgEl("title", {});
      title.textContent = when(minute.at) + ": " + minute.completed + " completed, " + minute.failed + " failed";
      group.append(title);
      const bar = (value, offset, cls) => svgEl("rect", {
        x: x + offset, width: Math.max(step / 2 - 1, 1), y: height - bottom - scale(value),
        height: scale(value), class: cls });
      group.append(bar(minute.completed, 0, "c"), bar(minute.failed, step / 2, "f"));
      svg.append(group);
    });
    const label = (text, x, y, anchor) => {
      const node = svgEl("text", { x, y, "text-anchor": anchor });
      node.textContent = text;
      return node;
    };
    svg.append(label("60 min ago", 0, height - 3, "start"), label("now", width, height - 3, "end"),
               label(peak + " / min", 0, 10, "start"),
               label(completed + " completed · " + failed + " failed", width, 10, "end"));
    return svg;
  }

  async function loadChart() {
    const name = view.selected;
    view.chartAt = Date.now();
    try {
      const body = await api(queuePath(name) + "/history");
      if (name === view.selected) $("chart-box").replaceChildren(drawChart(body.minutes));
    } catch (error) {
      $("chart-box").replaceChildren(el("p", { className: "muted" }, "No throughput history: " + error.message));
    }
  }

  // ---------------------------------------------------------------- one job
  async function openJob(name, id) {
    let job;
    try {
      job = await api(jobPath(name, id));
    } catch (error) {
      say("Job " + id + ": " + error.message, true);
      return;
    }
    view.job = { queue: name, id };
    $("job-title").textContent = "Job " + job.id + " · " + name + " · " + job.state;
    const stamps = job.timestamps || {};
    const facts = [["state", job.state], ["queue", name], ["attempts made", job.attempts_made],
                   ["attempts started", job.attempts_started], ["priority", job.priority],
                   ["dedup id", job.dedup_id], ["created", when(stamps.created)],
                   ["processed", when(stamps.processed)], ["finished", when(stamps.finished)],
                   ["runs at", when(stamps.run_at)]];
    $("job-facts").replaceChildren(...facts.filter(([, value]) => value !== null && value !== undefined && value !== "")
      .flatMap(([term, value]) => [el("dt", {}, term), el("dd", {}, value)]));
    $("job-payload").textContent = pretty(job.data);
    $("job-reason").textContent = job.failed_reason || "none";
    $("job-stack").textContent = job.stacktrace || "none";
    $("job-return").textContent = pretty(job.return_value) || "none";
    const dialog = $("job-dialog");
    if (!dialog.open) dialog.showModal();
  }

  // ---------------------------------------------------------------- confirmations and actions
  // Resolves to the chosen parameters, or null when cancelled (button, or Escape).
  function confirmWith(spec, words) {
    const dialog = $("confirm");
    const fill = (text) => text.replace("QUEUE", words.queue).replace("JOB", words.job || "");
    $("confirm-title").textContent = spec.title;
    $("confirm-text").textContent = fill(spec.text);
    $("confirm-state-field").hidden = !spec.states;
    $("confirm-state").replaceChildren(...(spec.states || []).map((state) => el("option", { value: state }, state)));
    $("confirm-grace-field").hidden = !spec.grace;
    $("confirm-grace").value = "0";
    return new Promise((resolve) => {
      dialog.addEventListener("close", () => {
        if (dialog.returnValue !== "confirm") return resolve(null);
        const params = {};
        if (spec.states) params.state = $("confirm-state").value;
        if (spec.grace) params.grace_s = Math.max(0, Number($("confirm-grace").value) || 0);
        resolve(params);
      }, { once: true });
      dialog.returnValue = "";
      dialog.showModal();
    });
  }

  async function act(path, params, what) {
    try {
      const body = await api(path, {
        method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify(params),
      });
      say(what + ": " + body.count + (body.count === 1 ? " job" : " jobs") + " (" + body.action + ").");
      return true;
    } catch (error) {
      say(what + " failed: " + error.message, true);
      return false;
    } finally {
      loadAudit();
    }
  }

  async function queueAction(action) {
    const name = view.selected;
    const params = await confirmWith(QUEUE_ACTIONS[action], { queue: name });
    if (params === null) return;
    await act(queuePath(name) + "/" + action, params, action + " on " + name);
    loadJobs();
  }

  async function jobAction(action) {
    const { queue, id } = view.job;
    const params = await confirmWith(JOB_ACTIONS[action], { queue, job: id });
    if (params === null) return;
    if (await act(jobPath(queue, id) + "/" + action, params, action + " of job " + id)) $("job-dialog").close();
    if (queue === view.selected) loadJobs();
  }

  // ---------------------------------------------------------------- search
  async function search(q) {
    const list = $("search-list");
    $("search-results").hidden = false;
    let body;
    try {
      body = await api("/admin/search?q=" + encodeURIComponent(q));
    } catch (error) {
      $("search-summary").textContent = error.message;
      list.replaceChildren();
      return;
    }
    $("search-summary").textContent = body.results.length
      ? body.results.length + " found for “" + body.q + "”" : "Nothing found for “" + body.q + "”.";
    list.replaceChildren(...body.results.map(resultItem));
  }

  function jobLink(queue, id, state) {
    const open = el("button", { type: "button", className: "link" }, queue + " / " + id);
    open.addEventListener("click", () => openJob(queue, id));
    return el("li", {}, open, state ? " · " + state : "");
  }

  function resultItem(result) {
    const item = el("li", { dataset: { kind: result.kind, id: result.id } },
      el("div", { className: "kind" }, result.kind + (result.state ? " · " + result.state : "")),
      el("strong", {}, result.id), " ", result.summary || "");
    const jobs = result.kind === "job" ? [{ queue: result.queue, id: result.id, state: result.state }]
      : (result.jobs || []);
    if (jobs.length) {
      item.append(el("h3", {}, "Jobs"), el("ul", {}, ...jobs.map((job) => jobLink(job.queue, job.id, job.state))));
    }
    if ((result.timeline || []).length) {
      item.append(el("h3", {}, "Timeline"), el("ol", { className: "timeline" },
        ...result.timeline.map((entry) => el("li", { dataset: { event: entry.event } },
          el("time", { datetime: entry.at || "" }, when(entry.at)), " · ", el("strong", {}, entry.event),
          detailText(entry.detail)))));
    }
    const links = Object.entries(result.links || {}).filter(([, value]) => value);
    if (links.length) {
      item.append(el("dl", { className: "facts" },
        ...links.flatMap(([key, value]) => [el("dt", {}, key), el("dd", {}, Array.isArray(value) ? value.join(", ") : value)])));
    }
    return item;
  }

  function detailText(detail) {
    const pairs = Object.entries(detail || {}).filter(([, value]) => value !== null && value !== undefined && value !== "");
    if (!pairs.length) return "";
    return " · " + pairs.map(([key, value]) => key + ": " + (typeof value === "object" ? JSON.stringify(value) : value)).join(", ");
  }

  // ---------------------------------------------------------------- webhook endpoints
  async function loadWebhooks() {
    let body;
    try {
      body = await api("/admin/webhooks");
    } catch (error) {
      say("Webhook endpoints: " + error.message, true);
      return;
    }
    const tbody = document.querySelector("#webhooks tbody");
    tbody.replaceChildren(...body.endpoints.map(endpointRow));
    if (!body.endpoints.length) tbody.append(el("tr", {}, el("td", { colspan: "7", className: "muted" }, "No webhook endpoints.")));
    if (view.endpoint) loadFailedMessages();
  }

  // Red: disabled (a 410, or failing for too long); amber: its last attempts failed.
  function endpointRow(endpoint) {
    const open = el("button", { type: "button", className: "link" }, endpoint.url);
    open.addEventListener("click", () => selectEndpoint(endpoint));
    const [level, label] = endpoint.disabled ? ["red", "disabled"]
      : endpoint.failing_since ? ["amber", "failing since " + when(endpoint.failing_since)] : ["ok", "ok"];
    const row = el("tr", { dataset: { endpoint: endpoint.id } },
      el("th", { scope: "row" }, open, endpoint.description ? el("div", { className: "muted" }, endpoint.description) : null),
      el("td", { className: "wrap" }, endpoint.events.join(", ")),
      el("td", { dataset: { field: "state" } }, el("span", { className: "badge " + level }, label)));
    for (const field of WEBHOOK_COUNTS) row.append(el("td", { className: "num", dataset: { field } }, endpoint.messages[field]));
    return row;
  }

  function selectEndpoint(endpoint) {
    view.endpoint = endpoint.id;
    $("webhook-panel").hidden = false;
    $("webhook-title").textContent = "Failed messages · " + endpoint.url;
    $("webhook-title").focus();
    loadFailedMessages();
  }

  async function loadFailedMessages() {
    const id = view.endpoint;
    let body;
    try {
      body = await api(endpointPath(id) + "/messages?status=failed");
    } catch (error) {
      say("Failed messages: " + error.message, true);
      return;
    }
    if (id !== view.endpoint) return;  // another endpoint was chosen meanwhile
    const tbody = document.querySelector("#webhook-messages tbody");
    tbody.replaceChildren(...body.items.map((message) => messageRow(id, message)));
    if (!body.items.length) tbody.append(el("tr", {}, el("td", { colspan: "6", className: "muted" }, "No failed messages.")));
  }

  function messageRow(endpointId, message) {
    const last = message.attempts[message.attempts.length - 1] || {};
    const answer = [last.status_code ? "HTTP " + last.status_code : "", last.error || ""].filter(Boolean).join(" · ");
    const retry = el("button", { type: "button" }, "Retry");
    retry.addEventListener("click", () => retryMessage(endpointId, message.id));
    return el("tr", { dataset: { message: message.id } },
      el("td", {}, message.id), el("td", {}, message.type), el("td", {}, when(message.created_at)),
      el("td", { className: "num" }, message.attempts.length),
      el("td", { className: "wrap" }, answer), el("td", {}, retry));
  }

  async function retryMessage(endpointId, id) {
    const params = await confirmWith(WEBHOOK_RETRY, { queue: "", job: id });
    if (params === null) return;
    await act(endpointPath(endpointId) + "/messages/" + encodeURIComponent(id) + "/retry", params,
              "retry of message " + id);
    loadWebhooks();
  }

  // ---------------------------------------------------------------- audit log
  async function loadAudit() {
    let body;
    try {
      body = await api("/admin/audit?page=" + view.auditPage);
    } catch (error) {
      return;
    }
    const tbody = document.querySelector("#audit tbody");
    tbody.replaceChildren(...body.entries.map((entry) => el("tr", {},
      el("td", {}, when(entry.at)), el("td", {}, entry.actor), el("td", {}, entry.action),
      el("td", {}, entry.queue || ""), el("td", {}, entry.job_id || ""),
      el("td", { className: "num" }, entry.count === null || entry.count === undefined ? "" : entry.count),
      el("td", {}, entry.completed_at ? when(entry.completed_at) : "unfinished"),
      el("td", { className: "wrap" }, entry.error || ""))));
    if (!body.entries.length) tbody.append(el("tr", {}, el("td", { colspan: "8", className: "muted" }, "No entries.")));
    $("audit-page").textContent = "page " + body.page;
    $("audit-prev").disabled = body.page <= 1;
    $("audit-next").disabled = body.entries.length < body.per_page;
  }

  // ---------------------------------------------------------------- wiring
  $("sign-in-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const token = $("token").value.trim();
    if (token) signIn(token, false);
    else $("sign-in-error").textContent = "Type the admin token.";
  });
  $("sign-out").addEventListener("click", () => signOut(""));
  $("search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const q = $("search-q").value.trim();
    if (q) search(q);
  });
  $("job-state").addEventListener("change", () => { view.jobsPage = 1; loadJobs(); });
  $("jobs-prev").addEventListener("click", () => { view.jobsPage = Math.max(1, view.jobsPage - 1); loadJobs(); });
  $("jobs-next").addEventListener("click", () => { view.jobsPage = Math.min(view.jobsPages, view.jobsPage + 1); loadJobs(); });
  $("audit-prev").addEventListener("click", () => { view.auditPage = Math.max(1, view.auditPage - 1); loadAudit(); });
  $("audit-next").addEventListener("click", () => { view.auditPage += 1; loadAudit(); });
  $("audit-refresh").addEventListener("click", () => loadAudit());
  $("webhooks-refresh").addEventListener("click", () => loadWebhooks());
  document.querySelectorAll("#queue-actions [data-action]").forEach((button) => {
    button.addEventListener("click", () => queueAction(button.dataset.action));
  });
  document.querySelectorAll("[data-job-action]").forEach((button) => {
    button.addEventListener("click", () => jobAction(button.dataset.jobAction));
  });
  $("job-close").addEventListener("click", () => $("job-dialog").close());
  $("confirm-cancel").addEventListener("click", () => $("confirm").close("cancel"));
  $("confirm-ok").addEventListener("click", () => $("confirm").close("confirm"));

  const reason = sessionStorage.getItem("herald.signOutReason");
  sessionStorage.removeItem("herald.signOutReason");
  if (reason) $("sign-in-error").textContent = reason;
  const remembered = sessionStorage.getItem(TOKEN_KEY);
  if (remembered) signIn(remembered, true);
  else $("token").focus();
})();
