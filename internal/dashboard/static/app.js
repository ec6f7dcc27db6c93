// The fero dashboard: polls this node's admin API (docs/admin-api.md) once a
// second and draws what it answers. Plain JavaScript, no build step; the
// charts are uPlot (uPlot.iife.min.js, loaded before this file).
(function () {
  "use strict";

  const API = "/api/v1/";
  const POLL_MS = 1000;
  const FETCH_TIMEOUT_MS = 3000;
  const LAG_ROWS = 15;
  const EVENT_ROWS = 100;
  const LAGGING_SECONDS = 2; // a ring cell is outlined when its acks stall this long

  // Owner colours, assigned to member ids in order of first sight (sorted),
  // and kept for the page's life so a colour never moves to another member.
  const PALETTE = [
    "#3b82f6", "#f59e0b", "#10b981", "#8b5cf6", "#ec4899", "#06b6d4",
    "#84cc16", "#f97316", "#6366f1", "#14b8a6", "#a855f7", "#eab308",
  ];
  const SERIES_COLOURS = {
    commits: "#3b82f6", applied: "#10b981", writes: "#f59e0b", calls: "#8b5cf6", errors: "#dc2626",
    write_p50_ms: "#93c5fd", write_p99_ms: "#2563eb", call_p50_ms: "#c4b5fd", call_p99_ms: "#7c3aed",
  };
  const DOWN = new Set(["suspect", "dead", "removed"]);

  const state = {
    colours: new Map(),
    members: new Map(), // id → member, from the last overview
    partitions: [],
    node: null,
    lastOK: 0, // Date.now() of the last overview answered
    eventsKey: "",
    charts: {},
    hoverP: -1,
    updates: 0,
  };

  const num = new Intl.NumberFormat(undefined);
  const dec = new Intl.NumberFormat(undefined, { maximumFractionDigits: 1 });
  const dec2 = new Intl.NumberFormat(undefined, { maximumFractionDigits: 2 });

  // ---- small helpers -------------------------------------------------------

  function $(id) { return document.getElementById(id); }

  // el("span", {class: "x", "data-y": 1}, child, "text", ...)
  function el(tag, attrs) {
    const e = document.createElement(tag);
    if (attrs) {
      for (const k of Object.keys(attrs)) {
        const v = attrs[k];
        if (v === null || v === undefined || v === false) continue;
        if (k === "class") e.className = v;
        else if (k === "style") e.style.cssText = v;
        else e.setAttribute(k, v === true ? "" : String(v));
      }
    }
    const add = function (c) {
      if (c === null || c === undefined || c === false) return;
      if (Array.isArray(c)) c.forEach(add);
      else e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    };
    for (let i = 2; i < arguments.length; i++) add(arguments[i]);
    return e;
  }

  function setText(id, text) {
    const e = $(id);
    const s = String(text);
    if (e && e.textContent !== s) e.textContent = s;
  }

  function isNum(v) { return typeof v === "number" && isFinite(v); }
  function fmtInt(v) { return isNum(v) ? num.format(v) : "–"; }
  function fmtDec(v) { return isNum(v) ? dec.format(v) : "–"; }
  function str(v) { return typeof v === "string" ? v : (v === null || v === undefined ? "" : String(v)); }

  // fmtVersion shows a map version as the API gives it: 16 hex digits, as
  // `fero status` prints it.
  function fmtVersion(v) { return str(v) || "–"; }

  function fmtBytes(v) {
    if (!isNum(v)) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (i === 0 ? num.format(v) : dec.format(v)) + " " + units[i];
  }

  function fmtDuration(ms) {
    if (!isNum(ms) || ms < 0) return "–";
    let s = Math.floor(ms / 1000);
    const d = Math.floor(s / 86400); s -= d * 86400;
    const h = Math.floor(s / 3600); s -= h * 3600;
    const m = Math.floor(s / 60); s -= m * 60;
    if (d > 0) return d + "d " + h + "h";
    if (h > 0) return h + "h " + m + "m";
    if (m > 0) return m + "m " + s + "s";
    return s + "s";
  }

  function parseTime(v) {
    if (isNum(v)) return v;
    const t = Date.parse(str(v));
    return isNaN(t) ? NaN : t;
  }

  function fmtClock(v) {
    const t = parseTime(v);
    if (isNaN(t)) return "–";
    return new Date(t).toLocaleTimeString(undefined, { hour12: false });
  }

  function shortId(id) {
    id = str(id);
    return id.length > 14 ? id.slice(0, 12) + "…" : id;
  }

  function colourOf(id) {
    id = str(id);
    if (id === "") return null;
    let c = state.colours.get(id);
    if (!c) {
      const i = state.colours.size;
      c = i < PALETTE.length ? PALETTE[i] : "hsl(" + Math.round((i * 137.508) % 360) + " 60% 55%)";
      state.colours.set(id, c);
    }
    return c;
  }

  // Assigns colours to ids not seen yet, in sorted order, so the first view
  // of a cluster gets the same colours on every page load.
  function assignColours(ids) {
    Array.from(new Set(ids)).filter(id => id !== "" && !state.colours.has(id)).sort().forEach(colourOf);
  }

  // runs fn, reporting (not swallowing) an error in it without stopping the
  // other parts of the page from drawing.
  function section(fn) {
    try {
      fn();
    } catch (e) {
      if (typeof window.reportError === "function") window.reportError(e);
      else setTimeout(function () { throw e; });
    }
  }

  // ---- fetching ------------------------------------------------------------

  // getJSON answers {ok, body} or {ok: false, status, error}; it never throws.
  async function getJSON(path) {
    const ctrl = new AbortController();
    const timer = setTimeout(function () { ctrl.abort(); }, FETCH_TIMEOUT_MS);
    try {
      const resp = await fetch(API + path, {
        signal: ctrl.signal, cache: "no-store", headers: { Accept: "application/json" },
      });
      let body = null;
      try { body = await resp.json(); } catch (_) { body = null; }
      if (!resp.ok) {
        const why = body && typeof body.error === "string" ? body.error : resp.statusText;
        return { ok: false, status: resp.status, path: API + path, reason: "answered " + resp.status + (why ? ": " + why : "") };
      }
      if (!body || typeof body !== "object") {
        return { ok: false, status: resp.status, path: API + path, reason: "answered no JSON object" };
      }
      return { ok: true, body: body };
    } catch (e) {
      const why = e && e.name === "AbortError" ? "did not answer within " + FETCH_TIMEOUT_MS / 1000 + " s" : "cannot be reached";
      return { ok: false, status: 0, path: API + path, reason: why };
    } finally {
      clearTimeout(timer);
    }
  }

  // ---- the banner ----------------------------------------------------------

  function showProblems(results) {
    const failed = results.filter(r => !r.ok);
    const banner = $("banner");
    if (failed.length === 0) {
      banner.hidden = true;
      document.body.dataset.state = "ok";
      return;
    }
    const unreachable = failed.some(r => r.status === 0);
    // The same trouble on every path is told once.
    const reasons = Array.from(new Set(failed.map(r => r.reason)));
    const what = failed.length === results.length && reasons.length === 1
      ? "The admin API " + reasons[0] + "."
      : failed.map(r => r.path + " " + r.reason).join("; ") + ".";
    const since = state.lastOK ? " Last answer " + fmtDuration(Date.now() - state.lastOK) + " ago;" : "";
    banner.querySelector("strong").textContent = unreachable ? "Node unreachable." : "Node not answering.";
    setText("banner-text", what + since + " retrying every second.");
    if (!$("node-id").textContent || failed.some(r => r.path.endsWith("overview"))) {
      const ready = $("ready");
      ready.dataset.ready = "";
      ready.className = "badge badge-bad";
      ready.textContent = unreachable ? "unreachable" : "error";
    }
    banner.hidden = false;
    document.body.dataset.state = unreachable ? "unreachable" : "error";
  }

  // ---- overview ------------------------------------------------------------

  function renderOverview(ov) {
    const node = ov.node || {};
    state.node = node;
    const members = Array.isArray(ov.members) ? ov.members.filter(Boolean) : [];
    state.members = new Map(members.map(m => [str(m.id), m]));
    assignColours(members.filter(m => !m.client).map(m => str(m.id)));

    setText("node-id", str(node.id) || "–");
    $("node-id").title = str(node.id);
    setText("node-resource", str(node.resource) || "–");
    setText("node-kind", node.client ? "client" : (node.voting ? "server · voting" : "server"));
    document.title = (node.resource ? node.resource + " · " : "") + "fero dashboard";

    const ready = $("ready");
    ready.dataset.ready = node.ready ? "true" : "false";
    ready.className = "badge " + (node.ready ? "badge-ok" : "badge-warn");
    ready.textContent = node.ready ? "ready" : "not ready";
    setText("updated", "updated " + fmtClock(ov.time || Date.now()));

    const reasons = Array.isArray(node.not_ready) ? node.not_ready.filter(Boolean).map(str) : [];
    const nr = $("not-ready");
    if (!node.ready && reasons.length) {
      nr.replaceChildren(el("strong", null, "Not ready: "), reasons.join("; "));
      nr.hidden = false;
    } else {
      nr.hidden = true;
    }

    const alive = members.filter(m => m.status === "connected" || m.status === "client").length;
    setText("tile-members", members.length ? alive + " / " + members.length : "–");
    const roles = node.roles && typeof node.roles === "object" ? node.roles : {};
    setText("tile-roles", fmtInt(roles.owner || 0) + " / " + fmtInt(roles.replica || 0));
    setText("tile-keys", fmtInt(node.keys));
    const mv = fmtVersion(node.map_version);
    setText("tile-map", mv);
    $("tile-map").title = mv;
    $("tile-map").classList.toggle("long", mv.length > 12);
    setText("tile-uptime", fmtDuration(parseTime(ov.time) - parseTime(node.started)));

    renderMembers(members, node, Array.isArray(ov.configuration) ? ov.configuration.filter(Boolean) : []);
    renderFacts(node, ov.disk);
  }

  function statusPill(status) {
    status = str(status) || "unknown";
    return el("span", { class: "pill status-" + status.replace(/[^a-z]/g, "") }, status);
  }

  function renderMembers(members, node, configuration) {
    const voters = new Map(configuration.map(c => [str(c.id), c]));
    const rows = members.slice().sort(function (a, b) {
      if (!!a.client !== !!b.client) return a.client ? 1 : -1;
      return str(a.id) < str(b.id) ? -1 : str(a.id) > str(b.id) ? 1 : 0;
    }).map(function (m) {
      const id = str(m.id);
      const colour = m.client ? null : colourOf(id);
      const cfg = voters.get(id);
      let kind = m.client ? "client" : "server";
      if (cfg) kind += cfg.forgotten ? " · forgotten" : " · voter";
      const conn = str(m.conn);
      return el("tr", { "data-member": id, "data-status": str(m.status), class: DOWN.has(m.status) ? "row-down" : null },
        el("td", null,
          el("span", { class: "swatch", style: colour ? "background:" + colour : "visibility:hidden" }),
          el("code", { title: id }, shortId(id)),
          id === str(node.id) ? el("span", { class: "tag tag-self" }, "this node") : null),
        el("td", { class: "mono", title: m.gossip ? "gossip " + str(m.gossip) : null }, str(m.addr) || "–"),
        el("td", null, statusPill(m.status), conn ? el("div", { class: "sub", title: conn }, conn) : null),
        el("td", { class: "num" }, m.client ? "–" : fmtInt(m.owned)),
        el("td", { class: "kind" }, kind));
    });
    $("members").tBodies[0].replaceChildren.apply($("members").tBodies[0], rows);
    setText("member-count", members.length);
    const voting = configuration.filter(c => !c.forgotten).length;
    setText("config-summary", configuration.length ? "configuration: " + voting + " voter" + (voting === 1 ? "" : "s") : "");
  }

  function renderFacts(node, disk) {
    const roles = node.roles && typeof node.roles === "object" ? node.roles : {};
    const roleText = Object.keys(roles).sort().map(k => k + " " + fmtInt(roles[k])).join(", ") || "–";
    const facts = [
      ["Node", str(node.id) || "–", true],
      ["Data address", str(node.addr) || "–", true],
      ["Version", str(node.version) || "–"],
      ["Started", node.started ? new Date(parseTime(node.started)).toLocaleString() : "–"],
      ["Cluster", str(node.cluster) || "–", true],
      ["Voting", node.client ? "– (client)" : (node.voting ? "yes" : "no")],
      ["Partitions", fmtInt(node.partitions)],
      ["Roles", roleText],
      ["Keys", fmtInt(node.keys)],
      ["Map version", fmtVersion(node.map_version), true],
    ];
    const st = node.stats && typeof node.stats === "object" ? node.stats : null;
    if (st) {
      facts.push(["Committed / applied", fmtInt(st.committed) + " / " + fmtInt(st.applied)]);
      facts.push(["Partitions gained / lost", fmtInt(st.gained) + " / " + fmtInt(st.lost)]);
    }
    if (disk && typeof disk === "object") {
      // The known fields first, in this order, then any others.
      const order = ["dir", "fsync", "bytes", "syncs", "write_s", "snapshots", "snapshot_bytes", "snapshot_s", "behind", "err"];
      const names = { write_s: "write time", snapshot_s: "snapshot time", snapshot_bytes: "snapshot bytes", behind: "partitions behind", err: "error" };
      const keys = order.filter(k => k in disk).concat(Object.keys(disk).filter(k => !order.includes(k)).sort());
      for (const k of keys) {
        const v = disk[k];
        let text;
        if (isNum(v)) text = /bytes/.test(k) ? fmtBytes(v) : /_s$/.test(k) ? dec2.format(v) + " s" : fmtInt(v);
        else if (typeof v === "string" || typeof v === "boolean") text = String(v);
        else if (v === null || v === undefined) text = "–";
        else text = JSON.stringify(v);
        if (k === "err" && text === "") continue;
        facts.push(["Disk " + (names[k] || k.replace(/_/g, " ")), text, k === "dir"]);
      }
    } else {
      facts.push(["Disk", "none (in memory)"]);
    }
    const items = [];
    for (const f of facts) {
      items.push(el("dt", null, f[0]), el("dd", { class: f[2] ? "mono" : null, title: f[1] }, f[1]));
    }
    $("facts").replaceChildren.apply($("facts"), items);
  }

  // ---- partitions ----------------------------------------------------------

  function renderPartitions(body) {
    const parts = Array.isArray(body.partitions) ? body.partitions.filter(Boolean) : [];
    parts.sort((a, b) => (a.p | 0) - (b.p | 0));
    state.partitions = parts;
    assignColours(parts.map(p => str(p.owner)));
    renderRing(parts);
    renderLegend(parts);
    renderLag(parts);
    if (state.hoverP >= 0) showTooltipFor(state.hoverP, null);
  }

  function renderRing(parts) {
    const ring = $("ring");
    if (ring.children.length !== parts.length) {
      const cells = parts.map((_, i) => el("div", { class: "cell", "data-i": i, role: "gridcell" }));
      ring.replaceChildren.apply(ring, cells);
    }
    for (let i = 0; i < parts.length; i++) {
      const p = parts[i];
      const cell = ring.children[i];
      const owner = str(p.owner);
      const m = state.members.get(owner);
      let cls = "cell";
      if (owner === "") cls += " cell-none";
      else if (m && DOWN.has(m.status)) cls += " owner-down";
      if (p.role === "syncing") cls += " syncing";
      if (isNum(p.lag_seconds) && p.lag_seconds >= LAGGING_SECONDS && isNum(p.lag_offsets) && p.lag_offsets > 0) cls += " lagging";
      if (cell.className !== cls) cell.className = cls;
      const bg = owner === "" ? "" : colourOf(owner);
      if (cell.dataset.bg !== bg) {
        cell.style.backgroundColor = bg;
        cell.dataset.bg = bg;
      }
      const ps = String(p.p);
      if (cell.dataset.p !== ps) cell.dataset.p = ps;
      if (cell.dataset.owner !== owner) cell.dataset.owner = owner;
    }
    setText("partition-count", parts.length);
  }

  function renderLegend(parts) {
    const counts = new Map();
    for (const p of parts) {
      const o = str(p.owner);
      counts.set(o, (counts.get(o) || 0) + 1);
    }
    const ids = Array.from(counts.keys()).filter(id => id !== "");
    // Servers that own nothing yet still get a legend entry.
    for (const [id, m] of state.members) if (!m.client && !counts.has(id)) ids.push(id);
    ids.sort();
    const items = ids.map(function (id) {
      const m = state.members.get(id);
      const status = m ? str(m.status) : "";
      return el("span", { class: "legend-item" + (DOWN.has(status) ? " legend-down" : ""), "data-owner": id },
        el("span", { class: "swatch", style: "background:" + colourOf(id) }),
        el("code", { title: id }, shortId(id)),
        el("span", { class: "legend-count" }, fmtInt(counts.get(id) || 0)),
        DOWN.has(status) ? statusPill(status) : null);
    });
    if (counts.has("")) {
      items.push(el("span", { class: "legend-item", "data-owner": "" },
        el("span", { class: "swatch swatch-none" }), "no owner",
        el("span", { class: "legend-count" }, fmtInt(counts.get("")))));
    }
    items.push(el("span", { class: "legend-item legend-key" },
      el("span", { class: "swatch swatch-lagging" }), "acks stalled ≥ " + LAGGING_SECONDS + " s"));
    $("legend").replaceChildren.apply($("legend"), items);
  }

  function replicaSwatches(replicas) {
    const ids = Array.isArray(replicas) ? replicas.map(str) : [];
    if (!ids.length) return "–";
    return el("span", { class: "replicas", title: ids.join(", ") }, ids.map(function (id) {
      const m = state.members.get(id);
      const down = m && DOWN.has(m.status);
      return el("span", { class: "swatch" + (down ? " swatch-down" : ""), style: "background:" + colourOf(id) });
    }));
  }

  function renderLag(parts) {
    const owned = parts.filter(p => p.role === "owner");
    const key = p => [isNum(p.lag_offsets) ? p.lag_offsets : -1, isNum(p.lag_seconds) ? p.lag_seconds : -1];
    owned.sort(function (a, b) {
      const ka = key(a), kb = key(b);
      // Ties (a healthy cluster's zeros) put the busiest partitions first.
      const oa = isNum(a.offset) ? a.offset : 0, ob = isNum(b.offset) ? b.offset : 0;
      return (kb[0] - ka[0]) || (kb[1] - ka[1]) || (ob - oa) || ((a.p | 0) - (b.p | 0));
    });
    const rows = owned.slice(0, LAG_ROWS).map(p => el("tr", { "data-partition": p.p },
      el("td", { class: "num" }, fmtInt(p.p)),
      el("td", null, replicaSwatches(p.replicas)),
      el("td", { class: "num" }, fmtInt(p.offset)),
      el("td", { class: "num" }, fmtInt(p.oldest)),
      el("td", { class: "num" }, fmtInt(p.keys)),
      el("td", { class: "num" + (isNum(p.lag_offsets) && p.lag_offsets > 0 ? " warn" : "") }, fmtInt(p.lag_offsets)),
      el("td", { class: "num" + (isNum(p.lag_seconds) && p.lag_seconds >= LAGGING_SECONDS ? " warn" : "") }, fmtDec(p.lag_seconds))));
    const tb = $("lag").tBodies[0];
    tb.replaceChildren.apply(tb, rows);
    $("lag-empty").hidden = owned.length > 0;
    $("lag").hidden = owned.length === 0;
    setText("lag-hint", owned.length > LAG_ROWS
      ? "top " + LAG_ROWS + " of the " + owned.length + " partitions this node owns, most behind first"
      : "partitions this node owns, most behind first");
  }

  // ---- the ring's tooltip --------------------------------------------------

  function showTooltipFor(i, ev) {
    const p = state.partitions[i];
    const tip = $("tooltip");
    if (!p) { tip.hidden = true; return; }
    const owner = str(p.owner);
    const replicas = Array.isArray(p.replicas) ? p.replicas.map(str) : [];
    const m = state.members.get(owner);
    const rows = [
      ["Owner", owner ? owner + (m && DOWN.has(m.status) ? " (" + m.status + ")" : "") : "none"],
      ["Replicas", replicas.length ? replicas.join(", ") : "none"],
      ["This node", str(p.role) || "–"],
      ["Epoch", str(p.epoch) || "–"],
      ["Offset", fmtInt(p.offset) + (isNum(p.oldest) ? " (oldest " + fmtInt(p.oldest) + ")" : "")],
      ["Keys", fmtInt(p.keys)],
      ["Lag", p.role === "owner" && (isNum(p.lag_offsets) || isNum(p.lag_seconds))
        ? fmtInt(p.lag_offsets) + " offsets, " + fmtDec(p.lag_seconds) + " s" : "– (the owner's to tell)"],
    ];
    if (p.why) rows.push(["Waiting for", str(p.why)]);
    const dl = el("dl", null);
    for (const r of rows) dl.append(el("dt", null, r[0]), el("dd", null, r[1]));
    tip.replaceChildren(el("div", { class: "tooltip-title" },
      owner ? el("span", { class: "swatch", style: "background:" + colourOf(owner) }) : el("span", { class: "swatch swatch-none" }),
      "Partition " + p.p), dl);
    tip.hidden = false;
    if (ev) {
      const pad = 14;
      const w = tip.offsetWidth, h = tip.offsetHeight;
      let x = ev.clientX + pad, y = ev.clientY + pad;
      if (x + w > window.innerWidth - 8) x = ev.clientX - w - pad;
      if (y + h > window.innerHeight - 8) y = ev.clientY - h - pad;
      tip.style.left = Math.max(8, x) + "px";
      tip.style.top = Math.max(8, y) + "px";
    }
  }

  function setupTooltip() {
    const ring = $("ring");
    ring.addEventListener("mousemove", function (ev) {
      const cell = ev.target.closest(".cell");
      if (!cell) { state.hoverP = -1; $("tooltip").hidden = true; return; }
      state.hoverP = Number(cell.dataset.i);
      showTooltipFor(state.hoverP, ev);
    });
    ring.addEventListener("mouseleave", function () {
      state.hoverP = -1;
      $("tooltip").hidden = true;
    });
  }

  // ---- charts --------------------------------------------------------------

  // [field, label, dash]: writes are dashed, as they often equal commits.
  const RATE_SERIES = [["commits", "commits"], ["applied", "applied"], ["writes", "writes", [6, 4]], ["calls", "calls"], ["errors", "errors"]];
  const LATENCY_SERIES = [
    ["write_p50_ms", "write p50"], ["write_p99_ms", "write p99"],
    ["call_p50_ms", "call p50"], ["call_p99_ms", "call p99"],
  ];

  function pad2(n) { return n < 10 ? "0" + n : String(n); }

  // fmtTick labels a time axis tick (seconds) as 14:05 or 14:05:30.
  function fmtTick(v, incr) {
    const d = new Date(v * 1000);
    const hm = pad2(d.getHours()) + ":" + pad2(d.getMinutes());
    if (incr >= 60 && d.getSeconds() === 0) return hm;
    const hms = hm + ":" + pad2(d.getSeconds());
    return incr < 1 ? hms + "." + Math.floor(d.getMilliseconds() / 100) : hms;
  }

  function lastValue(arr) {
    if (!arr) return null;
    for (let i = arr.length - 1; i >= 0; i--) if (arr[i] != null) return arr[i];
    return null;
  }

  function chartWidth(box) {
    return Math.max(240, Math.floor(box.clientWidth));
  }

  function makeChart(boxId, defs, unit, fmt) {
    const box = $(boxId);
    const opts = {
      width: chartWidth(box),
      height: 220,
      cursor: { drag: { x: false, y: false }, points: { size: 6 } },
      scales: {
        x: { time: true },
        y: { range: function (u, min, max) { return [0, isNum(max) && max > 0 ? max * 1.15 : 1]; } },
      },
      axes: [
        {
          stroke: "#6b7280", grid: { stroke: "#eef0f4", width: 1 }, ticks: { stroke: "#e5e7eb", width: 1 },
          space: 70,
          // Whole seconds: the node samples once a second.
          incrs: [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600],
          values: function (u, splits, ai, space, incr) {
            return splits.map(v => fmtTick(v, incr));
          },
        },
        {
          stroke: "#6b7280", size: 56, grid: { stroke: "#eef0f4", width: 1 }, ticks: { show: false },
          values: function (u, vals) { return vals.map(v => fmt(v)); },
        },
      ],
      series: [{
        label: "Time",
        value: function (u, v, si, idx) {
          if (idx == null) v = lastValue(u.data[0]);
          return v == null ? "–" : fmtClock(v * 1000);
        },
      }].concat(defs.map(d => ({
        label: d[1],
        stroke: SERIES_COLOURS[d[0]],
        width: 1.75,
        dash: d[2],
        points: { show: false },
        spanGaps: false,
        // Off the chart, the legend shows the latest value.
        value: function (u, v, si, idx) {
          if (idx == null) v = lastValue(u.data[si]);
          return v == null ? "–" : fmt(v) + " " + unit;
        },
      }))),
    };
    const empty = [[]].concat(defs.map(() => []));
    return new uPlot(opts, empty, box);
  }

  function setupCharts() {
    if (typeof window.uPlot !== "function") return;
    state.charts.rates = makeChart("chart-rates", RATE_SERIES, "/s", v => dec.format(v));
    state.charts.latency = makeChart("chart-latency", LATENCY_SERIES, "ms", v => dec2.format(v));
    let pending = 0;
    window.addEventListener("resize", function () {
      clearTimeout(pending);
      pending = setTimeout(function () {
        for (const [id, c] of [["chart-rates", state.charts.rates], ["chart-latency", state.charts.latency]]) {
          c.setSize({ width: chartWidth($(id)), height: 220 });
        }
      }, 100);
    });
  }

  function column(samples, key) {
    return samples.map(s => (isNum(s[key]) ? s[key] : null));
  }

  function renderSeries(body) {
    const samples = (Array.isArray(body.samples) ? body.samples : []).filter(s => s && isNum(s.t));
    const xs = samples.map(s => s.t / 1000);
    if (state.charts.rates) {
      state.charts.rates.setData([xs].concat(RATE_SERIES.map(d => column(samples, d[0]))));
      state.charts.latency.setData([xs].concat(LATENCY_SERIES.map(d => column(samples, d[0]))));
    }
    // The tile averages the last ten seconds, steadier than one sample.
    const recent = samples.slice(-10).map(s => s.commits).filter(isNum);
    setText("tile-commits", recent.length ? fmtDec(recent.reduce((a, b) => a + b, 0) / recent.length) : "–");
    renderErrors(samples, isNum(body.interval_s) && body.interval_s > 0 ? body.interval_s : 1);
  }

  // renderErrors lists the failed writes and calls by code: the rate over
  // the last ten samples and the count over every sample kept.
  function renderErrors(samples, interval) {
    const codes = {};
    samples.forEach(function (s, i) {
      const byCode = s.error_codes || {};
      Object.keys(byCode).forEach(function (c) {
        if (!isNum(byCode[c])) return;
        const e = codes[c] || (codes[c] = { recent: 0, total: 0 });
        e.total += byCode[c] * interval;
        if (i >= samples.length - 10) e.recent += byCode[c] / Math.min(10, samples.length);
      });
    });
    const names = Object.keys(codes).sort((a, b) => codes[b].total - codes[a].total || (a < b ? -1 : 1));
    const rows = names.map(c => el("tr", { "data-code": c },
      el("td", null, el("code", null, c)),
      el("td", { class: "num" + (codes[c].recent > 0 ? " warn" : "") }, fmtDec(codes[c].recent)),
      el("td", { class: "num" }, fmtInt(Math.round(codes[c].total)))));
    const tb = $("errors").tBodies[0];
    tb.replaceChildren.apply(tb, rows);
    $("errors").hidden = names.length === 0;
    $("errors-empty").hidden = names.length > 0;
    setText("error-count", fmtInt(Math.round(names.reduce((n, c) => n + codes[c].total, 0))));
  }

  // ---- events --------------------------------------------------------------

  function renderEvents(body) {
    const events = (Array.isArray(body.events) ? body.events : []).filter(Boolean);
    const last = events.length ? events[events.length - 1] : null;
    const key = events.length + "|" + (last ? str(last.t) + str(last.member) + str(last.status) : "");
    if (key === state.eventsKey) return;
    state.eventsKey = key;
    const items = events.slice(-EVENT_ROWS).reverse().map(function (e) {
      const id = str(e.member);
      const colour = !e.client && state.colours.has(id) ? state.colours.get(id) : null;
      return el("li", { class: "event", "data-member": id, "data-status": str(e.status) },
        el("time", { class: "event-time", datetime: str(e.t), title: str(e.t) }, fmtClock(e.t)),
        statusPill(e.status),
        el("span", { class: "event-who" },
          el("span", { class: "swatch", style: colour ? "background:" + colour : "visibility:hidden" }),
          el("code", { title: id }, shortId(id) || "–"),
          e.client ? el("span", { class: "tag" }, "client") : null),
        el("span", { class: "event-addr mono" }, str(e.addr)));
    });
    $("events").replaceChildren.apply($("events"), items);
    $("events-empty").hidden = items.length > 0;
  }

  // ---- the loop ------------------------------------------------------------

  async function tick() {
    const started = Date.now();
    try {
      const results = await Promise.all(["overview", "partitions", "series", "events"].map(getJSON));
      const [ov, parts, series, events] = results;
      if (ov.ok) {
        state.lastOK = Date.now();
        section(() => renderOverview(ov.body));
      }
      if (parts.ok) section(() => renderPartitions(parts.body));
      if (series.ok) section(() => renderSeries(series.body));
      if (events.ok) section(() => renderEvents(events.body));
      section(() => showProblems(results));
      // How many polls drew every part afresh: a test waits on it.
      if (results.every(r => r.ok)) {
        state.updates++;
        document.body.dataset.updates = String(state.updates);
      }
    } finally {
      setTimeout(tick, Math.max(50, POLL_MS - (Date.now() - started)));
    }
  }

  function start() {
    section(setupTooltip);
    section(setupCharts);
    tick();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
