// Switchyard dashboard. Plain JavaScript, no dependencies, no build step.
// Every piece of data reaches the page through textContent or attributes,
// never innerHTML. API paths are relative, so the page works under any
// mount prefix.
"use strict";

(function () {
  const TOKEN_KEY = "switchyard.token";
  const POLL_MS = 2000;
  const HISTORY = 90; // samples kept per lane for the sparkline (3 min)

  const state = {
    me: null,
    view: "lanes",
    taskID: "",
    history: {}, // lane -> [depth, ...]
    lanes: [],
    laneLast: {}, // lane -> its last pause or resume ({lane, action, paused, actor, at})
    laneHistory: true, // false once the API says there is none (no ledger) or not for this token
    tasksNext: "",
    timer: 0,
    busy: false,
    sig: {}, // view -> signature of the data last rendered
    hist: null, // the last GET history answer
    histAt: 0, // when it was asked for (ms)
    histOK: true, // false once the API says there is none (no ledger) or not for this token
    deadSel: new Set(), // IDs of the dead letters selected
    taskSel: new Set(), // IDs of the tasks selected
  };
  const HIST_POLL_MS = 15000; // the servers write their counts once a heartbeat
  const LIVE_STATES = ["queued", "running", "retry_wait", "awaiting_review", "awaiting_event"];

  // ---- helpers -------------------------------------------------------

  const $ = (id) => document.getElementById(id);

  // el builds an element: el("td", {class: "x", "data-id": id}, "text", child...)
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "onclick") e.addEventListener("click", v);
      else if (k === "title") e.title = String(v);
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const k of kids) {
      if (k === undefined || k === null) continue;
      e.append(k instanceof Node ? k : document.createTextNode(String(k)));
    }
    return e;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  function fmtDur(ms) {
    if (ms === undefined || ms === null || isNaN(ms)) return "–";
    if (ms < 1) return "0 ms";
    if (ms < 1000) return Math.round(ms) + " ms";
    const s = ms / 1000;
    if (s < 9.95) return s.toFixed(1) + " s";
    // Round to whole seconds first, then split: 239.6 s is "4 m 0 s",
    // never "3 m 60 s".
    const total = Math.round(s);
    if (total < 60) return total + " s";
    const m = Math.floor(total / 60);
    if (m < 60) return m + " m " + (total - m * 60) + " s";
    const h = Math.floor(m / 60);
    if (h < 48) return h + " h " + (m - h * 60) + " m";
    return Math.floor(h / 24) + " d " + (h % 24) + " h";
  }

  // For the dashboard's browser test.
  window.switchyardDashboard = { fmtDur };

  function ago(iso) {
    if (!iso) return "–";
    const t = Date.parse(iso);
    if (isNaN(t)) return iso;
    const d = Date.now() - t;
    return d < 0 ? "in " + fmtDur(-d) : fmtDur(d) + " ago";
  }

  // timeCell shows how long ago iso was ("3 s ago"), or with mode "for"
  // how long it has lasted ("3 s"); tickTimes keeps it current.
  function timeCell(iso, mode) {
    return el("time", { datetime: iso || "", title: iso || "", "data-mode": mode || "ago" }, mode === "for" ? since(iso) : ago(iso));
  }

  function since(iso) {
    const t = Date.parse(iso || "");
    return isNaN(t) ? "–" : fmtDur(Math.max(0, Date.now() - t));
  }

  // changed reports whether data differs from what view last rendered, so
  // unchanged rows are left alone (no flicker, open details stay open,
  // buttons stay put under the pointer).
  function changed(view, data) {
    const sig = JSON.stringify(data);
    if (state.sig[view] === sig) return false;
    state.sig[view] = sig;
    return true;
  }

  // tickTimes refreshes every relative time in place.
  function tickTimes() {
    for (const t of document.querySelectorAll("time[datetime]")) {
      const iso = t.getAttribute("datetime");
      if (iso) t.textContent = t.dataset.mode === "for" ? since(iso) : ago(iso);
    }
  }

  // attemptText is a task's attempt cell: the latest attempt's number, or
  // "next N" for a task lined up to run again (its attempt field can
  // already be the next attempt's number: ledger.Task.NextAttempt).
  function attemptText(t, sep) {
    const n = t.next_attempt ? "next " + t.next_attempt : String(t.attempt);
    return n + (t.max_attempts ? sep + t.max_attempts : "");
  }

  function badge(text, kind) {
    return el("span", { class: "badge " + (kind || text || ""), "data-testid": "badge" }, text || "–");
  }

  function pretty(raw) {
    if (raw === undefined || raw === null) return "";
    try {
      return JSON.stringify(raw, null, 2);
    } catch (e) {
      return String(raw);
    }
  }

  function toast(msg, bad) {
    const t = $("toast");
    t.textContent = msg;
    t.className = "toast" + (bad ? " bad" : "");
    t.hidden = false;
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => (t.hidden = true), bad ? 8000 : 4000);
  }

  function isAdmin() {
    return state.me && state.me.role === "admin";
  }

  // ---- API -----------------------------------------------------------

  class APIError extends Error {
    constructor(status, msg) {
      super(msg);
      this.status = status;
    }
  }

  async function api(method, path, body) {
    const token = sessionStorage.getItem(TOKEN_KEY) || "";
    const headers = { Authorization: "Bearer " + token, Accept: "application/json" };
    const init = { method, headers, cache: "no-store", credentials: "omit" };
    if (method !== "GET") {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body || {});
    }
    let res;
    try {
      res = await fetch("api/v1/" + path, init);
    } catch (e) {
      setLive(false, "offline");
      throw new APIError(0, "the server did not answer: " + e.message);
    }
    let data = null;
    try {
      data = await res.json();
    } catch (e) {
      data = null;
    }
    if (res.status === 401) {
      showLogin((data && data.error) || "Sign in again.");
      throw new APIError(401, (data && data.error) || "unauthorized");
    }
    if (!res.ok) {
      throw new APIError(res.status, (data && data.error) || res.status + " " + res.statusText);
    }
    setLive(true);
    return data;
  }

  function setLive(ok, text) {
    const l = $("live");
    l.className = "live " + (ok ? "ok" : "bad");
    $("live-text").textContent = ok ? "live" : text || "disconnected";
  }

  // ---- login ---------------------------------------------------------

  function showLogin(msg) {
    $("token-error").textContent = msg || "";
    const d = $("login");
    if (!d.open) d.showModal();
    $("token-input").focus();
  }

  async function signIn(token) {
    sessionStorage.setItem(TOKEN_KEY, token);
    try {
      state.me = await api("GET", "whoami");
    } catch (e) {
      sessionStorage.removeItem(TOKEN_KEY);
      showLogin(e.message);
      return false;
    }
    if (state.me.role === "enqueue") {
      sessionStorage.removeItem(TOKEN_KEY);
      state.me = null;
      showLogin("This token may only enqueue tasks; the dashboard needs a read or admin token.");
      return false;
    }
    state.laneLast = {};
    state.laneHistory = !state.me.tenant;
    state.histOK = !state.me.tenant;
    state.hist = null;
    state.histAt = 0;
    $("history-note").hidden = !state.me.tenant;
    $("history-note").textContent = state.me.tenant ? "The history counts every tenant's tasks: it is not shown to a tenant-scoped token." : "";
    // Clear the last token's chart now, not at the next lanes refresh: a
    // tenant-scoped token must never be left looking at every tenant's
    // history.
    renderHistory();
    const who = $("whoami");
    who.textContent = state.me.name + " · " + state.me.role + (state.me.tenant ? " · tenant " + state.me.tenant : "");
    document.body.classList.toggle("is-admin", isAdmin());
    document.body.classList.add("signed-in");
    return true;
  }

  // ---- confirm dialog -----------------------------------------------

  // ask shows a modal; with input set, it asks for text (required unless
  // input.optional). It resolves to the text (or true), or null when cancelled.
  function ask(title, text, okLabel, input) {
    return new Promise((resolve) => {
      const d = $("confirm");
      $("confirm-title").textContent = title;
      $("confirm-text").textContent = text;
      $("confirm-ok").textContent = okLabel || "OK";
      $("confirm-error").textContent = "";
      const box = $("confirm-input");
      $("confirm-input-label").hidden = !input;
      box.value = "";
      if (input) $("confirm-input-name").textContent = input.label;
      const done = (v) => {
        $("confirm-form").onsubmit = null;
        $("confirm-cancel").onclick = null;
        d.onclose = null;
        if (d.open) d.close();
        resolve(v);
      };
      $("confirm-form").onsubmit = (ev) => {
        ev.preventDefault();
        if (input) {
          const v = box.value.trim();
          if (!v && !input.optional) {
            $("confirm-error").textContent = input.label + " is required.";
            return;
          }
          done(v);
        } else {
          done(true);
        }
      };
      $("confirm-cancel").onclick = () => done(null);
      d.onclose = () => done(null);
      d.showModal();
      (input ? box : $("confirm-ok")).focus();
    });
  }

  // ---- lanes ---------------------------------------------------------

  function sparkline(values) {
    const NS = "http://www.w3.org/2000/svg";
    const w = 160, h = 36;
    const svg = document.createElementNS(NS, "svg");
    svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
    svg.setAttribute("class", "spark");
    svg.setAttribute("preserveAspectRatio", "none");
    svg.setAttribute("aria-label", "depth over time");
    const base = document.createElementNS(NS, "line");
    base.setAttribute("x1", "0");
    base.setAttribute("x2", String(w));
    base.setAttribute("y1", String(h - 1));
    base.setAttribute("y2", String(h - 1));
    base.setAttribute("class", "base");
    svg.append(base);
    if (values.length < 2) return svg;
    const max = Math.max(1, ...values);
    const step = w / (HISTORY - 1);
    const x0 = w - (values.length - 1) * step;
    const pts = values.map((v, i) => [x0 + i * step, h - 2 - (v / max) * (h - 4)]);
    const line = pts.map((p) => p[0].toFixed(1) + "," + p[1].toFixed(1)).join(" ");
    const area = document.createElementNS(NS, "polygon");
    area.setAttribute("points", `${pts[0][0].toFixed(1)},${h} ${line} ${pts[pts.length - 1][0].toFixed(1)},${h}`);
    area.setAttribute("class", "area");
    const pl = document.createElementNS(NS, "polyline");
    pl.setAttribute("points", line);
    pl.setAttribute("class", "line");
    svg.append(area, pl);
    return svg;
  }

  function stat(label, value, cls) {
    return el("div", { class: "stat " + (cls || "") }, el("span", { class: "v" }, value), el("span", { class: "l" }, label));
  }

  function laneCard(l) {
    const depth = l.ready + l.in_flight + l.delayed;
    const ratio = l.objective_ms > 0 ? l.oldest_ready_ms / l.objective_ms : 0;
    const bar = el("div", { class: "bar" });
    const fill = el("div", { class: "fill " + (l.late ? "late" : ratio > 0.5 ? "warn" : "ok") });
    fill.style.width = Math.min(100, Math.round(ratio * 100)) + "%";
    bar.append(fill);
    const flags = el("div", { class: "flags" });
    if (l.paused) flags.append(badge("paused", "paused"));
    if (!l.pause_known) flags.append(badge("pause state unknown (needs the ledger)", "unknown"));
    if (l.late) flags.append(badge("late", "late"));
    if (l.dead_lettered > 0 && !(state.me && state.me.tenant)) flags.append(badge(l.dead_lettered + " dead", "dead"));
    const actions = el("div", { class: "card-actions admin-only" });
    if (state.me && !state.me.tenant && l.pause_known) {
      actions.append(
        el("button", {
          type: "button", class: "ghost small", "data-testid": (l.paused ? "resume-" : "pause-") + l.lane,
          title: l.paused && l.paused_by ? "paused by " + l.paused_by : "",
          onclick: () => pauseLane(l.lane, !l.paused),
        }, l.paused ? "Resume" : "Pause")
      );
    }
    const last = state.laneLast[l.lane];
    if (l.dead_lettered > 0) {
      actions.append(el("a", { href: "#dead", class: "small", onclick: () => ($("dead-lane").value = l.lane) }, "Dead letters →"));
    }
    return el("article", { class: "lane" + (l.late ? " is-late" : "") + (l.paused ? " is-paused" : ""), "data-testid": "lane-" + l.lane, "data-lane": l.lane },
      el("header", {}, el("h3", {}, l.lane), flags),
      el("div", { class: "depth" }, el("span", { class: "big", "data-testid": "lane-depth" }, depth), el("span", { class: "l" }, "depth"), sparkline(state.history[l.lane] || [])),
      el("div", { class: "stats" },
        stat("ready", l.ready), stat("in flight", l.in_flight), stat("delayed", l.delayed), stat("dead", l.dead_lettered, l.dead_lettered ? "bad" : "")),
      el("div", { class: "age" },
        el("span", {}, "oldest ", el("b", {}, l.ready ? fmtDur(l.oldest_ready_ms) : "–"), l.objective_ms ? " / objective " + fmtDur(l.objective_ms) : ""),
        bar),
      last ? el("div", { class: "lane-last", "data-testid": "lane-last" },
        (last.paused ? "paused" : "resumed") + " by " + (last.actor || "someone") + " ", timeCell(last.at)) : null,
      actions);
  }

  // renderLanes rebuilds a lane's card only when its figures change; the
  // sparkline is redrawn on every poll. Buttons stay put under the pointer.
  function renderLanes() {
    const box = $("lanes");
    $("lanes-empty").hidden = state.lanes.length > 0;
    const cards = new Map(Array.from(box.children).map((c) => [c.dataset.lane, c]));
    let dead = 0;
    let prev = null;
    for (const l of state.lanes) {
      dead += l.dead_lettered;
      const sig = JSON.stringify([l, state.laneLast[l.lane] || null, state.me && state.me.role, state.me && state.me.tenant]);
      let card = cards.get(l.lane);
      cards.delete(l.lane);
      if (!card || card.dataset.sig !== sig) {
        const fresh = laneCard(l);
        fresh.dataset.sig = sig;
        if (card) card.replaceWith(fresh);
        card = fresh;
      } else {
        card.querySelector("svg.spark").replaceWith(sparkline(state.history[l.lane] || []));
      }
      // Keep the cards in the lanes' order.
      const want = prev ? prev.nextSibling : box.firstChild;
      if (want !== card) box.insertBefore(card, want);
      prev = card;
    }
    for (const c of cards.values()) c.remove();
    setDeadCount(dead);
    syncLaneSelects();
    renderHistory();
  }

  // syncLaneSelects keeps the lane pickers (dead-letter filter, history,
  // bulk move target) in step with the lanes.
  function syncLaneSelects() {
    const want = state.lanes.map((l) => l.lane);
    for (const [id, first] of [["dead-lane", 1], ["history-lane", 1], ["dead-bulk-to", 0]]) {
      const sel = $(id);
      const have = Array.from(sel.options).slice(first).map((o) => o.value);
      if (want.join() === have.join()) continue;
      const cur = sel.value;
      while (sel.options.length > first) sel.remove(first);
      for (const n of want) sel.append(el("option", { value: n }, n));
      sel.value = cur;
      if (!sel.value && want.length) sel.value = first ? "" : want[0];
    }
  }

  // ---- history (processed / failed / dead per minute, last hour) ------

  async function pollHistory(force) {
    if (!state.histOK) return;
    if (!force && Date.now() - state.histAt < HIST_POLL_MS) return;
    state.histAt = Date.now();
    const lane = $("history-lane").value;
    try {
      state.hist = await api("GET", "history?minutes=60" + (lane ? "&lane=" + encodeURIComponent(lane) : ""));
    } catch (e) {
      if (e.status !== 501 && e.status !== 403) throw e;
      state.histOK = false;
      state.hist = null;
      $("history-note").textContent = e.status === 501 ? "The history needs a ledger: " + e.message + "." : e.message;
      $("history-note").hidden = false;
    }
    renderHistory();
  }

  function renderHistory() {
    const box = $("history-chart");
    const data = state.hist;
    $("history").classList.toggle("is-off", !state.histOK);
    if (!data || !state.histOK) {
      delete state.sig.history;
      clear(box);
      for (const k of ["processed", "failed", "dead"]) $("history-" + k).textContent = "–";
      return;
    }
    const lane = $("history-lane").value;
    let series = data.total;
    if (lane) series = (data.lanes || []).find((l) => l.lane === lane) || series;
    if (!changed("history", [lane, series])) return;
    for (const k of ["processed", "failed", "dead"]) $("history-" + k).textContent = String(series[k + "_total"] || 0);
    clear(box);
    box.append(historyChart(series, data.minutes), el("div", { class: "hchart-axis" },
      el("span", {}, "−" + data.minutes + " min"),
      el("span", { "data-testid": "history-peak" }, "peak " + Math.max(0, ...series.processed, ...series.dead) + " / min"),
      el("span", {}, "now")));
  }

  function historyChart(series, minutes) {
    const NS = "http://www.w3.org/2000/svg";
    const w = 600, h = 150;
    const svg = document.createElementNS(NS, "svg");
    svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
    svg.setAttribute("class", "hchart");
    svg.setAttribute("preserveAspectRatio", "none");
    svg.setAttribute("data-testid", "history-chart");
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", `processed ${series.processed_total}, failed ${series.failed_total}, dead ${series.dead_total} over the last ${minutes} minutes`);
    for (const y of [2, h / 2, h - 1]) {
      const g = document.createElementNS(NS, "line");
      g.setAttribute("x1", "0");
      g.setAttribute("x2", String(w));
      g.setAttribute("y1", String(y));
      g.setAttribute("y2", String(y));
      g.setAttribute("class", "grid-line");
      svg.append(g);
    }
    const max = Math.max(1, ...series.processed, ...series.failed, ...series.dead);
    const step = minutes > 1 ? w / (minutes - 1) : w;
    for (const k of ["processed", "failed", "dead"]) {
      const vals = series[k] || [];
      const pl = document.createElementNS(NS, "polyline");
      pl.setAttribute("points", vals.map((v, i) => (i * step).toFixed(1) + "," + (h - 2 - (v / max) * (h - 6)).toFixed(1)).join(" "));
      pl.setAttribute("class", k);
      pl.setAttribute("data-series", k);
      svg.append(pl);
    }
    return svg;
  }

  // setDeadCount shows the dead letters on the tab: the lanes' count (every
  // tenant's) for an unscoped token; for a tenant's token, the number of
  // its own the last listing found, never the others'.
  function setDeadCount(all) {
    const n = state.me && state.me.tenant ? state.deadMine : all;
    $("count-dead").textContent = n ? String(n) : "";
  }

  async function pollLanes() {
    const data = await api("GET", "lanes");
    state.lanes = data.lanes || [];
    for (const l of state.lanes) {
      const h = state.history[l.lane] || (state.history[l.lane] = []);
      h.push(l.ready + l.in_flight + l.delayed);
      if (h.length > HISTORY) h.shift();
    }
    await pollLaneHistory();
    if (state.view === "lanes") await pollHistory(false);
    if (state.me && state.me.tenant) {
      // The lanes' dead counts are every tenant's: count this tenant's own.
      const d = await api("GET", "dead?limit=1000");
      state.deadMine = (d.dead_letters || []).length;
    }
    if (state.view === "lanes") renderLanes();
    else {
      let dead = 0;
      for (const l of state.lanes) dead += l.dead_lettered;
      setDeadCount(dead);
    }
  }

  // pollLaneHistory keeps each lane's last pause or resume (who, when) from
  // the lanes' history. Without a ledger (501) or for a tenant-scoped token
  // (403) there is none to show, and the page stops asking.
  async function pollLaneHistory() {
    if (!state.laneHistory) return;
    try {
      const data = await api("GET", "lane-events");
      const last = {};
      for (const ev of data.events || []) if (!last[ev.lane]) last[ev.lane] = ev;
      state.laneLast = last;
    } catch (e) {
      if (e.status !== 501 && e.status !== 403) throw e;
      state.laneHistory = false;
      state.laneLast = {};
    }
  }

  async function pauseLane(lane, pause) {
    const ok = await ask((pause ? "Pause " : "Resume ") + lane + "?",
      pause ? "Servers stop starting tasks of this lane within about a second; running tasks finish." : "Servers start taking tasks of this lane again.",
      pause ? "Pause" : "Resume");
    if (!ok) return;
    try {
      await api("POST", "lanes/" + encodeURIComponent(lane) + (pause ? "/pause" : "/resume"));
      toast(lane + (pause ? " paused" : " resumed"));
      await pollLanes();
      renderLanes();
    } catch (e) {
      toast(e.message, true);
    }
  }

  // ---- dead letters --------------------------------------------------

  function deadQuery() {
    const q = new URLSearchParams();
    for (const [k, id] of [["lane", "dead-lane"], ["reason", "dead-reason"], ["kind", "dead-kind"], ["tenant", "dead-tenant"]]) {
      const v = $(id).value.trim();
      if (v) q.set(k, v);
    }
    q.set("limit", "200");
    return q;
  }

  async function loadDead() {
    const q = deadQuery().toString();
    const data = await api("GET", "dead?" + q);
    const items = data.dead_letters || [];
    if (state.me && state.me.tenant && q === "limit=200" && !data.more) state.deadMine = items.length;
    if (!changed("dead", [q, state.me && state.me.role, items])) return;
    const body = $("dead-body");
    clear(body);
    $("dead-empty").hidden = items.length > 0;
    $("dead-table").hidden = items.length === 0;
    $("dead-replay-all").disabled = items.length === 0;
    // A selection holds only what is shown.
    const shown = new Set(items.map((d) => d.id));
    for (const id of state.deadSel) if (!shown.has(id)) state.deadSel.delete(id);
    for (const d of items) {
      const last = d.attempts && d.attempts.length ? d.attempts[d.attempts.length - 1] : null;
      const err = d.error || (last && last.error) || "";
      const actions = el("td", { class: "actions admin-only" },
        el("button", { type: "button", class: "small", "data-testid": "replay-" + d.id, onclick: () => replayOne(d) }, "Replay"),
        el("button", { type: "button", class: "small ghost", "data-testid": "sandbox-" + d.id, onclick: () => sandboxOne(d) }, "Sandbox"),
        el("button", { type: "button", class: "small danger", "data-testid": "purge-" + d.id, onclick: () => purgeOne(d) }, "Purge"));
      const attempts = el("details", {}, el("summary", {}, String(d.attempts_made || (d.attempts || []).length)),
        el("ol", { class: "attempt-list" }, ...(d.attempts || []).map((a) =>
          el("li", {}, "#" + a.attempt + " ", el("span", { class: "muted" }, a.class || "ok"), " ", fmtDur(a.duration_ms), a.error ? " — " + a.error : ""))));
      body.append(
        el("tr", { "data-testid": "dead-row", "data-id": d.id, "data-lane": d.lane },
          el("td", { class: "sel admin-only" }, selectBox(state.deadSel, d.id, "dead-select", updateDeadBulk)),
          el("td", { class: "mono" }, el("a", { href: "#task/" + encodeURIComponent(d.id) }, d.id),
            d.sandbox_of ? el("span", { "data-testid": "dead-sandbox" }, " ", badge("sandbox copy of " + d.sandbox_of, "sandbox")) : null),
          el("td", {}, d.lane),
          el("td", { class: "mono" }, d.kind),
          el("td", {}, d.tenant || "–"),
          el("td", { "data-testid": "dead-reason" }, badge(d.reason, "reason")),
          el("td", { class: "err", title: err, "data-testid": "dead-error" }, err),
          el("td", {}, attempts),
          el("td", {}, timeCell(d.dead_at)),
          actions)
      );
    }
    updateDeadBulk();
  }

  // selectBox is a row's checkbox, kept in set by id.
  function selectBox(set, id, testid, onchange) {
    const box = el("input", { type: "checkbox", "data-testid": testid, "data-id": id, "aria-label": "select " + id, checked: set.has(id) });
    box.addEventListener("change", () => {
      if (box.checked) set.add(id);
      else set.delete(id);
      onchange();
    });
    return box;
  }

  // updateBulk shows a list's bulk bar while something is selected and
  // keeps its select-all box in step.
  function updateBulk(set, rowsSel, bar, count, all) {
    const rows = document.querySelectorAll(rowsSel).length;
    $(bar).hidden = set.size === 0;
    $(count).textContent = set.size + " selected";
    $(all).checked = set.size > 0 && set.size === rows;
    $(all).indeterminate = set.size > 0 && set.size < rows;
  }

  function updateDeadBulk() {
    updateBulk(state.deadSel, "#dead-body input[data-testid=dead-select]", "dead-bulk", "dead-bulk-count", "dead-select-all");
  }

  function updateTaskBulk() {
    updateBulk(state.taskSel, "#tasks-body input[data-testid=task-select]", "tasks-bulk", "tasks-bulk-count", "tasks-select-all");
  }

  function selectAll(set, rowsSel, on, update) {
    for (const b of document.querySelectorAll(rowsSel)) {
      b.checked = on;
      if (on) set.add(b.dataset.id);
      else set.delete(b.dataset.id);
    }
    update();
  }

  // reportText says how a bulk operation went.
  function reportText(verb, rep) {
    const failed = rep.failed || [];
    return verb + " " + rep.done + (failed.length ? ", " + failed.length + " failed: " + failed[0].error : "");
  }

  // deadBulk replays, moves or purges the selected dead letters, with the
  // bulk endpoints (the same roles and tenant scope as one at a time).
  async function deadBulk(op) {
    const ids = Array.from(state.deadSel);
    if (!ids.length) return;
    const n = ids.length + " dead letter" + (ids.length > 1 ? "s" : "");
    const to = $("dead-bulk-to").value;
    const q = {
      replay: ["Replay " + n + "?", "They go back to their lanes with a fresh attempt budget and run again for real.", "Replay", "Replayed"],
      move: ["Move " + n + " to " + to + "?", "They are published to the " + to + " lane with a fresh attempt budget and run there.", "Move", "Moved"],
      purge: ["Purge " + n + " for good?", "The dead letters are deleted; their tasks stay dead in the ledger with a \"purged\" event. This cannot be undone.", "Purge", "Purged"],
    }[op];
    if (op === "move" && !to) return toast("Pick the lane to move them to.", true);
    if (!(await ask(q[0], q[1], q[2]))) return;
    try {
      const body = { ids };
      if (op === "move") body.to_lane = to;
      const rep = await api("POST", "dead/" + op, body);
      toast(reportText(q[3], rep), (rep.failed || []).length > 0);
      state.deadSel.clear();
      state.sig = {};
      await loadDead();
    } catch (e) {
      toast(q[2] + " failed: " + e.message, true);
    }
  }

  async function cancelSelected() {
    const ids = Array.from(state.taskSel);
    if (!ids.length) return;
    const reason = await ask("Cancel " + ids.length + " task" + (ids.length > 1 ? "s" : "") + "?",
      "Queued ones never run; running ones are told to stop (their handlers see the context cancelled).", "Cancel tasks",
      { label: "Reason (optional)", optional: true });
    if (reason === null) return;
    try {
      const rep = await api("POST", "tasks/cancel", { ids, reason: reason === true ? "" : reason });
      toast(reportText("Cancelled", rep), (rep.failed || []).length > 0);
      state.taskSel.clear();
      await loadTasks(false);
    } catch (e) {
      toast("Cancel failed: " + e.message, true);
    }
  }

  async function replayOne(d) {
    const ok = await ask("Replay " + d.id + "?", "It goes back to the " + d.lane + " lane with a fresh attempt budget and runs again for real.", "Replay");
    if (!ok) return;
    try {
      const rep = await api("POST", "dead/replay", { ids: [d.id], filter: { lane: d.lane } });
      if (rep.failed && rep.failed.length) throw new Error(rep.failed[0].error);
      toast("Replayed " + d.id);
      location.hash = "#task/" + encodeURIComponent(d.id);
    } catch (e) {
      toast("Replay failed: " + e.message, true);
    }
  }

  async function sandboxOne(d) {
    const ok = await ask("Sandbox replay of " + d.id + "?",
      "A copy runs with its steps, but its Effect calls are recorded as \"would do\" and not executed, and the tasks it enqueues are sandbox copies too. Writes the handler makes outside Effect do happen. The dead letter stays where it is.", "Run in sandbox");
    if (!ok) return;
    try {
      const r = await api("POST", "dead/" + encodeURIComponent(d.lane) + "/" + encodeURIComponent(d.id) + "/sandbox");
      toast("Sandbox task " + r.id + " started");
      location.hash = "#task/" + encodeURIComponent(r.id);
    } catch (e) {
      toast("Sandbox failed: " + e.message, true);
    }
  }

  async function purgeOne(d) {
    const ok = await ask("Purge " + d.id + " for good?", "The dead letter is deleted; its task stays dead in the ledger with a \"purged\" event. This cannot be undone.", "Purge");
    if (!ok) return;
    try {
      const rep = await api("POST", "dead/purge", { ids: [d.id], filter: { lane: d.lane } });
      if (rep.failed && rep.failed.length) throw new Error(rep.failed[0].error);
      toast("Purged " + d.id);
      state.sig = {};
      await loadDead();
    } catch (e) {
      toast("Purge failed: " + e.message, true);
    }
  }

  async function replayShown() {
    const rows = Array.from(document.querySelectorAll("#dead-body tr[data-id]"));
    if (!rows.length) return;
    const ok = await ask("Replay " + rows.length + " dead letter" + (rows.length > 1 ? "s" : "") + "?",
      "Every dead letter listed goes back to its lane and runs again.", "Replay all");
    if (!ok) return;
    try {
      const rep = await api("POST", "dead/replay", { ids: rows.map((r) => r.dataset.id) });
      toast("Replayed " + rep.done + (rep.failed.length ? ", " + rep.failed.length + " failed: " + rep.failed[0].error : ""), rep.failed.length > 0);
      state.sig = {};
      await loadDead();
    } catch (e) {
      toast("Replay failed: " + e.message, true);
    }
  }

  // ---- tasks ---------------------------------------------------------

  function taskQuery(after) {
    const q = new URLSearchParams();
    for (const [k, id] of [["state", "task-state-filter"], ["kind", "task-kind"], ["lane", "task-lane"], ["tenant", "task-tenant"]]) {
      const v = $(id).value.trim();
      if (v) q.set(k, v);
    }
    q.set("limit", "100");
    if (after) q.set("after", after);
    return q;
  }

  async function loadTasks(more) {
    const data = await api("GET", "tasks?" + taskQuery(more ? state.tasksNext : "").toString());
    const body = $("tasks-body");
    if (!more) {
      clear(body);
      state.taskSel.clear();
    }
    const tasks = data.tasks || [];
    for (const t of tasks) {
      const live = LIVE_STATES.includes(t.state);
      body.append(
        el("tr", { "data-testid": "task-row", "data-id": t.id },
          el("td", { class: "sel admin-only" }, live ? selectBox(state.taskSel, t.id, "task-select", updateTaskBulk) : null),
          el("td", { class: "mono" }, el("a", { href: "#task/" + encodeURIComponent(t.id) }, t.id)),
          el("td", { class: "mono" }, t.kind),
          el("td", {}, t.lane),
          el("td", {}, t.tenant || "–"),
          el("td", {}, badge(t.state), t.progress ? progressCell(t.progress) : null),
          el("td", {}, attemptText(t, " / ")),
          el("td", { class: "err", title: t.last_error || "" }, t.last_error || ""),
          el("td", {}, timeCell(t.updated_at)))
      );
    }
    state.tasksNext = data.next || "";
    $("tasks-more").hidden = !state.tasksNext;
    $("tasks-empty").hidden = body.children.length > 0;
    updateTaskBulk();
  }

  function progressCell(p) {
    const pct = Math.round(p.fraction * 100) + "%";
    return el("div", { "data-testid": "task-progress-row", title: p.message || "" },
      el("progress", { max: "1", value: String(p.fraction) }), " ", pct,
      p.message ? el("div", { class: "progress-msg" }, p.message) : null);
  }

  // ---- live stream of one task (Server-Sent Events over fetch, so the
  // bearer token goes in a header; reconnects with Last-Event-ID) -------

  function stopStream() {
    if (state.stream) state.stream.abort();
    state.stream = null;
  }

  function watchTask(id) {
    stopStream();
    const ctl = new AbortController();
    state.stream = ctl;
    const out = $("task-stream");
    const status = $("task-stream-status");
    clear(out);
    $("task-progress").hidden = true;
    let last = "";
    const onEvent = (name, id, data) => {
      if (id) last = id;
      if (name === "chunk") {
        out.append(document.createTextNode(data.text !== undefined ? data.text : data.base64 !== undefined ? "[" + data.bytes + " bytes]" : "[" + data.bytes + " bytes hidden]"));
        out.scrollTop = out.scrollHeight;
      } else if (name === "progress") {
        $("task-progress").hidden = false;
        $("task-progress-bar").value = data.fraction;
        $("task-progress-text").textContent = Math.round(data.fraction * 100) + "% " + (data.message || "");
      } else if (name === "state") {
        status.textContent = data.state;
      }
    };
    const run = async () => {
      while (!ctl.signal.aborted) {
        const headers = { Authorization: "Bearer " + (sessionStorage.getItem(TOKEN_KEY) || ""), Accept: "text/event-stream" };
        if (last) headers["Last-Event-ID"] = last;
        try {
          const res = await fetch("api/v1/tasks/" + encodeURIComponent(id) + "/events", { headers, cache: "no-store", credentials: "omit", signal: ctl.signal });
          if (!res.ok || !res.body) {
            status.textContent = "(stream unavailable: " + res.status + ")";
            return;
          }
          status.textContent = "(live)";
          const reader = res.body.getReader();
          const dec = new TextDecoder();
          let buf = "";
          let ended = false;
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            buf += dec.decode(value, { stream: true });
            let i;
            while ((i = buf.indexOf("\n\n")) >= 0) {
              const block = buf.slice(0, i);
              buf = buf.slice(i + 2);
              let name = "", eid = "", data = "";
              for (const line of block.split("\n")) {
                if (line.startsWith("event: ")) name = line.slice(7);
                else if (line.startsWith("id: ")) eid = line.slice(4);
                else if (line.startsWith("data: ")) data += line.slice(6);
              }
              if (!name) continue;
              if (name === "end") { ended = true; continue; }
              try { onEvent(name, eid, JSON.parse(data || "{}")); } catch (e) { /* a malformed event is skipped */ }
            }
          }
          if (ended) {
            status.textContent = "(ended)";
            return;
          }
        } catch (e) {
          if (ctl.signal.aborted) return;
          status.textContent = "(reconnecting)";
        }
        await new Promise((r) => setTimeout(r, 1000));
      }
    };
    run();
  }

  function metaRow(dl, k, v) {
    if (v === undefined || v === null || v === "") return;
    dl.append(el("dt", {}, k), el("dd", {}, v));
  }

  async function loadTask() {
    const id = state.taskID;
    const d = await api("GET", "tasks/" + encodeURIComponent(id));
    if (state.taskID !== id || !changed("task", [id, d])) return;
    const t = d.task;
    $("task-id").textContent = t.id;
    const st = $("task-state");
    st.textContent = t.state;
    st.className = "badge " + t.state;
    const dl = $("task-meta");
    clear(dl);
    metaRow(dl, "kind", t.kind);
    metaRow(dl, "lane", t.lane);
    metaRow(dl, "tenant", t.tenant || "–");
    metaRow(dl, t.next_attempt ? "next attempt" : "attempt", attemptText(t, " of "));
    metaRow(dl, "created", t.created_at ? timeCell(t.created_at) : "");
    metaRow(dl, "updated", t.updated_at ? timeCell(t.updated_at) : "");
    metaRow(dl, "run at", t.run_at || "");
    metaRow(dl, "deadline", t.deadline || "");
    metaRow(dl, "idempotency key", t.idempotency_key || "");
    metaRow(dl, "ordering key", t.ordering_key || "");
    for (const [k, v] of Object.entries(t.metadata || {})) metaRow(dl, k, v);
    if (t.last_error) dl.append(el("dt", { class: "full" }, "last error"), el("dd", { class: "err-full", "data-testid": "task-last-error" }, t.last_error));

    const tl = $("task-timeline");
    clear(tl);
    for (const e of d.events || []) {
      tl.append(
        el("li", { "data-testid": "timeline-event", class: "to-" + (e.to || "none") },
          el("div", { class: "when" }, timeCell(e.at)),
          el("div", { class: "what" },
            e.from ? el("span", {}, badge(e.from), " → ") : null,
            badge(e.to || "note"),
            " ", el("b", { "data-testid": "event-reason" }, e.reason)),
          e.detail ? el("div", { class: "detail" }, e.detail) : null,
          e.actor ? el("div", { class: "actor" }, e.actor) : null)
      );
    }
    const ab = $("task-attempts").tBodies[0];
    clear(ab);
    for (const a of d.attempts || []) {
      const errCell = el("td", { class: "err", title: a.error || "" }, a.error || "");
      if (a.stack) errCell.append(el("details", {}, el("summary", {}, "stack"), el("pre", {}, a.stack)));
      ab.append(el("tr", { "data-testid": "attempt-row" },
        el("td", {}, a.number), el("td", {}, badge(a.outcome || "running", "outcome " + (a.outcome || "running"))),
        el("td", {}, timeCell(a.start)), el("td", {}, fmtDur(a.duration_ms)), el("td", { class: "mono" }, a.worker || ""), errCell));
    }
    const eb = $("task-effects").tBodies[0];
    clear(eb);
    for (const e of d.effects || []) {
      eb.append(el("tr", { "data-testid": "effect-row" },
        el("td", { class: "mono" }, e.key), el("td", {}, badge(e.state)), el("td", {}, e.attempt),
        el("td", { class: "mono" }, e.result !== undefined ? JSON.stringify(e.result) : ""), el("td", {}, timeCell(e.updated_at))));
    }
    if (!(d.effects || []).length) eb.append(el("tr", {}, el("td", { colspan: 5, class: "muted" }, "no effects recorded")));
    $("task-result").textContent = t.result !== undefined ? pretty(t.result) : (t.state === "completed" ? "— (no result stored)" : "— (" + t.state + ")");
    // Live tasks can be cancelled (POST tasks/{id}/cancel).
    const live = ["queued", "running", "retry_wait", "awaiting_review"].includes(t.state);
    const cb = $("task-cancel");
    cb.hidden = !live;
    cb.onclick = () => cancelTask(t);
    $("task-args").textContent = t.args !== undefined ? pretty(t.args) : "—";
  }

  // ---- reviews -------------------------------------------------------

  async function loadReviews() {
    const data = await api("GET", "reviews?limit=200");
    const items = data.reviews || [];
    $("count-reviews").textContent = items.length ? String(items.length) : "";
    if (state.view !== "reviews") return;
    // age_ms grows on every poll; the card shows it from "since" instead.
    if (!changed("reviews", [state.me && state.me.role, items.map((r) => Object.assign({}, r, { age_ms: 0 }))])) return;
    const box = $("reviews");
    clear(box);
    $("reviews-empty").hidden = items.length > 0;
    for (const r of items) {
      box.append(
        el("article", { class: "review", "data-testid": "review-" + r.id, "data-id": r.id },
          el("header", {},
            el("a", { class: "mono", href: "#task/" + encodeURIComponent(r.id) }, r.id),
            el("span", { class: "muted" }, " " + r.kind + " · " + r.lane + (r.tenant ? " · tenant " + r.tenant : "")),
            el("span", { class: "age" }, "waiting ", timeCell(r.since, "for"))),
          el("p", { class: "reason" }, r.reason),
          r.action ? el("p", { class: "action" }, el("span", { class: "muted" }, "wants to: "), r.action) : null,
          r.args !== undefined ? el("pre", { class: "json" }, pretty(r.args)) : null,
          el("footer", {},
            el("span", { class: "muted" }, r.claimed_by ? "claimed by " + r.claimed_by : "unclaimed"),
            el("span", { class: "spacer" }),
            el("span", { class: "admin-only" },
              r.claimed_by ? null : el("button", { type: "button", class: "ghost small", onclick: () => reviewAct(r, "claim") }, "Claim"),
              el("button", { type: "button", class: "small danger", "data-testid": "reject-" + r.id, onclick: () => reviewAct(r, "reject") }, "Reject"),
              el("button", { type: "button", class: "small", "data-testid": "approve-" + r.id, onclick: () => reviewAct(r, "approve") }, "Approve"))))
      );
    }
  }

  async function cancelTask(t) {
    const what = t.state === "running" ? "Its handler's context is cancelled on the worker running it; it is not retried." : "It never starts.";
    const reason = await ask("Cancel " + t.id + "?", what, "Cancel task", { label: "Reason (optional)", optional: true });
    if (reason === null) return;
    try {
      await api("POST", "tasks/" + encodeURIComponent(t.id) + "/cancel", reason ? { reason } : {});
      toast("Cancelled " + t.id);
      state.sig = {};
      await loadTask();
      tickTimes();
    } catch (e) {
      toast("cancel failed: " + e.message, true);
    }
  }

  async function reviewAct(r, op) {
    let body = {};
    if (op === "approve") {
      const note = await ask("Approve " + r.id + "?", r.action || r.reason, "Approve", { label: "Note for the handler (optional)", optional: true });
      if (note === null) return;
      body = note ? { note } : {};
    } else if (op === "reject") {
      const reason = await ask("Reject " + r.id + "?", r.action || r.reason, "Reject", { label: "Reason" });
      if (reason === null) return;
      body = { reason };
    }
    try {
      await api("POST", "reviews/" + encodeURIComponent(r.id) + "/" + op, body);
      toast(op === "claim" ? "Claimed " + r.id : (op === "approve" ? "Approved " : "Rejected ") + r.id);
      state.sig = {};
      await loadReviews();
      tickTimes();
    } catch (e) {
      toast(op + " failed: " + e.message, true);
    }
  }

  // ---- servers -------------------------------------------------------

  // loadServers shows the fleet (GET servers). A tenant's token, or an
  // admin API without a ledger, gets the reason instead of a table.
  async function loadServers() {
    let data;
    try {
      data = await api("GET", "servers");
    } catch (e) {
      if (e.status !== 403 && e.status !== 501) throw e;
      if (!changed("servers", ["error", e.message])) return;
      clear($("servers-body"));
      $("servers-table").hidden = true;
      $("count-servers").textContent = "";
      $("servers-empty").hidden = false;
      $("servers-empty").textContent = e.message;
      return;
    }
    const items = data.servers || [];
    $("count-servers").textContent = items.length ? String(data.live) : "";
    // Ages are shown by tickTimes; leave them out of the signature.
    if (!changed("servers", items.map((s) => Object.assign({}, s, { heartbeat_age_ms: 0 })))) return;
    const body = $("servers-body");
    clear(body);
    $("servers-empty").textContent = "No server is registered in the ledger.";
    $("servers-empty").hidden = items.length > 0;
    $("servers-table").hidden = items.length === 0;
    for (const s of items) {
      body.append(
        el("tr", { "data-testid": "server-row", "data-id": s.id, "data-state": s.state },
          el("td", { class: "mono" }, s.id),
          el("td", {}, s.host || "–"),
          el("td", { class: "mono" }, String(s.pid)),
          el("td", { "data-testid": "server-state" }, badge(s.state, s.state === "gone" ? "dead" : "ok")),
          el("td", {}, String(s.busy) + " / " + String(s.slots)),
          el("td", {}, String(s.free)),
          el("td", {}, (s.lanes || []).join(", ")),
          el("td", { class: "mono" }, s.version || "–"),
          el("td", {}, timeCell(s.started, "for")),
          el("td", {}, timeCell(s.heartbeat)))
      );
    }
  }

  // ---- spend ---------------------------------------------------------

  // loadSpend shows model spend by tenant and model over the chosen range
  // (GET spend), with a bar per bucket of the total. Without a spend
  // store (501) the reason is shown instead.
  async function loadSpend() {
    const range = $("spend-range").value || "24h";
    let data;
    try {
      data = await api("GET", "spend?since=" + encodeURIComponent(range));
    } catch (e) {
      if (e.status !== 403 && e.status !== 501) throw e;
      if (!changed("spend", ["error", e.message])) return;
      clear($("spend-body"));
      clear($("spend-chart"));
      $("spend-table").hidden = true;
      $("spend-empty").hidden = false;
      $("spend-empty").textContent = e.message;
      return;
    }
    const series = data.series || [];
    if (!changed("spend", [range, series, data.total.micros_per_bucket])) return;
    const body = $("spend-body");
    clear(body);
    $("spend-empty").textContent = "No spend recorded in this range.";
    $("spend-empty").hidden = series.length > 0;
    $("spend-table").hidden = series.length === 0;
    const pct = (v) => (100 * v).toFixed(1) + "%";
    for (const s of series) {
      body.append(
        el("tr", { "data-testid": "spend-row", "data-tenant": s.group.tenant || "", "data-model": s.group.model || "" },
          el("td", {}, s.group.tenant || "–"),
          el("td", { class: "mono" }, s.group.model || "–"),
          el("td", {}, String(s.calls)),
          el("td", {}, String(s.input_tokens)),
          el("td", {}, String(s.cached_input_tokens)),
          el("td", {}, String(s.output_tokens)),
          el("td", {}, pct(s.cached_share)),
          el("td", { class: "mono", "data-testid": "spend-cost" }, s.cost))
      );
    }
    $("spend-calls").textContent = String(data.total.calls);
    $("spend-share").textContent = pct(data.total.cached_share);
    $("spend-total").textContent = data.total.cost;
    const box = $("spend-chart");
    clear(box);
    const vals = data.total.micros_per_bucket || [];
    const peak = Math.max(1, ...vals);
    const ns = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("viewBox", "0 0 " + vals.length * 10 + " 60");
    svg.setAttribute("preserveAspectRatio", "none");
    svg.setAttribute("class", "hchart");
    vals.forEach((v, i) => {
      const h = (58 * v) / peak;
      const r = document.createElementNS(ns, "rect");
      r.setAttribute("x", String(i * 10 + 1));
      r.setAttribute("y", String(60 - h));
      r.setAttribute("width", "8");
      r.setAttribute("height", String(h));
      r.setAttribute("class", "processed");
      const t = document.createElementNS(ns, "title");
      t.textContent = new Date(Date.parse(data.from) + i * data.step_ms).toISOString() + ": $" + (v / 1e6).toFixed(6);
      r.append(t);
      svg.append(r);
    });
    box.append(svg, el("div", { class: "hchart-axis" }, el("span", {}, range + " ago"),
      el("span", {}, "peak $" + (peak / 1e6).toFixed(6) + " per " + Math.round(data.step_ms / 60000) + " min"), el("span", {}, "now")));
  }

  // ---- routing and polling ------------------------------------------

  function route() {
    const h = decodeURIComponent(location.hash.replace(/^#/, "")) || "lanes";
    let view = h;
    if (h.startsWith("task/")) {
      view = "task";
      state.taskID = h.slice(5);
      watchTask(state.taskID);
    } else {
      stopStream();
    }
    if (!["lanes", "dead", "tasks", "task", "reviews", "servers", "spend"].includes(view)) view = "lanes";
    state.view = view;
    state.sig = {};
    state.histAt = 0; // the history is asked for again when the Lanes view opens
    for (const s of document.querySelectorAll(".view")) s.hidden = s.dataset.view !== view;
    for (const a of document.querySelectorAll("#tabs a")) {
      a.classList.toggle("active", a.dataset.tab === view || (view === "task" && a.dataset.tab === "tasks"));
    }
    refresh(true);
  }

  async function refresh(force) {
    if (!state.me || (state.busy && !force)) return;
    state.busy = true;
    try {
      await pollLanes();
      switch (state.view) {
        case "lanes": renderLanes(); break;
        case "dead": await loadDead(); break;
        case "tasks": if (force) await loadTasks(false); break;
        case "task": await loadTask(); break;
        case "servers": await loadServers(); break;
        case "spend": await loadSpend(); break;
      }
      await loadReviews();
      tickTimes();
    } catch (e) {
      if (e.status !== 401) {
        if (e.status === 0) setLive(false, "offline");
        else toast(e.message, true);
      }
    } finally {
      state.busy = false;
    }
  }

  function start() {
    clearInterval(state.timer);
    state.timer = setInterval(() => {
      // A modal open means the user is deciding something: keep the rows still.
      if (!$("confirm").open && !document.hidden) refresh(false);
    }, POLL_MS);
    route();
  }

  document.addEventListener("DOMContentLoaded", async () => {
    $("login-form").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const tok = $("token-input").value.trim();
      if (!tok) return;
      if (await signIn(tok)) {
        $("token-input").value = "";
        $("login").close();
        start();
      }
    });
    $("login").addEventListener("cancel", (ev) => ev.preventDefault());
    $("signout").addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN_KEY);
      state.me = null;
      clearInterval(state.timer);
      document.body.classList.remove("signed-in", "is-admin");
      $("whoami").textContent = "";
      showLogin("");
    });
    $("dead-filters").addEventListener("submit", (ev) => { ev.preventDefault(); loadDead().catch((e) => toast(e.message, true)); });
    $("dead-lane").addEventListener("change", () => loadDead().catch((e) => toast(e.message, true)));
    $("dead-reason").addEventListener("change", () => loadDead().catch((e) => toast(e.message, true)));
    $("dead-replay-all").addEventListener("click", replayShown);
    $("history-lane").addEventListener("change", () => pollHistory(true).catch((e) => toast(e.message, true)));
    $("spend-range").addEventListener("change", () => loadSpend().catch((e) => toast(e.message, true)));
    $("dead-select-all").addEventListener("change", (ev) =>
      selectAll(state.deadSel, "#dead-body input[data-testid=dead-select]", ev.target.checked, updateDeadBulk));
    $("tasks-select-all").addEventListener("change", (ev) =>
      selectAll(state.taskSel, "#tasks-body input[data-testid=task-select]", ev.target.checked, updateTaskBulk));
    for (const op of ["replay", "move", "purge"]) $("dead-bulk-" + op).addEventListener("click", () => deadBulk(op));
    $("dead-bulk-clear").addEventListener("click", () => selectAll(state.deadSel, "#dead-body input[data-testid=dead-select]", false, updateDeadBulk));
    $("tasks-bulk-cancel").addEventListener("click", cancelSelected);
    $("tasks-bulk-clear").addEventListener("click", () => selectAll(state.taskSel, "#tasks-body input[data-testid=task-select]", false, updateTaskBulk));
    $("task-filters").addEventListener("submit", (ev) => { ev.preventDefault(); loadTasks(false).catch((e) => toast(e.message, true)); });
    $("tasks-more").addEventListener("click", () => loadTasks(true).catch((e) => toast(e.message, true)));
    $("task-open").addEventListener("click", () => {
      const id = $("task-open-id").value.trim();
      if (id) location.hash = "#task/" + encodeURIComponent(id);
    });
    window.addEventListener("hashchange", route);

    const tok = sessionStorage.getItem(TOKEN_KEY);
    if (tok && (await signIn(tok))) start();
    else showLogin("");
  });
})();
