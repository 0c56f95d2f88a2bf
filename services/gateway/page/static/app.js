// Heddle's web page: runs, a run's steps and graph, a step's log (live), registered
// workflows with their schedules, history grid and versions, the runner pool, and a form to
// submit a workflow. Plain JavaScript, no build step (graph.js draws large graphs). Every
// string that comes from the API is put into the page as text (textContent, attributes),
// never as HTML.
"use strict";

(() => {
  const STEP_STATES = ["pending", "queued", "running", "retrying", "waiting", "succeeded",
    "failed", "skipped", "cancelled"];
  const RUN_STATES = ["running", "succeeded", "failed", "cancelled"];
  const TERMINAL_RUN = new Set(["succeeded", "failed", "cancelled"]);
  const TERMINAL_STEP = new Set(["succeeded", "failed", "skipped", "cancelled"]);
  const KNOWN = new Set([...STEP_STATES, "idle", "busy"]);
  const RUNS_POLL_MS = 2000;
  const RUN_POLL_MS = 1000;        // a run's document, while its event stream is broken
  const DRAW_MS = 100;             // a followed run's changes are drawn at most this often
  // What a step's event (StepChange) changes in its entry of the run document.
  const STEP_CHANGE = ["status", "attempt", "runner", "exitCode", "reason", "startedAt",
    "finishedAt", "retryAt", "queuedAt"];
  const RUNNERS_POLL_MS = 1000;  // the pool's "for" column ticks with it
  const LOG_TAIL = 1000;           // lines per attempt read before following
  const MAX_DOM_LINES = 5000;      // lines per attempt kept on the page
  const SVG_MAX_STEPS = 300;       // larger runs are drawn on a canvas (graph.js)
  const TABLE_PAGE = 300;          // step rows shown at first (more on demand, by state)
  const LOOP_OPEN_MAX = 10;        // a loop of at most this many instances is listed open
  const LOOP_FAILED_SHOWN = 10;    // a closed loop's failed instances listed under it
  const WORKFLOWS_POLL_MS = 2000;
  const GRID_POLL_MS = 3000;
  const KEY_WINDOW_MS = 5000;      // Run now clicks this close together are one request
  const DRAFT_KEY = "heddle.submit.draft";
  const TOKEN_KEY = "heddle.token";  // sessionStorage: this tab only, gone when it closes
  const NAMESPACE_KEY = "heddle.namespace";  // the namespace this tab works in
  const EXAMPLE = {
    steps: [
      { id: "A", command: "echo hello" },
      { id: "B", command: "sleep 0.5", dependsOn: ["A"] },
      { id: "C", command: "sleep 0.5", dependsOn: ["A"] },
      { id: "D", command: "date", dependsOn: ["B", "C"] },
    ],
  };

  const main = document.getElementById("main");
  const conn = document.getElementById("conn");
  const forget = document.getElementById("forget-token");

  // ---- DOM helpers: text only ------------------------------------------------------------

  function add(el, children) {
    for (const c of children) {
      if (c === null || c === undefined || c === false) continue;
      if (Array.isArray(c)) add(el, c);
      else if (c instanceof Node) el.appendChild(c);
      else el.appendChild(document.createTextNode(String(c)));
    }
    return el;
  }

  function setAttrs(el, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
      else if (k === "class") el.setAttribute("class", v);
      else el.setAttribute(k, v === true ? "" : String(v));
    }
    return el;
  }

  function h(tag, attrs, ...children) {
    return add(setAttrs(document.createElement(tag), attrs), children);
  }

  // Replaces el's children (null and false leave nothing, unlike replaceChildren).
  function put(el, ...children) {
    el.replaceChildren();
    return add(el, children);
  }

  function s(tag, attrs, ...children) {
    return add(setAttrs(document.createElementNS("http://www.w3.org/2000/svg", tag), attrs),
      children);
  }

  const stateClass = (st) => "st-" + (KNOWN.has(st) || RUN_STATES.includes(st) ? st : "unknown");
  const badge = (st) => h("span", { class: "badge " + stateClass(st) }, st || "unknown");
  const enc = encodeURIComponent;
  const runHref = (run) => "#/runs/" + enc(run);
  const workflowHref = (name) => "#/workflows/" + enc(name);
  const stepHref = (run, step) => runHref(run) + "/steps/" + enc(step);
  const dash = () => h("span", { class: "muted" }, "–");

  // ---- time ------------------------------------------------------------------------------

  const pad = (n, w = 2) => String(n).padStart(w, "0");

  function fmtTime(iso) {
    if (!iso) return dash();
    const d = new Date(iso);
    if (isNaN(d)) return h("span", {}, iso);
    const text = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
      `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
    return h("time", { datetime: iso, title: iso }, text);
  }

  function clock(iso) {
    const d = new Date(iso);
    if (isNaN(d)) return "";
    return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.` +
      pad(d.getMilliseconds(), 3);
  }

  function fmtMs(ms) {
    if (ms < 0) ms = 0;
    if (ms < 1000) return `${Math.round(ms)} ms`;
    const sec = ms / 1000;
    if (sec < 60) return `${sec.toFixed(1)} s`;
    const m = Math.floor(sec / 60);
    if (m < 60) return `${m} m ${pad(Math.floor(sec % 60))} s`;
    return `${Math.floor(m / 60)} h ${pad(m % 60)} m`;
  }

  function duration(start, end) {
    if (!start) return dash();
    const a = Date.parse(start);
    const b = end ? Date.parse(end) : Date.now();
    if (isNaN(a) || isNaN(b)) return dash();
    return h("span", { class: end ? "" : "live" }, fmtMs(b - a));
  }

  // ---- HTTP ------------------------------------------------------------------------------

  function setConn(ok, text) {
    conn.textContent = text;
    conn.className = "conn " + (ok ? "ok" : "bad");
  }

  // ---- the API token -----------------------------------------------------------------
  // The page may be opened with ?token=...: the token is kept for this tab and taken out of
  // the address bar (and so out of the history and of links copied from it). Every API call
  // sends it as Authorization: Bearer; it is never put in an API URL.

  function takeTokenFromUrl() {
    const params = new URLSearchParams(location.search);
    if (!params.has("token")) return;
    const token = params.get("token").trim();
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    params.delete("token");
    const q = params.toString();
    history.replaceState(history.state, "", location.pathname + (q ? "?" + q : "") + location.hash);
  }

  const token = () => sessionStorage.getItem(TOKEN_KEY);

  function authHeaders(headers) {
    const t = token();
    if (t) headers.Authorization = "Bearer " + t;
    return headers;
  }

  // The token prompt, in place of the current view; a token entered shows the view again.
  function askForToken(why) {
    forget.hidden = !token();
    const shown = document.getElementById("token-form");
    if (shown) {  // already asking (another call got a 401 too): keep what is typed
      shown.querySelector("#token-why").textContent = why;
      return;
    }
    if (cleanup) cleanup();
    cleanup = null;
    const input = h("input", { type: "password", id: "token-input", autocomplete: "off",
      spellcheck: "false", required: true, "aria-label": "API token" });
    const use = (ev) => {
      ev.preventDefault();
      if (!input.value.trim()) return;
      sessionStorage.setItem(TOKEN_KEY, input.value.trim());
      loadNamespaces().then(route);
    };
    put(main, h("form", { id: "token-form", class: "token-form", onsubmit: use },
      h("h1", {}, "API token"),
      h("p", { class: "muted", id: "token-why" }, why),
      h("p", { class: "muted" }, "Ask an admin for one (", h("code", {}, "heddle token create"),
        "), or open this page with ", h("code", {}, "?token=…"), ". It is kept for this tab only."),
      h("div", { class: "actions" }, input,
        h("button", { class: "primary", type: "submit", id: "token-use" }, "Use this token"))));
    input.focus();
  }

  function forgetToken() {
    sessionStorage.removeItem(TOKEN_KEY);
    askForToken("Token forgotten.");
  }

  // ---- the namespace ---------------------------------------------------------------------
  // The page works in one namespace at a time, chosen in the header among those the token
  // may see (GET /api/namespaces). Every API call names it: ?namespace=, and the body of a
  // call that creates a run or a workflow. Before the list arrives, the gateway chooses.

  const namespace = () => sessionStorage.getItem(NAMESPACE_KEY) || "";
  const CREATING = new Set(["POST /api/runs", "POST /api/workflows", "POST /workflow"]);

  function inNamespace(method, path, body) {
    const ns = namespace();
    if (!ns || !/^\/(api\/|workflow)/.test(path) || path.startsWith("/api/namespaces")) {
      return [path, body];
    }
    if (CREATING.has(`${method} ${path}`) && typeof body === "string") {
      try {
        const doc = JSON.parse(body);
        if (doc && typeof doc === "object" && !Array.isArray(doc) && !("namespace" in doc)) {
          body = JSON.stringify({ namespace: ns, ...doc });
        }
      } catch {
        // not JSON: sent as it is, for the gateway to say what is wrong with it
      }
    }
    return [path + (path.includes("?") ? "&" : "?") + "namespace=" + enc(ns), body];
  }

  async function loadNamespaces() {
    const r = await api("GET", "/api/namespaces");
    const names = r.status === 200 ? (r.body.namespaces || []).map((n) => n.name) : [];
    const box = document.getElementById("namespace-choice");
    const select = document.getElementById("namespace");
    box.hidden = names.length === 0;
    if (!names.length) return;
    if (!names.includes(namespace())) {
      sessionStorage.setItem(NAMESPACE_KEY, names.includes("default") ? "default" : names[0]);
    }
    select.replaceChildren(...names.map((n) => h("option", { value: n }, n)));
    select.value = namespace();
  }

  function chooseNamespace(ev) {
    sessionStorage.setItem(NAMESPACE_KEY, ev.target.value);
    location.hash = "#/runs";
    route();
  }

  // {status, body}: body is the decoded JSON (or text); status 0 when the gateway was not
  // reached. A 401 shows the token prompt.
  async function api(method, given, sent, headers) {
    const [path, body] = inNamespace(method, given, sent);
    const init = { method, headers: authHeaders({ Accept: "application/json", ...headers }),
      cache: "no-store" };
    if (body !== undefined) {
      init.body = body;
      init.headers["Content-Type"] = "application/json";
    }
    let resp;
    try {
      resp = await fetch(path, init);
    } catch (err) {
      setConn(false, "gateway unreachable");
      return { status: 0, body: { error: `the gateway did not answer: ${err.message}` } };
    }
    setConn(resp.status < 500, resp.status < 500 ? "connected" : `gateway error ${resp.status}`);
    if (resp.status === 401) {
      const answer = await resp.json().catch(() => ({}));
      askForToken(token() ? `The gateway refused the token: ${answer.error || "401"}.`
        : "The gateway needs an API token.");
      return { status: 401, body: answer };
    }
    const type = resp.headers.get("Content-Type") || "";
    let data;
    try {
      data = type.includes("application/json") ? await resp.json() : { error: await resp.text() };
    } catch (err) {
      data = { error: `unreadable answer: ${err.message}` };
    }
    return { status: resp.status, body: data };
  }

  const errorText = (r) => (r.body && r.body.error) || `HTTP ${r.status}`;

  // Server-sent events read with fetch, since an EventSource cannot send the Authorization
  // header. Calls opened() once the stream answers, then onEvent(type, data) per event with
  // its data decoded (JSON; an event whose data is not is left out).
  // Resolves with {status: 200} when the stream ends, or the error answer as api() gives it;
  // rejects when the connection drops or is aborted.
  async function readEvents(given, signal, opened, onEvent) {
    const [path] = inNamespace("GET", given, undefined);
    const resp = await fetch(path, {
      headers: authHeaders({ Accept: "text/event-stream" }), cache: "no-store", signal });
    const type = resp.headers.get("Content-Type") || "";
    if (resp.status !== 200 || !type.startsWith("text/event-stream")) {
      const body = await resp.json().catch(() => ({ error: `HTTP ${resp.status}` }));
      if (resp.status === 401) askForToken(`The gateway refused the token: ${body.error}.`);
      return { status: resp.status === 200 ? 502 : resp.status, body };
    }
    opened();
    const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    let kind = "message";
    let data = [];
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return { status: 200, body: null };
      buf += value;
      const lines = buf.split("\n");
      buf = lines.pop();
      for (let line of lines) {
        if (line.endsWith("\r")) line = line.slice(0, -1);
        if (line === "") {  // a blank line ends an event
          if (data.length) {
            let doc;
            try {
              doc = JSON.parse(data.join("\n"));
            } catch (err) {
              console.error(`unreadable ${kind} event`, err);
            }
            if (doc !== undefined) onEvent(kind, doc);
          }
          kind = "message";
          data = [];
          continue;
        }
        if (line.startsWith(":")) continue;  // a comment: the keepalive
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let val = colon < 0 ? "" : line.slice(colon + 1);
        if (val.startsWith(" ")) val = val.slice(1);
        if (field === "data") data.push(val);
        else if (field === "event") kind = val;
      }
    }
  }

  // Calls fn, waits `interval` after it settles, again; pauses while the tab is hidden. fn
  // returns false to stop, or a number of ms to wait this time instead. The returned object
  // stops it or runs it at once.
  function poller(fn, interval) {
    let timer = null;
    let busy = false;
    let stopped = false;
    async function tick() {
      timer = null;
      if (stopped || busy || document.hidden) return;
      busy = true;
      let next = interval;
      try {
        const result = await fn();
        if (result === false) next = null;
        else if (typeof result === "number") next = result;
      } catch (err) {
        console.error(err);
      } finally {
        busy = false;
      }
      if (next === null) stop();
      else if (!stopped && !document.hidden) timer = setTimeout(tick, next);
    }
    function onVisible() {
      if (!document.hidden && !stopped && timer === null && !busy) tick();
    }
    function stop() {
      stopped = true;
      clearTimeout(timer);
      document.removeEventListener("visibilitychange", onVisible);
    }
    document.addEventListener("visibilitychange", onVisible);
    tick();
    return {
      stop,
      now() {
        if (stopped) {
          stopped = false;
          document.addEventListener("visibilitychange", onVisible);
        }
        if (!busy) {
          clearTimeout(timer);
          tick();
        }
      },
    };
  }

  function problemList(body) {
    const problems = (body && Array.isArray(body.problems)) ? body.problems : [];
    if (!problems.length) return null;
    return h("ul", { class: "problems", id: "problems" },
      problems.map((p) => h("li", {},
        h("code", { class: "path" }, p.path || "(document)"), " ", h("span", {}, p.message))));
  }

  function errorBox(r) {
    return h("div", { class: "error" }, h("strong", {}, errorText(r)), problemList(r.body));
  }

  // ---- Runs ------------------------------------------------------------------------------

  function countsCell(run) {
    const counts = run.counts;
    if (!counts) return h("span", { class: "muted" }, `${run.stepCount} steps`);
    const parts = STEP_STATES.filter((st) => counts[st])
      .map((st) => h("span", { class: "chip " + stateClass(st), title: st }, `${counts[st]} ${st}`));
    return h("span", { class: "chips" }, parts, h("span", { class: "muted" }, ` of ${run.stepCount}`));
  }

  function viewRuns(query) {
    const status = RUN_STATES.includes(query.get("status")) ? query.get("status") : "";
    const limit = ["20", "50", "100", "500", "1000"].includes(query.get("limit"))
      ? query.get("limit") : "50";
    const go = (st, lim) => {
      const q = new URLSearchParams();
      if (st) q.set("status", st);
      if (lim !== "50") q.set("limit", lim);
      location.hash = "#/runs" + (q.toString() ? "?" + q : "");
    };
    const statusSel = h("select", { id: "runs-status", onchange: () => go(statusSel.value, limit) },
      h("option", { value: "" }, "every status"),
      RUN_STATES.map((st) => h("option", { value: st, selected: st === status }, st)));
    const limitSel = h("select", { id: "runs-limit", onchange: () => go(status, limitSel.value) },
      ["20", "50", "100", "500", "1000"].map((n) => h("option", { value: n, selected: n === limit },
        `${n} newest`)));
    const info = h("span", { class: "muted", id: "runs-info" });
    const tbody = h("tbody", { id: "runs-body" });
    const problem = h("div");
    add(main, [
      h("div", { class: "title" }, h("h1", {}, "Runs"),
        h("div", { class: "controls" }, statusSel, limitSel, info)),
      problem,
      h("table", { class: "grid", id: "runs" },
        h("thead", {}, h("tr", {}, ["Run", "Status", "Workflow", "Trigger", "Steps", "Created",
          "Finished", "Duration"].map((t) => h("th", {}, t)))),
        tbody),
    ]);
    const q = new URLSearchParams({ limit });
    if (status) q.set("status", status);
    const p = poller(async () => {
      const r = await api("GET", "/api/runs?" + q);
      if (r.status !== 200) {
        put(problem, errorBox(r));
        return true;
      }
      problem.replaceChildren();
      const runs = r.body.runs || [];
      info.textContent = `${runs.length} shown of ${r.body.matching} ` +
        (status ? `${status} ` : "") + `(${r.body.total} stored)`;
      if (!runs.length) {
        put(tbody, h("tr", {}, h("td", { colspan: 8, class: "empty" },
          status ? `No ${status} runs. ` : "No runs yet. ",
          h("a", { href: "#/submit" }, "Submit one"), ".")));
        return true;
      }
      put(tbody, ...runs.map((run) => h("tr", { "data-run": run.runId },
        h("td", {}, h("a", { href: runHref(run.runId), class: "mono" }, run.runId)),
        h("td", {}, badge(run.status), run.cancelRequested && run.status === "running"
          ? h("span", { class: "muted" }, " cancelling")
          : run.waiting ? h("span", { class: "muted" }, " waiting") : null),
        h("td", {}, run.workflowName
          ? [run.workflowName, run.version ? h("span", { class: "muted" }, ` v${run.version}`) : null]
          : dash()),
        h("td", {}, run.trigger || dash()),
        h("td", {}, countsCell(run)),
        h("td", {}, fmtTime(run.createdAt)),
        h("td", {}, fmtTime(run.finishedAt)),
        h("td", {}, duration(run.createdAt, run.finishedAt)))));
      return true;
    }, RUNS_POLL_MS);
    return p.stop;
  }

  // ---- Submit ----------------------------------------------------------------------------

  function viewSubmit() {
    const example = JSON.stringify(EXAMPLE, null, 2);
    const area = h("textarea", { id: "doc", spellcheck: "false", rows: 20, "aria-label": "workflow JSON" });
    area.value = sessionStorage.getItem(DRAFT_KEY) || example;
    area.addEventListener("input", () => sessionStorage.setItem(DRAFT_KEY, area.value));
    const result = h("div", { id: "submit-result", "aria-live": "polite" });
    const button = h("button", { id: "submit", class: "primary", type: "submit" }, "Submit");

    async function submit(ev) {
      ev.preventDefault();
      button.disabled = true;
      put(result, h("p", { class: "muted" }, "Submitting…"));
      const r = await api("POST", "/api/runs", area.value);
      button.disabled = false;
      if ([200, 201, 202].includes(r.status) && r.body.runId) {
        location.hash = runHref(r.body.runId);
        return;
      }
      let title = errorText(r);
      if (r.status === 400 && Array.isArray(r.body.problems)) {
        const n = r.body.problems.length;
        title = `${title}: ${n} problem${n === 1 ? "" : "s"}`;
      }
      put(result, h("div", { class: "error", id: "submit-error" },
        h("strong", {}, `${r.status || "no answer"}: ${title}`), problemList(r.body)));
    }

    function format() {
      try {
        area.value = JSON.stringify(JSON.parse(area.value), null, 2);
        sessionStorage.setItem(DRAFT_KEY, area.value);
        result.replaceChildren();
      } catch (err) {
        put(result, h("div", { class: "error" }, `Not JSON: ${err.message}`));
      }
    }

    area.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) submit(ev);
    });
    add(main, [
      h("div", { class: "title" }, h("h1", {}, "Submit a run")),
      h("p", { class: "muted" }, "The body of ", h("code", {}, "POST /api/runs"),
        ": steps with ", h("code", {}, "id"), ", ", h("code", {}, "command"), ", optional ",
        h("code", {}, "dependsOn"), ", ", h("code", {}, "retries"), ", ",
        h("code", {}, "timeoutSeconds"), "; an optional ", h("code", {}, "runId"),
        " makes it idempotent and ", h("code", {}, "name"), " files it under a workflow. ",
        "Ctrl+Enter submits."),
      h("form", { id: "submit-form", onsubmit: submit },
        area,
        h("div", { class: "actions" }, button,
          h("button", { type: "button", onclick: format }, "Format"),
          h("button", { type: "button", onclick: () => {
            area.value = example;
            sessionStorage.removeItem(DRAFT_KEY);
            result.replaceChildren();
          } }, "Reset to the example"))),
      result,
    ]);
    return null;
  }

  // ---- Run -------------------------------------------------------------------------------

  // Depth of each step: 0 without dependencies, else one more than its deepest parent.
  function depths(steps) {
    const byId = new Map(steps.map((st) => [st.id, st]));
    const depth = new Map();
    const visiting = new Set();
    function of(id) {
      if (depth.has(id)) return depth.get(id);
      if (visiting.has(id) || !byId.has(id)) return 0;
      visiting.add(id);
      const d = Math.max(-1, ...(byId.get(id).dependsOn || []).map(of)) + 1;
      visiting.delete(id);
      depth.set(id, d);
      return d;
    }
    steps.forEach((st) => of(st.id));
    return depth;
  }

  function drawDag(runId, steps) {
    const W = 132, H = 30, GX = 56, GY = 14, M = 10;
    const depth = depths(steps);
    const layers = [];
    for (const st of steps) (layers[depth.get(st.id)] ||= []).push(st);
    const pos = new Map();
    layers.forEach((layer, d) => layer.forEach((st, i) => {
      pos.set(st.id, { x: M + d * (W + GX), y: M + i * (H + GY) });
    }));
    const width = M * 2 + layers.length * W + (layers.length - 1) * GX;
    const height = M * 2 + Math.max(...layers.map((l) => l.length)) * (H + GY) - GY;
    const edges = [];
    for (const st of steps) {
      for (const dep of st.dependsOn || []) {
        const a = pos.get(dep), b = pos.get(st.id);
        if (!a || !b) continue;
        const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2, mx = (x1 + x2) / 2;
        edges.push(s("path", { class: "edge", d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}` }));
      }
    }
    const nodes = new Map();
    const loopsOf = new Map();  // a loop's id -> what its node last showed of its instances
    const title = (st) => `${st.id}: ${st.status}` +
      (loopsOf.get(st.id) ? `; ${loopsOf.get(st.id).summary}` : "");
    const groups = steps.map((st) => {
      const p = pos.get(st.id);
      const g = s("g", { class: "node " + stateClass(st.status), "data-node": st.id,
        transform: `translate(${p.x},${p.y})`, tabindex: 0, role: "link" },
        s("title", {}, `${st.id}: ${st.status}`),
        s("rect", { width: W, height: H, rx: 6 }),
        s("text", { x: W / 2, y: H / 2 + 4, "text-anchor": "middle" }, nodeLabel(st.id, "", 16)));
      const open = () => { location.hash = stepHref(runId, st.id); };
      g.addEventListener("click", open);
      g.addEventListener("keydown", (ev) => { if (ev.key === "Enter") open(); });
      nodes.set(st.id, g);
      return g;
    });
    const svg = s("svg", { class: "dag", width, height, viewBox: `0 0 ${width} ${height}`,
      role: "img", "aria-label": "the run's steps by depth" }, edges, groups);
    return {
      svg,
      update(steps2) {
        for (const st of steps2) {
          const g = nodes.get(st.id);
          if (!g) continue;
          g.setAttribute("class", "node " + stateClass(st.status));
          g.firstChild.textContent = title(st);
        }
      },
      // A loop's node: its id with its instance count, a bar of how many have ended.
      loop(lp) {
        const g = nodes.get(lp.id);
        if (!g) return;
        const total = lp.instances.length;
        loopsOf.set(lp.id, { summary: loopSummary(lp) });
        g.dataset.instances = String(total);
        g.dataset.ended = String(lp.ended);
        g.querySelector("text").textContent = nodeLabel(lp.id, total ? ` ×${total}` : "", 16);
        let bar = g.querySelector(".loop-bar");
        if (total && !bar) {
          bar = s("rect", { class: "loop-bar", x: 0, y: H - 3, height: 3, rx: 1.5 });
          g.appendChild(bar);
        }
        if (bar) bar.setAttribute("width", total ? (W * lp.ended / total).toFixed(1) : "0");
        g.firstChild.textContent = title(lp.step);
      },
    };
  }

  // A node's label: the id, cut to fit `room` characters with its note (a loop's count).
  function nodeLabel(id, note, room) {
    const left = Math.max(4, room - note.length);
    return (id.length > left ? id.slice(0, left - 1) + "…" : id) + note;
  }

  // ---- a forEach step's instances, grouped under it --------------------------------------

  // A loop: its step, its instances in index order, and their counts by state.
  function tallyLoop(lp) {
    const counts = {};
    let ended = 0;
    for (const inst of lp.instances) {
      counts[inst.status] = (counts[inst.status] || 0) + 1;
      if (TERMINAL_STEP.has(inst.status)) ended += 1;
    }
    lp.counts = counts;
    lp.ended = ended;
  }

  // "30 instances: 2 running, 28 queued"; the counts in the page's order of states.
  function loopSummary(lp) {
    const n = lp.instances.length;
    const parts = STEP_STATES.filter((st) => lp.counts[st]).map((st) => `${lp.counts[st]} ${st}`);
    return `${n} instance${n === 1 ? "" : "s"}` + (parts.length ? `: ${parts.join(", ")}` : "");
  }

  // A step's cells; an instance's shows its item where its step shows the command, and a
  // loop's step its disclosure button and the summary of its instances.
  // What a call step runs, where another step shows its command.
  const callText = (st) => st.workflow
    ? `calls ${st.workflow.name}${st.workflow.version ? " v" + st.workflow.version : ""}` : "";

  // A call step's line: the workflow it calls, and its child run's link once it has one.
  function callLine(st) {
    return h("div", { class: "command mono" }, callText(st),
      st.childRun ? [" → ", h("a", { href: runHref(st.childRun), class: "child-run" }, st.childRun)] : null);
  }

  function stepCells(runId, st, lp) {
    const first = st.parent !== null && st.parent !== undefined
      ? [h("a", { href: stepHref(runId, st.id), class: "mono step-link" }, st.id),
        h("div", { class: "command mono item", title: st.item ?? "" }, "item ", st.item ?? dash())]
      : [lp && lp.instances.length ? lp.button : null,
        h("a", { href: stepHref(runId, st.id), class: "mono step-link" }, st.id),
        st.workflow ? callLine(st) : h("div", { class: "command mono", title: st.command }, st.command),
        lp ? loopLine(lp) : null];
    return [
      h("td", {}, first),
      h("td", { class: "status" }, badge(st.status)),
      h("td", { class: "num" }, st.attempt || dash()),
      h("td", { class: "nowrap" }, st.runner || dash()),
      h("td", { class: "num" }, st.exitCode ?? dash()),
      h("td", { class: "num" }, duration(st.startedAt, st.finishedAt)),
      h("td", {}, (st.dependsOn || []).length
        ? st.dependsOn.map((d, i) => [i ? ", " : "", h("a", { href: stepHref(runId, d), class: "mono" }, d)])
        : dash()),
      h("td", { class: "reason" }, st.waitingFor
        ? [st.reason ? [st.reason, h("br")] : null,
          h("span", { class: "waiting-for", "data-reason": st.waitingFor.reason }, st.waitingFor.sentence)]
        : st.reason || (st.status === "retrying" && st.retryAt
          ? ["retry at ", fmtTime(st.retryAt)] : dash())),
    ];
  }

  // Under a loop's step: its instances counted by state (the failed ones stand out), or
  // its list while it has none.
  function loopLine(lp) {
    const n = lp.instances.length;
    if (!n) {
      return h("div", { class: "loop-summary" }, TERMINAL_STEP.has(lp.step.status)
        ? "no instances" : ["for each of ", h("code", {}, lp.step.forEach)]);
    }
    const failed = lp.counts.failed || 0;
    const parts = STEP_STATES.filter((st) => lp.counts[st]).map((st, i) => [i ? ", " : "",
      h("span", { class: "n-" + st }, `${lp.counts[st]} ${st}`)]);
    const note = failed && !lp.isOpen()
      ? (failed > LOOP_FAILED_SHOWN ? ` (the first ${LOOP_FAILED_SHOWN} failed listed below)`
        : ` (failed listed below)`) : "";
    return h("div", { class: "loop-summary", "data-instances": n },
      `${n} instance${n === 1 ? "" : "s"}: `, parts, h("span", { class: "muted" }, note));
  }

  // The graph of a large run: graph.js on a canvas, with fit, zoom and find.
  function canvasDag(runId, steps) {
    const css = getComputedStyle(document.documentElement);
    const color = (name) => css.getPropertyValue("--" + name).trim() || "#8a93a3";
    const box = h("div", { class: "graph-box", id: "graph-box" });
    const findInput = h("input", { type: "search", id: "graph-find", placeholder: "find a step by id",
      "aria-label": "find a step by id", spellcheck: "false", autocomplete: "off" });
    const findNote = h("span", { class: "muted", id: "graph-find-note", "aria-live": "polite" });
    const graph = window.HeddleGraph.create(box, steps, {
      states: STEP_STATES,
      color,
      background: color("panel") || "#fff",
      edge: "#aeb6c4",
      ink: color("ink"),
      accent: color("accent"),
      font: css.getPropertyValue("--mono").trim() || "monospace",
      open: (id) => { location.hash = stepHref(runId, id); },
    });
    const find = (ev) => {
      ev.preventDefault();
      const id = graph.find(findInput.value);
      findNote.textContent = id === null ? `No step matches “${findInput.value.trim()}”.`
        : `${id}: Enter on the graph, or a click, opens it.`;
      if (id !== null) graph.canvas.focus();
    };
    const legend = h("span", { class: "legend graph-legend" },
      STEP_STATES.map((st) => h("span", { class: "chip " + stateClass(st) }, st)));
    const bar = h("form", { class: "graph-bar", id: "graph-find-form", onsubmit: find },
      findInput, h("button", { type: "submit" }, "Find"),
      h("button", { type: "button", id: "graph-fit", onclick: () => graph.fit() }, "Fit"),
      h("button", { type: "button", onclick: () => graph.zoom(1.5), "aria-label": "zoom in" }, "+"),
      h("button", { type: "button", onclick: () => graph.zoom(1 / 1.5), "aria-label": "zoom out" }, "−"),
      findNote, legend);
    return {
      el: h("div", { class: "graph" }, bar, box),
      update: graph.update,
      loop: (lp) => graph.note(lp.id, lp.instances.length ? `×${lp.instances.length}` : "",
        lp.instances.length ? lp.ended / lp.instances.length : -1, loopSummary(lp)),
      destroy: graph.destroy,
    };
  }

  function viewRun(runId) {
    const started = performance.now();
    const head = h("div", { class: "title" }, h("h1", { class: "mono" }, runId));
    const meta = h("dl", { class: "meta", id: "run-meta" });
    const outcome = h("span", { id: "cancel-outcome", class: "outcome", "aria-live": "polite" });
    const cancel = h("button", { id: "cancel", class: "danger", disabled: true }, "Cancel run");
    const retry = h("button", { id: "retry", hidden: true,
      title: "a new run: succeeded steps carried over, the rest run again" }, "Retry from the failure");
    const notice = h("div", { id: "run-notice" });
    const liveNote = h("span", { id: "run-live", class: "muted", "aria-live": "polite" });
    const dagBox = h("div", { class: "dag-box", id: "dag" });
    const timelineBox = h("div", { class: "timeline-box", id: "timeline" });
    const legend = h("span", { class: "tl-legend muted" },
      ["waiting", "queued", "running"].map((k) => h("span", { class: "tl-key tl-key-" + k }, k)));
    const timelineBar = h("div", { class: "section-bar" }, h("h2", {}, "Timeline"), legend);
    const tbody = h("tbody", { id: "steps-body" });
    let rows = new Map();         // step id -> its row, for the rows listed
    let loops = new Map();        // a forEach step's id -> its loop (see adopt)
    let dag = null;
    let misses = 0;
    let lastSteps = [];
    // A large run's table shows TABLE_PAGE rows, more on demand, optionally of one state:
    // thousands of rows would make every change re-lay out the page.
    let shown = TABLE_PAGE;
    const stateSel = h("select", { id: "steps-state", "aria-label": "steps in this state" },
      h("option", { value: "" }, "every state"), STEP_STATES.map((st) => h("option", { value: st }, st)));
    const tableInfo = h("span", { class: "muted", id: "steps-info" });
    const more = h("button", { id: "steps-more", type: "button" }, `Show ${TABLE_PAGE} more`);
    const tableBar = h("div", { class: "section-bar", hidden: true }, h("h2", {}, "Steps"), tableInfo,
      h("div", { class: "controls" }, stateSel, more));
    add(main, [
      h("nav", { class: "crumbs" }, h("a", { href: "#/runs" }, "Runs"), " / ", runId),
      head, h("div", { class: "actions" }, cancel, retry, outcome, liveNote), notice, meta, dagBox,
      timelineBar, timelineBox, tableBar,
      h("table", { class: "grid", id: "steps" },
        h("thead", {}, h("tr", {}, ["Step", "Status", "Attempt", "Runner", "Exit", "Duration",
          "Depends on", "Reason"].map((t) => h("th", {}, t)))),
        tbody),
    ]);

    // What a step's row shows, to redraw only the rows that changed (cheaper than the
    // whole record, output tails included, on a run of thousands of steps).
    const rowKey = (st) => [st.status, st.attempt, st.runner, st.exitCode, st.startedAt,
      st.finishedAt, st.reason, st.retryAt, st.waitingFor ? st.waitingFor.sentence : ""].join("\u0000");

    function renderRows(steps) {
      for (const st of steps) {
        // A running step's row shows a growing duration; any other changes with its record.
        const ticking = st.startedAt && !st.finishedAt && !TERMINAL_STEP.has(st.status);
        const lp = loops.get(st.id);
        const key = rowKey(st) + (ticking ? Date.now() : "") +
          (lp ? `\u0001${loopSummary(lp)}\u0001${lp.isOpen()}\u0001${lp.step.forEach}` : "");
        const row = rows.get(st.id);
        if (row.key !== key) {
          row.key = key;
          row.tr.className = stateClass(st.status) + (lp ? " loop" : "") +
            (st.parent !== null && st.parent !== undefined ? " instance" : "");
          if (lp) {
            const open = lp.isOpen();
            lp.button.setAttribute("aria-expanded", String(open));
            lp.button.textContent = open ? "▾" : "▸";
          }
          put(row.tr, ...stepCells(runId, st, lp));
        }
      }
    }

    // The rows listed: each step, and under a loop's step its instances while it is open
    // (else only its failed ones, the first LOOP_FAILED_SHOWN). A state chosen lists every
    // step in it, instances included, in the same order.
    function listed(steps) {
      const want = stateSel.value;
      const out = [];
      for (const st of steps) {
        if (st.parent !== null && st.parent !== undefined && loops.has(st.parent)) continue;
        if (!want || st.status === want) out.push(st);
        const lp = loops.get(st.id);
        if (!lp) continue;
        if (want) {
          for (const inst of lp.instances) if (inst.status === want) out.push(inst);
        } else if (lp.isOpen()) {
          for (const inst of lp.instances) out.push(inst);
        } else if (lp.counts.failed) {
          let n = 0;
          for (const inst of lp.instances) {
            if (inst.status !== "failed") continue;
            out.push(inst);
            if (++n >= LOOP_FAILED_SHOWN) break;
          }
        }
      }
      return out;
    }

    function fillRows(steps) {
      lastSteps = steps;
      // Rows are moved and redrawn: a loop's button (kept across them) keeps the focus.
      const active = document.activeElement;
      const large = steps.length > TABLE_PAGE;
      const matching = listed(steps);
      const list = large ? matching.slice(0, shown) : matching;
      const ids = list.map((st) => st.id).join("\n");
      if (ids !== fillRows.ids) {  // another set of rows (a page of them, a loop opened)
        fillRows.ids = ids;
        const next = new Map();
        for (const st of list) {
          next.set(st.id, rows.get(st.id) || {
            tr: h("tr", st.parent !== null && st.parent !== undefined
              ? { "data-step": st.id, "data-parent": st.parent } : { "data-step": st.id }),
            key: "" });
        }
        rows = next;
        tbody.replaceChildren(...[...next.values()].map((row) => row.tr));
      }
      renderRows(list);
      if (active !== document.activeElement && tbody.contains(active)) active.focus({ preventScroll: true });
      if (!large) return;
      tableBar.hidden = false;
      tableInfo.textContent = `${list.length} shown of ${matching.length}` +
        (stateSel.value ? ` ${stateSel.value}` : "") + ` (${steps.length} steps)`;
      more.hidden = list.length >= matching.length;
    }
    stateSel.addEventListener("change", () => { shown = TABLE_PAGE; fillRows(lastSteps); });
    more.addEventListener("click", () => { shown += TABLE_PAGE; fillRows(lastSteps); });

    // Draws the run; `only`, the steps changed since the last draw (all when not given).
    function render(run, only) {
      put(head, h("h1", { class: "mono" }, run.runId), badge(run.status));
      head.querySelector(".badge").id = "run-status";
      const counts = STEP_STATES.filter((st) => run.counts && run.counts[st])
        .map((st) => h("span", { class: "chip " + stateClass(st) }, `${run.counts[st]} ${st}`));
      const item = (k, ...v) => [h("dt", {}, k), h("dd", {}, ...v)];
      put(meta, ...[
        item("Workflow", run.workflowName
          ? [run.version ? h("a", { href: workflowHref(run.workflowName) }, run.workflowName)
            : run.workflowName, run.version ? ` v${run.version}` : ""] : dash()),
        item("Trigger", run.trigger || dash(), run.scheduledFor ? [" for ", fmtTime(run.scheduledFor)] : null),
        item("Created", fmtTime(run.createdAt)),
        item("Finished", fmtTime(run.finishedAt)),
        item("Duration", duration(run.createdAt, run.finishedAt)),
        run.deadlineAt ? item("Deadline", fmtTime(run.deadlineAt), ` (${run.timeoutSeconds} s)`) : [],
        item("Steps", `${run.steps.length} `, h("span", { class: "chips" }, counts)),
        run.retryOf ? item("Retry of", h("a", { href: runHref(run.retryOf), class: "mono", id: "retry-of" }, run.retryOf)) : [],
        run.retriedBy ? item("Retried by", h("a", { href: runHref(run.retriedBy), class: "mono", id: "retried-by" }, run.retriedBy)) : [],
        // A child run: the run and the call step that started it (docs/sub-workflows.md).
        run.parentRun ? item("Called by", h("a", { href: runHref(run.parentRun), class: "mono", id: "parent-run" }, run.parentRun),
          " step ", h("a", { href: stepHref(run.parentRun, run.parentStep), class: "mono" }, run.parentStep)) : [],
      ].flat());
      cancel.disabled = TERMINAL_RUN.has(run.status);
      retry.hidden = !["failed", "cancelled"].includes(run.status);
      const going = !TERMINAL_RUN.has(run.status);
      put(notice, run.reason  // why it was stopped: past its deadline
        ? h("p", { class: "muted", id: "run-reason" }, run.reason)
        : run.cancelRequested && going
          ? h("p", { class: "muted" }, "Cancel requested: running steps are being stopped.")
          : run.waitingFor && going
            ? h("p", { class: "muted", id: "waiting", "data-reason": run.waitingFor.reason },
              run.waitingFor.sentence)
            : run.waiting && going
              ? h("p", { class: "muted", id: "waiting" }, "Waiting for its turn: the runs under way are at their bound.")
              : null);
      drawTimeline(run);
      // The graph has the run's steps, not a loop's instances: its step's node counts them.
      const drawn = run.steps.filter((st) => st.parent === null || st.parent === undefined);
      if (!dag && drawn.length) {
        if (drawn.length <= SVG_MAX_STEPS) {
          dag = drawDag(run.runId, drawn);
          put(dagBox, dag.svg);
        } else {
          dag = canvasDag(run.runId, drawn);
          put(dagBox, dag.el);
          performance.measure("heddle-run-to-graph", { start: started });
        }
        for (const lp of loops.values()) dag.loop(lp);
      } else if (dag) {
        dag.update(only || drawn);
        for (const lp of loops.values()) if (!only || lp.touched) dag.loop(lp);
      }
      for (const lp of loops.values()) lp.touched = false;
      fillRows(run.steps);
    }

    // The timeline of a run of up to SVG_MAX_STEPS steps, drawn again with each change (and
    // each tick while a step runs); a larger run's would be too many bars to read.
    function drawTimeline(run) {
      if (run.steps.length > SVG_MAX_STEPS) {
        put(timelineBox, h("p", { class: "muted" }, `The timeline is drawn for runs of up to ${SVG_MAX_STEPS} steps.`));
        return;
      }
      const ended = TERMINAL_RUN.has(run.status) && run.finishedAt;
      const svg = window.HeddleTimeline.draw(run, ended ? Date.parse(run.finishedAt) : Date.now());
      put(timelineBox, svg || h("p", { class: "muted" }, "Nothing has begun yet."));
    }

    // A loop opened or closed by its button: auto (open up to LOOP_OPEN_MAX instances) until
    // then, and kept when the document is read again.
    function makeLoop(st, was) {
      const lp = { id: st.id, step: st, instances: [], counts: {}, ended: 0, touched: true,
        open: was ? was.open : null, button: was ? was.button : null };
      lp.isOpen = () => (lp.open === null ? lp.instances.length <= LOOP_OPEN_MAX : lp.open);
      if (!lp.button) {
        lp.button = h("button", { type: "button", class: "loop-toggle", "aria-expanded": "false",
          "aria-label": `the instances of ${st.id}`, title: "show or hide the instances" });
        lp.button.addEventListener("click", () => {
          const cur = loops.get(st.id);
          cur.open = !cur.isOpen();
          fillRows(lastSteps);
        });
      }
      return lp;
    }

    // The run is read once, then followed through its event stream (GET
    // /api/runs/{run}/events): each event changes the page's copy of the run document (a
    // step's state, the run's), drawn at most every DRAW_MS, and the document is read once
    // more at the stream's `end`. A broken stream falls back to reading the document every
    // RUN_POLL_MS (more slowly for a large run) until the stream is open again.
    let doc = null;               // the run document, changed in place by the events
    let byId = new Map();         // step id -> its entry in doc.steps
    let changed = new Set();      // steps changed since the last draw
    let live = null;              // the stream: null (not yet), "connecting", "open", "lost"
    let aborter = null;           // stops the stream's fetch
    let reconnect = null;
    let drawTimer = null;
    let failures = 0;
    let closed = false;
    const every = () => RUN_POLL_MS * Math.max(1, Math.ceil((doc ? doc.steps.length : 0) / 2000));

    function adopt(body) {
      doc = body;
      byId = new Map(doc.steps.map((st) => [st.id, st]));
      changed = new Set();
      // Each forEach step's loop, its instances under it in index order.
      const had = loops;
      loops = new Map();
      for (const st of doc.steps) if (st.forEach) loops.set(st.id, makeLoop(st, had.get(st.id)));
      for (const st of doc.steps) {
        const lp = st.parent !== null && st.parent !== undefined ? loops.get(st.parent) : null;
        if (lp) lp.instances.push(st);
      }
      for (const lp of loops.values()) {
        lp.instances.sort((a, b) => (a.itemIndex ?? 0) - (b.itemIndex ?? 0));
        tallyLoop(lp);
      }
      render(doc);
    }

    function draw() {
      clearTimeout(drawTimer);
      drawTimer = null;
      if (!doc || closed) return;
      const counts = {};
      for (const st of doc.steps) counts[st.status] = (counts[st.status] || 0) + 1;
      doc.counts = counts;
      const only = [...changed].map((id) => byId.get(id));
      changed = new Set();
      // An instance's change is counted in its loop (its node and summary), not drawn alone.
      for (const st of only) {
        const lp = st.parent !== null && st.parent !== undefined ? loops.get(st.parent) : null;
        if (lp && !lp.touched) {
          lp.touched = true;
          tallyLoop(lp);
        }
      }
      render(doc, only);
    }

    function later(ms) {
      if (drawTimer === null && !closed) drawTimer = setTimeout(draw, ms);
    }

    // A running step's duration and the run's grow: drawn again while the run goes on (as
    // often as a broken stream's reads, more slowly for a large run).
    let ticker = null;
    const tick = () => {
      if (doc && !TERMINAL_RUN.has(doc.status) && live === "open") later(0);
      ticker = setTimeout(tick, every());
    };
    tick();

    // The document read again while the stream goes on, once for however many new steps
    // (a forEach step's instances) its events name. The graph stays: it has no instances,
    // only their counts on their step's node. An unknown step named while a read is under
    // way (another loop's) is looked for in its answer, and read again for if not there.
    // The step events that come meanwhile are kept and applied to the new document too
    // (it may have been read before them), but never to take a step back from an end.
    let rereading = false;
    let held = [];
    const unknown = new Set();
    const lookedFor = new Set();
    async function readAgain(ev) {
      unknown.add(ev.stepId);
      if (rereading) return;
      rereading = true;
      held = [ev];
      await new Promise((done) => setTimeout(done, DRAW_MS));
      const r = await api("GET", "/api/runs/" + enc(runId));
      rereading = false;
      const events = held;
      held = [];
      if (closed || r.status !== 200) return;
      adopt(r.body);
      for (const ev of events) {
        const st = byId.get(ev.stepId);
        if (!st || TERMINAL_STEP.has(st.status) || (ev.attempt ?? 0) < (st.attempt ?? 0)) continue;
        for (const f of STEP_CHANGE) if (f in ev) st[f] = ev[f];
        changed.add(st.id);
      }
      if (changed.size) later(DRAW_MS);
      const still = [...unknown].filter((id) => !byId.has(id) && !lookedFor.has(id));
      unknown.clear();
      for (const id of still) lookedFor.add(id);
      if (still.length && live === "open") readAgain({ stepId: still[0] });
    }

    function setLive(state, text) {
      live = state;
      liveNote.textContent = text;
      liveNote.className = state === "open" ? "live-state" : state === "lost" ? "bad-state" : "muted";
    }

    function stopStream() {
      clearTimeout(reconnect);
      reconnect = null;
      if (aborter) aborter.abort();
      aborter = null;
    }

    function onEvent(type, ev) {
      if (type === "step") {
        if (rereading) held.push(ev);
        const st = byId.get(ev.stepId);
        if (!st) {  // a forEach step's instance, made since the document was read
          readAgain(ev);
          return;
        }
        const was = `${st.status}/${st.attempt}`;
        for (const f of STEP_CHANGE) if (f in ev) st[f] = ev[f];
        window.HeddleTimeline.track(st);
        // Why it waited was read with the document: it holds while the step stays as it was.
        if (`${st.status}/${st.attempt}` !== was) {
          if (st.waitingFor || st.status === "running") delete doc.waitingFor;
          delete st.waitingFor;
        }
        changed.add(st.id);
        later(DRAW_MS);
      } else if (type === "run" || type === "end") {
        doc.status = ev.status;
        doc.finishedAt = ev.finishedAt;
        if (typeof ev.cancelRequested === "boolean") doc.cancelRequested = ev.cancelRequested;
        if (typeof ev.waiting === "boolean") {
          if (doc.waiting && !ev.waiting) delete doc.waitingFor;  // admitted
          doc.waiting = ev.waiting;
        }
        if ("reason" in ev) doc.reason = ev.reason;
        if (type === "run") later(DRAW_MS);
        else {  // the run is over: drawn now, then its document read once more
          setLive("ended", "");
          draw();
          reads.now();
        }
      }
    }

    function lost(text) {
      if (closed || TERMINAL_RUN.has(doc.status)) return;
      failures += 1;
      const wait = Math.min(30_000, 1000 * 2 ** (failures - 1));
      setLive("lost", `${text}: reading the run every ${fmtMs(every())}; reconnecting…`);
      reads.now();
      reconnect = setTimeout(() => { reconnect = null; openStream(); }, wait);
    }

    function openStream() {
      if (closed || TERMINAL_RUN.has(doc.status)) return;
      if (live !== "lost") setLive("connecting", "Connecting…");
      const mine = new AbortController();
      aborter = mine;
      const opened = () => {
        // The stream starts with the run's state and every step's: nothing missed meanwhile.
        failures = 0;
        reads.stop();
        setLive("open", "Following live");
      };
      readEvents(`/api/runs/${enc(runId)}/events`, mine.signal, opened, onEvent).then((r) => {
        if (aborter === mine) aborter = null;
        if (closed || live === "ended" || mine.signal.aborted) return;
        if (r.status === 200) lost("The live updates ended early");
        else if (r.status === 401) reads.stop();
        else lost(`The live updates failed: ${errorText(r)}`);
      }, () => {
        if (aborter === mine) aborter = null;
        if (!closed && live !== "ended" && !mine.signal.aborted) lost("The live updates were cut");
      });
    }

    // The run's document: read at the start, at the end, and while the stream is broken.
    const reads = poller(async () => {
      const r = await api("GET", "/api/runs/" + enc(runId));
      if (closed || live === "open") return false;  // the stream is newer than this read
      if (r.status === 200) {
        misses = 0;
        notice.replaceChildren();
        adopt(r.body);
        if (TERMINAL_RUN.has(doc.status)) {
          stopStream();
          setLive("ended", "");
          return false;
        }
        if (live === null) {
          openStream();
          return false;
        }
        return every();
      }
      if (r.status === 404 && !doc) {
        // A run answered with 202 is stored a moment later: keep looking, more slowly.
        misses += 1;
        put(notice, h("p", { class: "muted" }, `${errorText(r)}; looking again…`));
        return misses > 10 ? 4 * RUN_POLL_MS : RUN_POLL_MS;
      }
      put(notice, errorBox(r));
      return r.status === 0 || r.status >= 500 ? every() : false;
    }, RUN_POLL_MS);

    cancel.addEventListener("click", async () => {
      cancel.disabled = true;
      outcome.className = "outcome";
      outcome.textContent = "Cancelling…";
      const r = await api("POST", "/api/runs/" + enc(runId) + "/cancel");
      const text = {
        202: "Cancel requested: the run is stopping (202).",
        200: "The run was already cancelled (200).",
        409: `Not cancelled: ${errorText(r)} (409).`,
      }[r.status] || `Cancel failed: ${errorText(r)} (${r.status || "no answer"}).`;
      outcome.textContent = text;
      outcome.className = "outcome " + (r.status === 202 || r.status === 200 ? "ok" : "bad");
      if (live !== "open") reads.now();  // else the stream tells
    });
    retry.addEventListener("click", async () => {
      retry.disabled = true;
      outcome.className = "outcome";
      outcome.textContent = "Retrying…";
      const r = await api("POST", "/api/runs/" + enc(runId) + "/retry");
      retry.disabled = false;
      if ([200, 201, 202].includes(r.status) && r.body.runId) {
        location.hash = runHref(r.body.runId);
        return;
      }
      outcome.textContent = `Not retried: ${errorText(r)} (${r.status || "no answer"}).`;
      outcome.className = "outcome bad";
    });
    return () => {
      closed = true;
      reads.stop();
      stopStream();
      clearTimeout(ticker);
      clearTimeout(drawTimer);
      if (dag && dag.destroy) dag.destroy();
    };
  }

  // ---- Step ------------------------------------------------------------------------------

  function viewStep(runId, stepId) {
    const head = h("div", { class: "title" }, h("h1", { class: "mono" }, stepId));
    const meta = h("dl", { class: "meta", id: "step-meta" });
    const command = h("pre", { class: "command-full", id: "step-command" });
    const gate = h("div", { id: "gate" });  // an approval gate's message, answer and buttons
    const state = h("span", { id: "log-state", class: "muted" }, "Reading the log…");
    const follow = h("input", { type: "checkbox", id: "autoscroll", checked: true });
    const logBox = h("div", { class: "log", id: "log" });
    const notice = h("div");
    const attempts = new Map();   // attempt -> {lines, hidden, hiddenNote, count}
    const seen = new Set();       // cursors already shown (opaque strings)
    let pending = [];
    let flushTimer = null;
    let aborter = null;           // stops the log stream's fetch
    let ended = false;
    let closed = false;
    let retry = null;
    let lastCursor = null;

    add(main, [
      h("nav", { class: "crumbs" }, h("a", { href: "#/runs" }, "Runs"), " / ",
        h("a", { href: runHref(runId), class: "mono" }, runId), " / ", stepId),
      head, notice, meta, gate, command,
      h("div", { class: "log-bar" }, h("h2", {}, "Log"), state,
        h("label", {}, follow, " follow the end"),
        h("span", { class: "legend" }, h("span", { class: "line-stdout" }, "stdout"),
          h("span", { class: "line-stderr" }, "stderr"), h("span", { class: "line-heddle" }, "heddle"))),
      logBox,
    ]);

    function renderStep(st) {
      put(head, h("h1", { class: "mono" }, st.id), badge(st.status));
      head.querySelector(".badge").id = "step-status";
      const item = (k, ...v) => [h("dt", {}, k), h("dd", {}, ...v)];
      put(meta, ...[
        item("Attempt", st.attempt ? `${st.attempt} of ${(st.retries || 0) + 1}` : dash()),
        st.workflow ? item("Child run", st.childRun
          ? h("a", { href: runHref(st.childRun), class: "mono", id: "child-run" }, st.childRun) : dash(),
          ` (workflow ${st.workflow.name})`) : item("Runner", st.runner || dash()),
        item("Exit code", st.exitCode ?? dash()),
        item("Started", fmtTime(st.startedAt)),
        item("Finished", fmtTime(st.finishedAt)),
        item("Duration", duration(st.startedAt, st.finishedAt)),
        item("Depends on", (st.dependsOn || []).length
          ? st.dependsOn.map((d, i) => [i ? ", " : "", h("a", { href: stepHref(runId, d), class: "mono" }, d)])
          : dash()),
        item("Reason", st.reason || dash()),
        st.parent ? item("Instance of", h("a", { href: stepHref(runId, st.parent), class: "mono",
          id: "step-parent" }, st.parent), ` #${st.itemIndex}, item `, h("code", {}, st.item ?? "")) : [],
        st.forEach ? item("For each of", h("code", {}, st.forEach),
          st.maxParallel ? ` (at most ${st.maxParallel} at once)` : "") : [],
      ].flat());
      command.textContent = st.command || callText(st);
      renderGate(st);
    }

    // An approval gate (docs/approvals.md): its message; while it waits, Approve and Reject
    // (a comment asked for first); once answered, how, by whom and when.
    function renderGate(st) {
      if (!st.approval) {
        put(gate);
        return;
      }
      const outcome = h("span", { id: "gate-outcome", class: "outcome", "aria-live": "polite" });
      const answer = (verb) => async () => {
        const comment = window.prompt(`${verb === "approve" ? "Approve" : "Reject"} step ` +
          `${st.id}: a comment (optional)`, "");
        if (comment === null) return;  // the prompt was dismissed: no answer
        for (const b of gate.querySelectorAll("button")) b.disabled = true;
        outcome.className = "outcome";
        outcome.textContent = "Answering…";
        const path = `/api/runs/${enc(runId)}/steps/${enc(st.id)}/${verb}`;
        const r = await api("POST", path, JSON.stringify(comment ? { comment } : {}));
        if (r.status === 200) {
          refresh();
          return;
        }
        outcome.textContent = `Not answered: ${errorText(r)} (${r.status || "no answer"}).`;
        outcome.className = "outcome bad";
        for (const b of gate.querySelectorAll("button")) b.disabled = false;
      };
      const d = st.decision;
      put(gate, h("div", { class: "gate" },
        h("strong", {}, "Approval gate"),
        h("div", { class: "message", id: "gate-message" }, st.approval.message),
        st.status === "waiting" ? h("div", { class: "actions" },
          h("button", { id: "approve", onclick: answer("approve") }, "Approve"),
          h("button", { id: "reject", class: "danger", onclick: answer("reject") }, "Reject"),
          outcome) : null,
        d ? h("div", { id: "gate-decision" }, d.approved ? "Approved" : "Rejected",
          d.by === "timeout" ? " (timed out)" : ` by ${d.by}`, " at ", fmtTime(d.decidedAt),
          d.comment ? [": ", h("q", {}, d.comment)] : null) : null));
    }

    function setStatus(status) {
      const b = head.querySelector(".badge");
      if (b) {
        b.className = "badge " + stateClass(status);
        b.textContent = status;
      }
    }

    function group(attempt) {
      let g = attempts.get(attempt);
      if (g) return g;
      const hiddenNote = h("div", { class: "hidden-note muted" });
      const lines = h("div", { class: "lines" });
      const section = h("section", { class: "attempt", "data-attempt": attempt },
        h("h3", {}, attempt ? `Attempt ${attempt}` : "Notes (no attempt)"), hiddenNote, lines);
      g = { section, lines, hiddenNote, hidden: 0, count: 0 };
      attempts.set(attempt, g);
      // Attempts in order, whatever order their lines arrive in.
      const after = [...attempts.keys()].filter((a) => a > attempt).sort((a, b) => a - b)[0];
      logBox.insertBefore(section, after === undefined ? null : attempts.get(after).section);
      return g;
    }

    function hide(g, n, why) {
      g.hidden += n;
      g.hiddenNote.textContent = `${g.hidden} earlier line${g.hidden === 1 ? "" : "s"} ${why}`;
    }

    function lineEl(line) {
      const stream = ["stdout", "stderr", "heddle"].includes(line.stream) ? line.stream : "other";
      return h("div", { class: "line line-" + stream, "data-cursor": line.cursor },
        h("span", { class: "time", title: line.time || "" }, clock(line.time)),
        h("span", { class: "stream" }, line.stream),
        h("span", { class: "text" }, line.text));
    }

    function flush() {
      flushTimer = null;
      const atEnd = window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
      const batch = pending;
      pending = [];
      const frags = new Map();
      for (const line of batch) {
        const g = group(line.attempt || 0);
        if (!frags.has(g)) frags.set(g, document.createDocumentFragment());
        frags.get(g).appendChild(lineEl(line));
        g.count += 1;
      }
      for (const [g, frag] of frags) {
        g.lines.appendChild(frag);
        const extra = g.lines.childElementCount - MAX_DOM_LINES;
        if (extra > 0) {
          for (let i = 0; i < extra; i++) g.lines.firstChild.remove();
          hide(g, extra, "not kept on the page");
        }
      }
      if (follow.checked && atEnd && batch.length) window.scrollTo(0, document.body.scrollHeight);
    }

    function push(line) {
      const key = String(line.cursor);
      if (line.cursor !== undefined && line.cursor !== null) {
        if (seen.has(key)) return;
        seen.add(key);
        lastCursor = line.cursor;
      }
      pending.push(line);
      if (flushTimer === null) flushTimer = setTimeout(flush, 50);
    }

    async function refresh() {
      const r = await api("GET", `/api/runs/${enc(runId)}/steps/${enc(stepId)}?tail=0`);
      if (r.status === 200) renderStep(r.body);
    }

    function showEnd(end) {
      flush();
      setStatus(end.status);
      state.className = "ended";
      state.textContent = `Step ended: ${end.status}` +
        (end.exitCode !== null && end.exitCode !== undefined ? ` (exit code ${end.exitCode})` : "") +
        (end.reason ? ` — ${end.reason}` : "");
      refresh();
    }

    function onEvent(type, doc) {
      if (type === "message") push(doc);
      else if (type === "status") {
        setStatus(doc.status);
        refresh();
      } else if (type === "end") {
        ended = true;
        showEnd(doc);
      }
    }

    function lost(text, ms) {
      state.textContent = text;
      state.className = "bad-state";
      retry = setTimeout(openStream, ms);
    }

    function openStream() {
      if (closed || ended) return;
      let url = `/api/runs/${enc(runId)}/steps/${enc(stepId)}/logs?follow=1`;
      if (lastCursor !== null) url += "&after=" + enc(String(lastCursor));
      aborter = new AbortController();
      const opened = () => { state.textContent = "Following live"; state.className = "live-state"; };
      readEvents(url, aborter.signal, opened, onEvent).then((r) => {
        aborter = null;
        if (closed || ended) return;
        if (r.status === 200) lost("Log stream ended early; reconnecting…", 1000);
        else if (r.status !== 401) {
          // An error answer: show it, and ask again in a while, from the last line.
          put(notice, errorBox(r));
          lost("Log stream lost; trying again…", 3000);
        }
      }, () => {
        aborter = null;
        if (!closed && !ended) lost("Reconnecting…", 1000);
      });
    }

    async function start() {
      const r = await api("GET", `/api/runs/${enc(runId)}/steps/${enc(stepId)}?tail=${LOG_TAIL}`);
      if (closed) return;
      if (r.status !== 200) {
        put(notice, errorBox(r));
        if (r.status === 404 || r.status === 0 || r.status >= 500) retry = setTimeout(start, 2000);
        return;
      }
      notice.replaceChildren();
      const st = r.body;
      renderStep(st);
      for (const grp of st.logs || []) {
        const g = group(grp.attempt || 0);
        const shown = (grp.lines || []).length;
        if (grp.expired) hide(g, Math.max(grp.lineCount - shown, 0), "expired (log retention)");
        else if (grp.truncated) hide(g, grp.lineCount - shown, "not shown (the page reads the last " +
          `${LOG_TAIL} of each attempt)`);
        for (const line of grp.lines || []) push({ ...line, attempt: line.attempt ?? grp.attempt });
      }
      if (st.logsExpired) put(notice, h("p", { class: "muted" },
        "This step's log lines have expired (log retention)."));
      if (st.logsCursor !== null && st.logsCursor !== undefined) lastCursor = st.logsCursor;
      flush();
      openStream();
    }

    start();
    return () => {
      closed = true;
      clearTimeout(retry);
      clearTimeout(flushTimer);
      if (aborter) aborter.abort();
    };
  }

  // ---- Workflows -------------------------------------------------------------------------

  // A random idempotency key (crypto.randomUUID needs a secure context; this does not).
  function newKey() {
    const bytes = crypto.getRandomValues(new Uint8Array(16));
    return "page-" + Array.from(bytes, (x) => x.toString(16).padStart(2, "0")).join("");
  }

  // Run now and Pause/Resume for one workflow, kept across redraws (a poll must not reset
  // a click in flight). Clicks of Run now within KEY_WINDOW_MS of the last one send the
  // same Idempotency-Key: a double click makes one run, the second answered 200.
  function workflowControls(name, refresh) {
    let key = null;
    let lastClick = 0;
    let paused = false;
    const said = h("span", { class: "outcome", "data-outcome": name, "aria-live": "polite" });
    const run = h("button", { class: "primary", "data-run-now": name }, "Run now");
    const pause = h("button", { "data-pause": name }, "Pause");
    const tell = (ok, ...parts) => {
      said.className = "outcome " + (ok ? "ok" : "bad");
      put(said, ...parts);
    };
    run.addEventListener("click", async () => {
      const now = Date.now();
      if (key === null || now - lastClick > KEY_WINDOW_MS) key = newKey();
      lastClick = now;
      tell(true, "Starting…");
      const r = await api("POST", `/api/workflows/${enc(name)}/runs`, undefined,
        { "Idempotency-Key": key });
      if ([200, 201, 202].includes(r.status) && r.body.runId) {
        tell(true, r.status === 200 ? "Already started: " : "Started ",
          h("a", { href: runHref(r.body.runId), class: "mono", "data-started": name }, r.body.runId),
          ` (${r.status})`);
      } else tell(false, `Not started: ${errorText(r)} (${r.status || "no answer"})`);
      refresh();
    });
    pause.addEventListener("click", async () => {
      pause.disabled = true;
      const r = await api("PATCH", `/api/workflows/${enc(name)}`, JSON.stringify({ paused: !paused }));
      pause.disabled = false;
      if (r.status === 200) {
        set(r.body.paused, true);
        tell(true, r.body.paused ? "Paused." : "Resumed.");
      } else tell(false, `Not changed: ${errorText(r)} (${r.status || "no answer"})`);
      refresh();
    });
    function set(isPaused, scheduled) {
      paused = isPaused;
      pause.textContent = paused ? "Resume" : "Pause";
      pause.hidden = !scheduled;
    }
    return { run, pause, said, set };
  }

  function strip(runs) {
    // Oldest on the left, as time reads.
    return h("span", { class: "strip" }, [...runs].reverse().map((r) =>
      h("a", { href: runHref(r.runId), class: "tick " + stateClass(r.status),
        title: `${r.runId}: ${r.status}, ${r.createdAt}`, "data-status": r.status })));
  }

  function scheduleCell(wf) {
    if (!wf.schedule) return h("span", { class: "muted" }, "none (manual)");
    return [h("code", { class: "cron" }, wf.schedule), " ", h("span", { class: "muted" }, wf.timezone || "UTC"),
      wf.paused ? [" ", h("span", { class: "badge st-paused", "data-paused": "" }, "paused")] : null];
  }

  function firesCell(wf) {
    if (!wf.schedule) return dash();
    if (wf.paused) return h("span", { class: "muted" }, "none while paused");
    return h("span", { class: "fires" }, (wf.nextFires || []).map((t) => h("span", {}, fmtTime(t))));
  }

  function viewWorkflows() {
    const problem = h("div");
    const tbody = h("tbody", { id: "workflows-body" });
    const controls = new Map();
    add(main, [
      h("div", { class: "title" }, h("h1", {}, "Workflows")),
      problem,
      h("table", { class: "grid", id: "workflows" },
        h("thead", {}, h("tr", {}, ["Workflow", "Version", "Schedule", "Next fires", "Last run",
          "Recent runs", ""].map((t) => h("th", {}, t)))),
        tbody),
    ]);
    const p = poller(async () => {
      const r = await api("GET", "/api/workflows");
      if (r.status !== 200) {
        put(problem, errorBox(r));
        return true;
      }
      problem.replaceChildren();
      const list = r.body.workflows || [];
      if (!list.length) {
        put(tbody, h("tr", {}, h("td", { colspan: 7, class: "empty" },
          "No registered workflow: register one with POST /api/workflows (see the README).")));
        return true;
      }
      put(tbody, ...list.map((wf) => {
        let c = controls.get(wf.name);
        if (!c) {
          c = workflowControls(wf.name, () => p.now());
          controls.set(wf.name, c);
        }
        c.set(wf.paused, Boolean(wf.schedule));
        return h("tr", { "data-workflow": wf.name },
          h("td", {}, h("a", { href: workflowHref(wf.name), class: "mono" }, wf.name),
            wf.description ? h("div", { class: "command" }, wf.description) : null),
          h("td", { class: "num" }, `v${wf.version}`),
          h("td", { class: "schedule" }, scheduleCell(wf)),
          h("td", { class: "next-fires" }, firesCell(wf)),
          h("td", { class: "last-run" }, wf.lastRun
            ? [badge(wf.lastRun.status), " ", h("a", { href: runHref(wf.lastRun.runId), class: "mono" },
              wf.lastRun.runId)]
            : h("span", { class: "muted" }, "never run")),
          h("td", { class: "recent" }, (wf.recent || []).length ? strip(wf.recent) : dash()),
          h("td", { class: "wf-actions" }, h("div", { class: "actions" }, c.run, c.pause), c.said));
      }));
      return true;
    }, WORKFLOWS_POLL_MS);
    return p.stop;
  }

  // What changed from version a to version b: the workflow's own fields, then each step
  // added, removed or changed (field by field).
  function diffVersions(a, b) {
    const show = (v) => (v === undefined || v === null ? "–" : typeof v === "string" ? v : JSON.stringify(v));
    const out = [];
    for (const f of ["schedule", "timezone", "catchup", "description", "params", "env"]) {
      if (JSON.stringify(a[f]) !== JSON.stringify(b[f])) {
        out.push({ kind: "changed", what: f, detail: `${show(a[f])} → ${show(b[f])}` });
      }
    }
    const before = new Map(a.steps.map((st) => [st.id, st]));
    const after = new Map(b.steps.map((st) => [st.id, st]));
    for (const st of a.steps) if (!after.has(st.id)) out.push({ kind: "removed", what: st.id, detail: st.command });
    for (const st of b.steps) {
      const old = before.get(st.id);
      if (!old) {
        out.push({ kind: "added", what: st.id, detail: st.command });
        continue;
      }
      for (const f of new Set([...Object.keys(old), ...Object.keys(st)])) {
        if (JSON.stringify(old[f]) !== JSON.stringify(st[f])) {
          out.push({ kind: "changed", what: `${st.id}.${f}`, detail: `${show(old[f])} → ${show(st[f])}` });
        }
      }
    }
    return out;
  }

  function viewWorkflow(name, query) {
    const head = h("div", { class: "title" }, h("h1", { class: "mono" }, name));
    const meta = h("dl", { class: "meta", id: "workflow-meta" });
    const problem = h("div");
    const gridBox = h("div", { class: "run-grid-box", id: "grid" });
    const gridInfo = h("span", { class: "muted", id: "grid-info" });
    const newer = h("button", { id: "grid-newer", disabled: true }, "← Newer");
    const older = h("button", { id: "grid-older", disabled: true }, "Older →");
    const sizes = ["5", "10", "20", "50", "100"];
    const limit = sizes.includes(query.get("limit")) ? query.get("limit") : "20";
    const sizeSel = h("select", { id: "grid-limit", "aria-label": "runs per page" },
      sizes.map((n) => h("option", { value: n, selected: n === limit }, `${n} runs`)));
    const versionSel = h("select", { id: "version", "aria-label": "version" });
    const fromSel = h("select", { id: "diff-from", "aria-label": "compare from version" });
    const toSel = h("select", { id: "diff-to", "aria-label": "compare to version" });
    const stepsBox = h("div", { id: "version-steps" });
    const diffBox = h("div", { id: "diff" });
    const c = workflowControls(name, () => { info.now(); grid.now(); });
    const versions = new Map();  // number -> definition
    const cursors = [];          // the `before` of each page shown before this one
    let before = null;
    let latest = 0;
    add(main, [
      h("nav", { class: "crumbs" }, h("a", { href: "#/workflows" }, "Workflows"), " / ", name),
      head, h("div", { class: "actions" }, c.run, c.pause, c.said), problem, meta,
      h("div", { class: "section-bar" }, h("h2", {}, "History"), gridInfo,
        h("div", { class: "controls" }, sizeSel, newer, older)),
      gridBox,
      h("div", { class: "section-bar" }, h("h2", {}, "Versions"),
        h("label", { class: "muted" }, "show ", versionSel)),
      stepsBox,
      h("div", { class: "section-bar" }, h("h2", {}, "Changes"),
        h("label", { class: "muted" }, "from ", fromSel), h("label", { class: "muted" }, "to ", toSel)),
      diffBox,
    ]);

    async function version(n) {
      if (versions.has(n)) return versions.get(n);
      const r = await api("GET", `/api/workflows/${enc(name)}?version=${n}`);
      if (r.status !== 200) {
        put(problem, errorBox(r));
        return null;
      }
      versions.set(n, r.body);
      return r.body;
    }

    async function showVersion() {
      const v = await version(Number(versionSel.value));
      if (!v) return;
      put(stepsBox, h("p", { class: "muted" }, `v${v.version}, registered `, fmtTime(v.registeredAt),
        v.schedule ? [", schedule ", h("code", {}, v.schedule), ` (${v.timezone || "UTC"})`] : ", no schedule"),
      h("table", { class: "grid", id: "version-steps-table" },
        h("thead", {}, h("tr", {}, ["Step", "Command", "Depends on", "Retries", "Timeout"].map((x) => h("th", {}, x)))),
        h("tbody", {}, v.steps.map((st) => h("tr", { "data-step": st.id },
          h("td", { class: "mono" }, st.id),
          h("td", {}, h("code", { class: "command-cell" }, st.command || callText(st))),
          h("td", { class: "mono" }, (st.dependsOn || []).join(", ") || dash()),
          h("td", { class: "num" }, st.retries ?? 0),
          h("td", { class: "num" }, st.timeoutSeconds ? `${st.timeoutSeconds} s` : "default"))))));
    }

    async function showDiff() {
      const [a, b] = await Promise.all([version(Number(fromSel.value)), version(Number(toSel.value))]);
      if (!a || !b) return;
      const changes = diffVersions(a, b);
      put(diffBox, changes.length
        ? h("ul", { class: "diff", id: "diff-list" }, changes.map((ch) =>
          h("li", { class: "diff-" + ch.kind, "data-kind": ch.kind },
            h("span", { class: "diff-kind" }, ch.kind), " ", h("code", {}, ch.what), " ",
            h("span", { class: "diff-detail" }, ch.detail))))
        : h("p", { class: "muted", id: "diff-list" }, `v${a.version} and v${b.version} are the same.`));
    }

    function fillVersions(n) {
      if (n === latest) return;
      const had = latest;
      latest = n;
      const opts = (sel, chosen) => put(sel, ...Array.from({ length: n }, (_, i) => n - i)
        .map((v) => h("option", { value: v, selected: v === chosen }, `v${v}`)));
      opts(versionSel, had && Number(versionSel.value) !== had ? Number(versionSel.value) : n);
      opts(toSel, n);
      opts(fromSel, Math.max(1, n - 1));
      showVersion();
      showDiff();
    }

    versionSel.addEventListener("change", showVersion);
    fromSel.addEventListener("change", showDiff);
    toSel.addEventListener("change", showDiff);

    const info = poller(async () => {
      const r = await api("GET", `/api/workflows/${enc(name)}`);
      if (r.status !== 200) {
        put(problem, errorBox(r));
        return r.status !== 404;
      }
      const wf = r.body;
      c.set(wf.paused, Boolean(wf.schedule));
      put(head, h("h1", { class: "mono" }, name), h("span", { class: "muted" }, `v${wf.latestVersion}`),
        wf.paused ? h("span", { class: "badge st-paused" }, "paused") : null);
      const item = (k, ...v) => [h("dt", {}, k), h("dd", {}, ...v)];
      put(meta, ...[
        item("Description", wf.description || dash()),
        item("Schedule", scheduleCell(wf)),
        item("Next fires", firesCell(wf)),
        item("Catch up", wf.schedule ? (wf.catchup ? "yes: missed slots run" : "no: only the latest missed slot") : dash()),
        item("Parameters", (wf.params || []).length ? wf.params.map((pr, i) => [i ? ", " : "",
          h("code", {}, pr.name), pr.default !== undefined && pr.default !== null ? ` = ${pr.default}` : " (required)"]) : dash()),
        item("Recent runs", (wf.recent || []).length ? strip(wf.recent) : dash()),
      ].flat());
      fillVersions(wf.latestVersion);
      return true;
    }, WORKFLOWS_POLL_MS * 2);

    function cell(runId, step, state) {
      if (!state) return h("td", { class: "cell none", title: `${step}: not in this run` });
      return h("td", { class: "cell", "data-run": runId, "data-step": step },
        h("a", { href: stepHref(runId, step), class: "sq " + stateClass(state), "data-state": state,
          title: `${step} in ${runId}: ${state}`, "aria-label": `${step} in ${runId}: ${state}` }));
    }

    function renderGrid(g) {
      const runs = [...g.runs].reverse();  // oldest on the left, newest on the right
      if (!runs.length) {
        put(gridBox, h("p", { class: "muted" }, "No runs yet."));
        gridInfo.textContent = "";
        return;
      }
      gridInfo.textContent = `${runs.length} run${runs.length === 1 ? "" : "s"}` +
        (cursors.length ? `, page ${cursors.length + 1}` : ", the newest");
      const headRow = h("tr", {}, h("th", { class: "corner" }, "step \\ run"),
        runs.map((r) => h("th", { class: "run-col", "data-run": r.runId },
          h("a", { href: runHref(r.runId), class: "sq run " + stateClass(r.status),
            title: `${r.runId}: ${r.status}, created ${r.createdAt}` }),
          h("span", { class: "run-time" }, fmtTime(r.createdAt)))));
      const body = g.steps.map((step) => h("tr", { "data-step": step },
        h("th", { class: "mono step-name", title: step }, step),
        runs.map((r) => (r.states === null
          ? h("td", { class: "cell none", title: "too many steps to show; see the run" })
          : cell(r.runId, step, r.states[step])))));
      put(gridBox, h("table", { class: "run-grid", id: "run-grid" }, h("thead", {}, headRow),
        h("tbody", {}, body)));
    }

    const grid = poller(async () => {
      const q = new URLSearchParams({ limit: sizeSel.value });
      if (before) q.set("before", before);
      const r = await api("GET", `/api/workflows/${enc(name)}/grid?${q}`);
      if (r.status !== 200) {
        put(gridBox, errorBox(r));
        return r.status !== 404;
      }
      renderGrid(r.body);
      older.disabled = !r.body.next;
      older.dataset.next = r.body.next || "";
      newer.disabled = cursors.length === 0;
      return true;
    }, GRID_POLL_MS);

    older.addEventListener("click", () => {
      if (!older.dataset.next) return;
      cursors.push(before);
      before = older.dataset.next;
      older.disabled = true;
      grid.now();
    });
    newer.addEventListener("click", () => {
      if (!cursors.length) return;
      before = cursors.pop();
      newer.disabled = true;
      grid.now();
    });
    sizeSel.addEventListener("change", () => {
      cursors.length = 0;
      before = null;
      grid.now();
    });
    return () => {
      info.stop();
      grid.stop();
    };
  }

  // ---- Runners ---------------------------------------------------------------------------

  // The step a runner (or a pod's runner) holds, as a link.
  function holdsCell(rn) {
    return h("td", { class: "holds" }, rn.runId && rn.stepId
      ? [h("a", { href: stepHref(rn.runId, rn.stepId), class: "mono" }, `${rn.runId} / ${rn.stepId}`),
        rn.attempt ? h("span", { class: "muted" }, ` attempt ${rn.attempt}`) : null]
      : dash());
  }

  // A runner pod (in a cluster whose orchestrator watches them): a pod whose agent is not in
  // the registry (it never registered: crash-looping, not started yet; or it left) says so.
  function podRow(pod) {
    return h("tr", { "data-pod": pod.name, "data-registered": String(pod.registered),
      class: pod.registered ? "" : "pod-unregistered" },
    h("td", { class: "mono" }, pod.name),
    h("td", { class: "pod-runner" }, pod.registered
      ? [badge(pod.status), " ", h("span", { class: "mono" }, pod.runner)]
      : [h("span", { class: "badge st-unregistered", title: "its runner agent never registered " +
        "(crash-looping, not started yet) or has left the pool" }, "not registered"), " ",
      h("span", { class: "mono muted" }, pod.runner)]),
    h("td", { class: "phase" }, pod.phase),
    h("td", { class: "ready" }, pod.ready ? "yes" : "no"),
    h("td", { class: "num restarts" }, pod.restarts),
    h("td", { class: "node" }, pod.node || dash()),
    h("td", { class: "reason" }, pod.reason || dash()),
    h("td", { class: "last-termination" }, pod.lastTermination || dash()),
    holdsCell(pod),
    h("td", {}, fmtTime(pod.seenAt)));
  }

  function viewRunners() {
    const summary = h("div", { class: "cards", id: "pool-summary" });
    const problem = h("div");
    const tbody = h("tbody", { id: "runners-body" });
    const podsBody = h("tbody", { id: "pods-body" });
    const podsInfo = h("span", { class: "muted", id: "pods-info" });
    const podsBar = h("div", { class: "section-bar", hidden: true }, h("h2", {}, "Pods"), podsInfo);
    const podsTable = h("table", { class: "grid", id: "pods", hidden: true },
      h("thead", {}, h("tr", {}, ["Pod", "Runner", "Phase", "Ready", "Restarts", "Node", "Reason",
        "Last termination", "Holds", "Seen"].map((t) => h("th", {}, t)))),
      podsBody);
    add(main, [
      h("div", { class: "title" }, h("h1", {}, "Runners")),
      summary, problem,
      h("table", { class: "grid", id: "runners" },
        h("thead", {}, h("tr", {}, ["Runner", "Status", "Holds", "For", "Pod", "Node", "Pid",
          "Version", "Started", "Last seen"].map((t) => h("th", {}, t)))),
        tbody),
      podsBar, podsTable,
    ]);
    const card = (label, value, id) => h("div", { class: "card" },
      h("div", { class: "value", id }, String(value)), h("div", { class: "label" }, label));
    const p = poller(async () => {
      const r = await api("GET", "/api/runners");
      if (r.status !== 200) {
        put(problem, errorBox(r));
        return true;
      }
      problem.replaceChildren();
      const pool = r.body;
      put(summary, card("total", pool.total, "pool-total"),
        card("available", pool.available, "pool-available"),
        card("leased", (pool.leased || []).length, "pool-leased"));
      const pods = pool.pods || [];
      podsBar.hidden = podsTable.hidden = !pods.length;
      const strays = pods.filter((pod) => !pod.registered).length;
      podsInfo.textContent = `${pods.length} pod${pods.length === 1 ? "" : "s"}` +
        (strays ? `, ${strays} not registered` : "");
      put(podsBody, ...pods.map(podRow));
      const runners = pool.runners || [];
      if (!runners.length) {
        put(tbody, h("tr", {}, h("td", { colspan: 10, class: "empty" },
          "No runner in the pool: start one with heddle runner.")));
        return true;
      }
      put(tbody, ...runners.map((rn) => h("tr", { "data-runner": rn.name },
        h("td", { class: "mono" }, rn.name),
        h("td", {}, badge(rn.status)),
        holdsCell(rn),
        h("td", { class: "held-for num" }, rn.status === "busy" && rn.heldSince
          ? h("span", { title: `since ${rn.heldSince}` }, duration(rn.heldSince, null)) : dash()),
        h("td", { class: "pod" }, rn.pod || dash()),
        h("td", { class: "node" }, rn.node || dash()),
        h("td", { class: "num" }, rn.pid ?? dash()),
        h("td", {}, rn.version || dash()),
        h("td", {}, fmtTime(rn.startedAt)),
        h("td", {}, rn.secondsSinceSeen !== null && rn.secondsSinceSeen !== undefined
          ? h("span", { title: rn.lastSeenAt || "" }, `${fmtMs(rn.secondsSinceSeen * 1000)} ago`)
          : fmtTime(rn.lastSeenAt)))));
      return true;
    }, RUNNERS_POLL_MS);
    return p.stop;
  }

  // ---- routing ---------------------------------------------------------------------------

  let cleanup = null;

  function route() {
    if (cleanup) cleanup();
    cleanup = null;
    const raw = (location.hash || "#/runs").replace(/^#\/?/, "");
    const [path, search] = raw.split("?", 2);
    let parts;
    try {
      parts = path.split("/").filter(Boolean).map(decodeURIComponent);
    } catch {
      parts = ["?"];
    }
    const query = new URLSearchParams(search || "");
    const top = parts[0] || "runs";
    for (const a of document.querySelectorAll("[data-nav]")) {
      a.classList.toggle("active", a.dataset.nav === top);
    }
    main.replaceChildren();
    window.scrollTo(0, 0);
    forget.hidden = !token();
    if (top === "runs" && parts.length <= 1) {
      document.title = "Runs · Heddle";
      cleanup = viewRuns(query);
    } else if (top === "runs" && parts.length === 2) {
      document.title = `${parts[1]} · Heddle`;
      cleanup = viewRun(parts[1]);
    } else if (top === "runs" && parts.length === 4 && parts[2] === "steps") {
      document.title = `${parts[3]} of ${parts[1]} · Heddle`;
      cleanup = viewStep(parts[1], parts[3]);
    } else if (top === "workflows" && parts.length <= 1) {
      document.title = "Workflows · Heddle";
      cleanup = viewWorkflows();
    } else if (top === "workflows" && parts.length === 2) {
      document.title = `${parts[1]} · Heddle`;
      cleanup = viewWorkflow(parts[1], query);
    } else if (top === "submit") {
      document.title = "Submit · Heddle";
      cleanup = viewSubmit();
    } else if (top === "runners") {
      document.title = "Runners · Heddle";
      cleanup = viewRunners();
    } else {
      add(main, [h("h1", {}, "Not found"), h("p", {}, "No page at ", h("code", {}, location.hash),
        ". ", h("a", { href: "#/runs" }, "See the runs"), ".")]);
    }
  }

  window.addEventListener("hashchange", route);
  forget.addEventListener("click", forgetToken);
  document.getElementById("namespace").addEventListener("change", chooseNamespace);
  takeTokenFromUrl();
  loadNamespaces().then(route);
})();
