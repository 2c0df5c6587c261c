// outlast timeline: keeps the gateway's recent requests from its event
// stream and draws them, and before the stream delivers, the newest of
// them that the page's HTML carries. No framework and no build step: the
// gateway serves this file as it is.
"use strict";

(() => {
  const app = document.getElementById("app");
  const cfg = { events: app.dataset.events, keep: Number(app.dataset.keep) || 1000 };

  // Rows drawn at most, as many as the page's HTML carries: the rest are
  // counted in a note. Redraws are at most one per MIN_FRAME ms, so a
  // burst of events costs one frame.
  const MAX_ROWS = Number(app.dataset.rows) || 200;
  const MIN_FRAME = 200;
  // Attempts whose endings a request's tooltip lists, the last ones.
  const MAX_ENDINGS = 10;
  const MAX_SLOT_BOXES = 32;
  const MAX_WAITERS = 20;
  // State changes kept, as the feed keeps them (timeline.MaxStates).
  const MAX_STATES = 100;

  const state = {
    reqs: new Map(), // id → request, in arrival order
    ups: [],
    states: [], // the upstreams' state changes, oldest first
    peak: new Map(), // upstream → most queued seen
    offset: 0, // server clock − this clock, in ms
    dropped: 0,
    elided: 0, // older requests kept that reqs lacks: the HTML's, until the stream's snapshot
  };

  const $ = (id) => document.getElementById(id);
  const now = () => Date.now() + state.offset;

  // el makes an element: el("div", "bar", {outcome: "ok"}, "text").
  function el(tag, cls, data, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (data) for (const k in data) e.dataset[k] = data[k];
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // --- The event stream --------------------------------------------------

  function connect() {
    const es = new EventSource(cfg.events);
    es.addEventListener("snapshot", (e) => {
      apply(JSON.parse(e.data));
      setConn("live");
      schedule();
    });
    for (const name of ["queued", "attempt-start", "attempt-end", "done"]) {
      es.addEventListener(name, (e) => {
        upsert(JSON.parse(e.data));
        schedule();
      });
    }
    es.addEventListener("state", (e) => {
      state.states.push(JSON.parse(e.data));
      if (state.states.length > MAX_STATES) state.states.splice(0, state.states.length - MAX_STATES);
      schedule();
    });
    es.addEventListener("upstreams", (e) => {
      setUpstreams(JSON.parse(e.data).upstreams);
      schedule();
    });
    es.onopen = () => setConn("live");
    es.onerror = () => {
      if (es.readyState === EventSource.CLOSED) {
        // The browser gives up on a refusal (the feed closed, say): try
        // again later ourselves.
        setConn("closed");
        setTimeout(connect, 5000);
      } else {
        setConn("reconnecting");
      }
    };
  }

  // apply makes a snapshot (the stream's, or the HTML's) what the page
  // holds, in place of what it held.
  function apply(s) {
    state.offset = s.now - Date.now();
    state.reqs = new Map(s.requests.map((r) => [r.id, r]));
    state.elided = s.elided || 0;
    state.states = s.states || [];
    state.dropped = s.dropped;
    setUpstreams(s.upstreams);
  }

  function setConn(s) {
    const c = $("conn");
    c.dataset.state = s;
    c.textContent = { live: "live", reconnecting: "reconnecting…", closed: "disconnected" }[s] || s;
  }

  function upsert(r) {
    state.reqs.set(r.id, r);
    // A Map iterates in insertion order: the first keys are the oldest.
    for (const id of state.reqs.keys()) {
      if (state.reqs.size <= cfg.keep) break;
      state.reqs.delete(id);
    }
  }

  function setUpstreams(ups) {
    state.ups = ups || [];
    for (const u of state.ups) state.peak.set(u.name, Math.max(state.peak.get(u.name) || 0, u.queued));
  }

  // --- Redraws ------------------------------------------------------------

  let pending = false;
  let lastFrame = -Infinity;
  let changed = true; // something besides the clock changed since the last draw
  let pointing = false; // the pointer is over the rows: keep their tooltips

  function schedule() {
    changed = true;
    tick();
  }

  function tick() {
    if (pending) return;
    pending = true;
    const wait = Math.max(0, lastFrame + MIN_FRAME - performance.now());
    setTimeout(() => requestAnimationFrame(frame), wait);
  }

  function frame() {
    pending = false;
    lastFrame = performance.now();
    // Requests in progress grow with the clock, so they are redrawn
    // while nothing else changes, except under the pointer, where a
    // redraw would take away the tooltip being read.
    if (!changed && pointing) {
      tick();
      return;
    }
    changed = false;
    if (render()) tick();
  }

  // render draws everything and reports whether anything is in progress.
  function render() {
    renderSlots();
    renderRuns();
    return renderTimeline();
  }

  // --- Slots ----------------------------------------------------------------

  function renderSlots() {
    const box = $("upstreams");
    if (state.ups.length === 0) {
      box.replaceChildren(el("p", "empty", null, "No upstreams yet."));
      return;
    }
    const t = now();
    box.replaceChildren(...state.ups.map((u) => upstreamCard(u, t)));
  }

  function upstreamCard(u, t) {
    const card = el("div", "upstream", { name: u.name });
    const head = el("div", "up-head");
    head.append(el("span", "up-name", null, u.name),
      el("span", "up-slots", null, u.slots ? plural(u.slots, "slot") : "no slot bound"));
    const last = lastState(u.name);
    if (last) {
      // How long, while not healthy: the page redraws with the clock then.
      const badge = el("span", "up-state", { state: last.to }, last.to + (last.to === "healthy" ? "" : " · " + fmtDur(t - last.at)));
      badge.title = `${last.from} → ${last.to} at ${clock(last.at)}`;
      head.append(badge);
    }
    card.append(head);
    if (u.pool) {
      // A pool's member: its rate limits as the pool counts them now.
      const room = el("div", "headroom", { pool: u.pool });
      const parts = [];
      for (const [what, l] of [["requests", u.requests], ["tokens", u.tokens]]) {
        if (l) parts.push(`${l.remaining.toLocaleString("en")}${l.limit >= 0 ? " of " + l.limit.toLocaleString("en") : ""} ${what} left`);
      }
      room.textContent = `in pool ${u.pool}` + (parts.length ? " · " + parts.join(" · ") : " · no limits stated yet");
      card.append(room);
    }

    const boxes = el("div", "slot-boxes");
    const shown = Math.min(Math.max(u.slots, u.in_flight), MAX_SLOT_BOXES);
    for (let i = 0; i < shown; i++) boxes.append(el("i", i < u.in_flight ? "slot used" : "slot"));
    const waitBoxes = Math.min(u.queued, MAX_SLOT_BOXES - shown);
    for (let i = 0; i < waitBoxes; i++) boxes.append(el("i", "slot waiting"));
    if (u.in_flight + u.queued > shown + waitBoxes) boxes.append(el("span", "more", null, "…"));
    card.append(boxes);

    const counts = el("div", "counts");
    const inflight = el("span", "inflight", { inflight: u.in_flight });
    inflight.append(el("b", null, null, String(u.in_flight)), " in flight");
    const queued = el("span", "queued", { queued: u.queued });
    queued.append(el("b", null, null, String(u.queued)), " queued");
    const peak = state.peak.get(u.name) || 0;
    counts.append(inflight, queued, el("span", "peak", { peak }, "peak " + peak));
    card.append(counts);

    const q = el("ol", "queue");
    for (const w of (u.queue || []).slice(0, MAX_WAITERS)) {
      const li = el("li", "waiter", { position: w.position, id: w.id });
      li.title = `${w.id}: ${w.ahead} ahead when it joined`;
      li.append(el("span", "pos", null, "#" + w.position),
        el("span", "who", null, (w.run || "(no run)") + (w.key ? " · " + w.key : "")),
        el("span", "since", null, fmtDur(t - w.since)));
      q.append(li);
    }
    if ((u.queue || []).length > MAX_WAITERS) q.append(el("li", "waiter more", null, `and ${u.queue.length - MAX_WAITERS} more`));
    card.append(q);
    return card;
  }

  // troubled lists the upstreams whose latest state is not healthy.
  function troubled() {
    const last = new Map();
    for (const c of state.states) last.set(c.upstream, c.to);
    return [...last.entries()].filter(([, to]) => to !== "healthy").map(([name]) => name);
  }

  // lastState is an upstream's latest state change, or undefined.
  function lastState(name) {
    for (let i = state.states.length - 1; i >= 0; i--) {
      if (state.states[i].upstream === name) return state.states[i];
    }
    return undefined;
  }

  // --- Filters ----------------------------------------------------------------

  let runsKey = "";

  function renderRuns() {
    const runs = [...new Set([...state.reqs.values()].map((r) => r.run).filter(Boolean))].sort();
    const key = runs.join("\n");
    if (key === runsKey) return;
    runsKey = key;
    $("runs").replaceChildren(...runs.map((r) => { const o = el("option"); o.value = r; return o; }));
  }

  function matches(r, run, status) {
    if (run && !(r.run || "").toLowerCase().includes(run)) return false;
    switch (status) {
      case "ok": return r.state === "done" && r.outcome === "ok";
      case "failed": return r.state === "done" && r.outcome !== "ok";
      case "inflight": return r.state !== "done";
    }
    return true;
  }

  // --- Timeline ---------------------------------------------------------------

  function renderTimeline() {
    const run = $("filter-run").value.trim().toLowerCase();
    const status = $("filter-status").value;
    const all = [...state.reqs.values()];
    const match = all.filter((r) => matches(r, run, status));
    match.sort((a, b) => a.start - b.start);
    const rows = match.slice(-MAX_ROWS);
    const t = now();
    // An upstream not healthy is a band that grows with the clock.
    const live = all.some((r) => r.state !== "done") || troubled().length > 0;

    $("counts").textContent = `${plural(state.reqs.size + state.elided, "request")} kept of ${cfg.keep}` +
      (state.dropped ? ` · ${plural(state.dropped, "event")} dropped` : "");
    $("shown").textContent = match.length === all.length ? "" : `${match.length} of ${all.length} match`;
    $("empty").hidden = rows.length > 0;
    $("empty").textContent = all.length ? "No request matches the filters." : "No requests yet. They appear here as the gateway serves them.";
    // Until the stream's snapshot, the older requests are only counted,
    // and only the unfiltered view knows how many it leaves out.
    const more = match.length - rows.length + (!run && status === "all" ? state.elided : 0);
    const note = $("cap-note");
    note.hidden = more === 0;
    note.textContent = `Showing the newest ${rows.length} of ${rows.length + more}: filter by run or status to see the others.`;

    if (rows.length === 0) {
      $("ticks").replaceChildren();
      $("origin").textContent = "";
      $("rows").replaceChildren();
      return live;
    }

    const win = windowOf(rows, t);
    const trackPx = Math.max(100, $("ticks").clientWidth);
    const x = (ms) => ((ms - win.t0) / (win.t1 - win.t0)) * 100;
    const pxPerMs = trackPx / (win.t1 - win.t0);
    const ticks = tickMarks(win, trackPx);

    $("origin").textContent = "0 = " + clock(win.t0);
    $("ticks").replaceChildren(...ticks.map((v) => {
      const k = el("div", "tick");
      k.style.left = x(v) + "%";
      k.append(el("span", null, null, fmtTick(v - win.t0)));
      return k;
    }));

    const frag = document.createDocumentFragment();
    const grid = el("div");
    grid.id = "grid";
    for (const v of ticks) {
      const k = el("div", "tick");
      k.style.left = x(v) + "%";
      grid.append(k);
    }
    frag.append(grid);
    const bands = stateBands(win, { x, t });
    if (bands) frag.append(bands);
    for (const g of groups(rows)) frag.append(runGroup(g, { x, pxPerMs, t }));
    $("rows").replaceChildren(frag);
    return live;
  }

  // windowOf is the time span to draw: from the earliest start or queue
  // to the latest end, or now while something is in progress; and to the
  // latest change of an upstream's state after that start, or now while
  // an upstream is not healthy.
  function windowOf(rows, t) {
    let t0 = Infinity, t1 = -Infinity;
    for (const r of rows) {
      t0 = Math.min(t0, r.start);
      t1 = Math.max(t1, r.state === "done" ? (r.end || r.start) : t);
      for (const a of r.attempts) {
        t0 = Math.min(t0, a.start - (a.gate_wait || 0) - (a.admission_wait || 0));
        t1 = Math.max(t1, a.end || t);
        if (a.retry_after) t1 = Math.max(t1, a.end + a.retry_after);
      }
    }
    for (const c of state.states) if (c.at >= t0) t1 = Math.max(t1, c.at);
    if (troubled().length > 0) t1 = Math.max(t1, t);
    const span = Math.max(t1 - t0, 1000);
    return { t0, t1: t0 + span * 1.02 };
  }

  // stateBands draws a row per upstream whose state changed: a band for
  // each stretch it was not healthy, coloured by state, and a mark at each
  // change within the window. A stretch that began before the window is
  // drawn from its left edge.
  function stateBands(win, v) {
    const byUp = new Map();
    for (const c of state.states) {
      if (!byUp.has(c.upstream)) byUp.set(c.upstream, []);
      byUp.get(c.upstream).push(c);
    }
    const shown = [...byUp.entries()].filter(([, cs]) => cs.some((c, i) => {
      const until = i + 1 < cs.length ? cs[i + 1].at : v.t;
      return until >= win.t0 && c.at <= win.t1;
    }));
    if (shown.length === 0) return null;
    // Not a run, nor its rows requests: the filters and counts pass them by.
    const box = el("div", "state-group");
    const head = el("div", "run-head");
    head.append(el("span", "run-name", null, "Upstreams"),
      el("span", "run-meta", null, "admission states: down, probing, recovering"));
    box.append(head);
    for (const [name, cs] of shown) {
      const row = el("div", "state-row", { upstream: name });
      const label = el("div", "label");
      const last = cs[cs.length - 1];
      label.append(el("span", "up-state", { state: last.to }, last.to), el("span", "path", null, name));
      label.title = `${name}: ${plural(cs.length, "change")} kept`;
      row.append(label);
      const track = el("div", "track");
      cs.forEach((c, i) => {
        const until = i + 1 < cs.length ? cs[i + 1].at : v.t;
        if (c.to !== "healthy" && until >= win.t0 && c.at <= win.t1) {
          const band = place(el("div", "state-band", { state: c.to }), v.x, Math.max(c.at, win.t0), Math.min(until, win.t1));
          band.title = `${name} ${c.to} for ${fmtDur(until - c.at)}, from ${clock(c.at)}`;
          track.append(band);
        }
        if (c.at >= win.t0 && c.at <= win.t1) {
          const m = el("div", "state-mark", { state: c.to });
          m.style.left = v.x(c.at) + "%";
          m.title = `${clock(c.at)}: ${name} ${c.from} → ${c.to}`;
          track.append(m);
        }
      });
      row.append(track);
      box.append(row);
    }
    return box;
  }

  // groups puts rows into runs: the run with the newest request first,
  // and each run's requests oldest first, as they happened.
  function groups(rows) {
    const byRun = new Map();
    for (const r of rows) {
      const k = r.run || "";
      if (!byRun.has(k)) byRun.set(k, []);
      byRun.get(k).push(r);
    }
    const gs = [...byRun.entries()].map(([run, reqs]) => ({ run, reqs, last: reqs[reqs.length - 1].start }));
    gs.sort((a, b) => b.last - a.last);
    return gs;
  }

  function runGroup(g, v) {
    const box = el("div", "run", { run: g.run });
    const head = el("div", "run-head");
    const failed = g.reqs.filter((r) => r.state === "done" && r.outcome !== "ok").length;
    const attempts = g.reqs.reduce((n, r) => n + r.attempts.length + (r.elided || 0), 0);
    head.append(el("span", "run-name", null, g.run || "(no run)"),
      el("span", "run-meta", null, `${plural(g.reqs.length, "request")} · ${plural(attempts, "attempt")}` + (failed ? ` · ${failed} failed` : "")));
    box.append(head);
    for (const r of g.reqs) box.append(requestRow(r, v));
    return box;
  }

  function requestRow(r, v) {
    const row = el("div", "row", { id: r.id, state: r.state, outcome: r.outcome });
    const label = el("div", "label");
    const statusText = r.state === "done" ? String(r.status || "—") : r.state;
    label.append(el("span", "status", { outcome: r.outcome }, statusText),
      el("span", "method", null, r.method),
      el("span", "path", null, r.path));
    if (r.stream) label.append(el("span", "tag", { tag: "stream" }, "stream"));
    label.append(el("span", "meta", null, [r.upstream, r.model, r.slot && "slot " + r.slot, plural(r.attempts.length + (r.elided || 0), "attempt") + (r.elided ? ` (the last ${r.attempts.length} shown)` : "")].filter(Boolean).join(" · ")));
    label.title = `${r.id}\n${r.method} ${r.path}${r.stream ? " (a stream)" : ""}\nrun ${r.run || "(none)"} · upstream ${r.upstream}` +
      (r.model ? ` · model ${r.model}` : "") + (r.error ? `\ngateway error: ${r.error}` : "") + endings(r);
    row.append(label);

    const track = el("div", "track");
    const end = r.state === "done" ? (r.end || r.start) : v.t;
    track.append(place(el("div", "span"), v.x, r.start, end));
    if (r.state === "queued" && r.queued_at) {
      const q = place(el("div", "queue-wait live"), v.x, r.queued_at, v.t);
      q.title = `waiting for a slot, ${r.ahead} ahead when it joined`;
      track.append(q);
    }
    const as = r.attempts;
    as.forEach((a, i) => {
      const gateFrom = a.start - (a.gate_wait || 0);
      if (a.admission_wait > 0) {
        const w = place(el("div", "admission-wait"), v.x, gateFrom - a.admission_wait, gateFrom);
        w.title = `waited ${fmtDur(a.admission_wait)} for the upstream, down or recovering`;
        track.append(w);
      }
      if (a.gate_wait > 0) {
        const q = place(el("div", "queue-wait"), v.x, gateFrom, a.start);
        q.title = `waited ${fmtDur(a.gate_wait)} for a slot, ${a.ahead} ahead`;
        track.append(q);
      }
      track.append(bar(a, v));
      const next = as[i + 1];
      if (a.end && next && next.start - (next.gate_wait || 0) - (next.admission_wait || 0) > a.end) {
        track.append(gap(a.end, next.start - (next.gate_wait || 0) - (next.admission_wait || 0), a, v, false));
      } else if (a.end && a.retry_in && r.state !== "done") {
        track.append(gap(a.end, Math.min(v.t, a.end + a.retry_in), a, v, true));
      }
      if (a.end && a.retry_after) {
        const m = el("div", "retry-after");
        m.style.left = v.x(a.end + a.retry_after) + "%";
        m.title = `Retry-After: ${fmtDur(a.retry_after)} from attempt ${a.n}'s ${a.status || "answer"}`;
        track.append(m);
      }
    });
    if (r.state === "done" && as.length === 0) {
      const m = el("div", "refusal", { outcome: r.outcome });
      m.style.left = v.x(end) + "%";
      m.title = `${r.status} ${r.error || ""}: no attempt was sent`;
      track.append(m);
    }
    row.append(track);
    return row;
  }

  // endings lists how the request's last attempts ended, for its tooltip.
  function endings(r) {
    const as = r.attempts.slice(-MAX_ENDINGS);
    const skipped = r.attempts.length - as.length + (r.elided || 0);
    return (skipped ? `\n(${plural(skipped, "earlier attempt")})` : "") +
      as.map((a) => `\nattempt ${a.n}: ${ending(a)}`).join("");
  }

  // ending says how an attempt ended, as the feed wrote it from the
  // record: a status, a class, or how an answer ended ("200, broke after
  // 300 bytes, continued"); never an error's text.
  function ending(a) {
    return a.ending || (a.status ? String(a.status) : (a.error || (a.outcome === "inflight" ? "in flight" : a.outcome)));
  }

  function bar(a, v) {
    const end = a.end || v.t;
    const b = place(el("div", "bar", { outcome: a.outcome, n: a.n }), v.x, a.start, end);
    if (a.probe) b.dataset.probe = "true";
    if (a.continued) b.dataset.continued = "true";
    if (a.fallback === "hedge") b.dataset.hedge = "true";
    // The bar says how it ended where the words fit (10px type is about
    // 6px a character), else its status, as the tooltip says the rest.
    const what = ending(a), px = (end - a.start) * v.pxPerMs;
    b.textContent = what.length * 6 + 8 <= px ? what : (a.status && px > 30 ? String(a.status) : "");
    b.title = `attempt ${a.n}: ${what}, ${fmtDur(end - a.start)}` +
      (a.error && a.status && !what.includes(a.error) ? ` (${a.error})` : "") +
      (a.upstream ? `\nat ${a.upstream}` : "") +
      (a.fallback === "hedge" ? ", a hedge: sent beside the request's own attempt, which had no content yet; the first to send content won" :
        a.fallback ? `, a fallback (${a.fallback})` : "") +
      (a.probe ? "\nthe upstream's probe, while it was down" : "") +
      (a.continued ? (a.prefill_bytes ? `\ncontinued the stream that broke, with ${a.prefill_bytes} bytes of the answer as its prefill` : "\ncarried on the stream that broke") : "") +
      (a.admission_wait ? `\nwaited ${fmtDur(a.admission_wait)} for the upstream` : "") +
      (a.retry_after ? `\nRetry-After ${fmtDur(a.retry_after)}` : "") +
      (a.retry_in ? `\nnext attempt in ${fmtDur(a.retry_in)}` : "");
    return b;
  }

  // gap is the wait between attempts, labelled with its length; a live one
  // is labelled with the wait chosen.
  function gap(from, to, a, v, live) {
    const g = place(el("div", live ? "gap live" : "gap"), v.x, from, to);
    const length = live ? a.retry_in : to - from;
    if ((to - from) * v.pxPerMs < 30) g.classList.add("narrow");
    g.append(el("span", null, null, fmtDur(length)));
    g.title = (live ? "waiting " : "waited ") + fmtDur(length) +
      (a.retry_in ? ` (the policy chose ${fmtDur(a.retry_in)}` + (a.retry_after ? `, the server asked ${fmtDur(a.retry_after)})` : ")") : "");
    return g;
  }

  function place(e, x, from, to) {
    e.style.left = x(from) + "%";
    e.style.width = Math.max(0, x(to) - x(from)) + "%";
    return e;
  }

  // --- The axis -----------------------------------------------------------------

  const STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 15e3, 3e4, 6e4, 12e4, 3e5, 6e5, 9e5, 18e5, 36e5, 72e5, 144e5, 216e5, 432e5, 864e5];

  // tickMarks puts a tick every round step, one per 90 px at most.
  function tickMarks(win, px) {
    const span = win.t1 - win.t0;
    const most = Math.max(2, Math.floor(px / 90));
    const step = STEPS.find((s) => span / s <= most) || STEPS[STEPS.length - 1];
    const out = [];
    for (let v = 0; v <= span; v += step) out.push(win.t0 + v);
    return out;
  }

  function fmtTick(ms) {
    if (ms === 0) return "0";
    return fmtDur(ms);
  }

  // fmtDur writes a duration as a person reads it: 300ms, 1.5s, 15s, 2m5s.
  function fmtDur(ms) {
    ms = Math.max(0, ms);
    if (ms < 1000) return Math.round(ms) + "ms";
    if (ms < 10000) return trim((ms / 1000).toFixed(1)) + "s";
    if (ms < 60000) return Math.round(ms / 1000) + "s";
    const m = Math.floor(ms / 60000), s = Math.round((ms % 60000) / 1000);
    if (m < 60) return m + "m" + (s ? s + "s" : "");
    return Math.floor(m / 60) + "h" + (m % 60 ? (m % 60) + "m" : "");
  }

  function trim(s) { return s.endsWith(".0") ? s.slice(0, -2) : s; }

  function clock(ms) {
    const d = new Date(ms);
    const p = (n, w) => String(n).padStart(w || 2, "0");
    return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
  }

  function plural(n, word) { return `${n} ${word}${n === 1 ? "" : "s"}`; }

  // --- Start ----------------------------------------------------------------------

  $("filter-run").addEventListener("input", schedule);
  $("filter-status").addEventListener("change", schedule);
  window.addEventListener("resize", schedule);
  $("rows").addEventListener("pointerenter", () => { pointing = true; });
  $("rows").addEventListener("pointerleave", () => { pointing = false; });
  // The page's HTML carries the newest requests: they are drawn now, in
  // the first frame, rather than when the event stream delivers its
  // snapshot, which a proxy that buffers may hold back. The snapshot then
  // replaces them, and the events follow it.
  const first = $("first");
  if (first) apply(JSON.parse(first.textContent));
  frame();
  connect();
})();
