// fak console: reads the gateway's operator views with the key the operator typed once (sessionStorage),
// sent as a Bearer on every fetch. Live updates come from /v1/fak/console/events, read with fetch() and a
// stream reader (EventSource cannot send the Authorization header). Everything from the gateway is put in
// the page as text (textContent), never as HTML: tool results are what an attacker wrote.
"use strict";

const KEY = "fak-console-key";
const MAX_ROWS = 200;
const $ = (sel) => document.querySelector(sel);

const seen = { blocks: new Map() };  // block -> eviction receipt ids seen so far
let statsTimer = null;

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v; else if (k.startsWith("data-")) e.setAttribute(k, v); else e[k] = v;
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c ?? "")));
  return e;
}

function key() { return sessionStorage.getItem(KEY) || ""; }

async function api(path) {
  const res = await fetch(path, { headers: { Authorization: `Bearer ${key()}` } });
  if (!res.ok) throw await refusal(res);
  return res.json();
}

async function refusal(res) {
  let message = `${res.status} ${res.statusText}`;
  try { message = (await res.json()).error.message || message; } catch (_) { /* not the error shape */ }
  const err = new Error(message);
  err.status = res.status;
  return err;
}

function status(state, text) { const s = $("#status"); s.dataset.state = state; s.textContent = text; }

function showLogin(message) {
  $("#console").hidden = true;
  $("#forget").hidden = true;
  $("#login").hidden = false;
  $("#login-error").textContent = message || "";
  status("idle", "not connected");
}

function prepend(list, node) {
  list.prepend(node);
  while (list.children.length > MAX_ROWS) list.lastElementChild.remove();
}

function when(ts) { return ts ? new Date(ts * 1000).toLocaleTimeString() : ""; }

// --- verdicts and receipts ------------------------------------------------------------------------------

function excerpt(pieces) {
  const q = el("blockquote", { class: "excerpt" });
  for (const [text, offending] of pieces) q.append(offending ? el("mark", {}, text) : document.createTextNode(text));
  return q;
}

function receiptIds(block) { return (seen.blocks.get(block) || []).join(", "); }

function addVerdict(r, via) {
  const what = r.kind === "call" ? `${r.tool}(${r.arguments || ""})` : (r.tool || "tool result");
  const li = el("li", { class: `verdict kind-${r.kind}`, "data-via": via, "data-block": r.block || "",
                        "data-request": r.request_id || "" },
    el("span", { class: `outcome outcome-${r.outcome}` }, r.outcome), " ", what, " ",
    el("span", { class: "meta" }, [when(r.ts), r.detector || r.rule, r.score ? `score ${r.score.toFixed(2)}` : "",
                                   r.stage, r.flagged ? "flagged (passed)" : ""].filter(Boolean).join(" · ")));
  if (r.reason) li.append(el("div", { class: "reason" }, r.reason));
  if (r.excerpt && r.excerpt.length) li.append(excerpt(r.excerpt));
  const ids = el("span", { class: "receipt-ids" }, r.block ? receiptIds(r.block) : "");
  li.append(el("div", { class: "meta" }, "request ", el("span", { class: "id" }, r.request_id || "-"),
               r.block ? " · block " : "", r.block ? el("span", { class: "id" }, r.block) : "",
               r.block ? " · receipts " : "", r.block ? ids : ""));
  prepend($("#verdicts"), li);
}

function addReceipt(r, via) {
  const li = el("li", { class: "receipt", "data-via": via, "data-receipt": r.receipt_id },
    el("span", { class: "id" }, r.receipt_id), " ",
    el("span", { class: "meta" }, [when(r.ts), r.worker, r.cause || "verdict", r.mode, r.check,
                                   `${r.tokens_before} → ${r.tokens_after} tokens`, r.identical ? "identical to a fresh prefill" : "",
                                   r.attends_evicted ? "STILL ATTENDS EVICTED" : ""].filter(Boolean).join(" · ")),
    el("div", { class: "meta" }, "blocks ", el("span", { class: "id" }, (r.blocks || []).join(", ")),
       " · request ", el("span", { class: "id" }, r.request_id || "-")));
  prepend($("#receipts"), li);
  for (const b of r.blocks || []) {
    const ids = seen.blocks.get(b) || [];
    if (!ids.includes(r.receipt_id)) ids.push(r.receipt_id);
    seen.blocks.set(b, ids);
    for (const v of document.querySelectorAll(`#verdicts li[data-block="${CSS.escape(b)}"] .receipt-ids`)) {
      v.textContent = ids.join(", ");
    }
  }
}

function addRecord(r, via) { if (r.kind === "eviction") addReceipt(r, via); else addVerdict(r, via); }

// --- requests and workers -------------------------------------------------------------------------------

function addRequest(r, via) {
  const quarantined = [...(r.evicted || []).map((b) => `${b} (evicted)`), ...(r.placeholders || []).map((b) => `${b} (replaced)`)];
  const tr = el("tr", { class: "request", "data-via": via, "data-request": r.request_id },
    el("td", { class: "id" }, r.request_id), el("td", {}, r.model), el("td", { class: "id" }, r.key_id || "-"),
    el("td", {}, r.tool_results), el("td", { class: "id" }, quarantined.join(", ") || "-"),
    el("td", { class: "state" }, "running"));
  tr.onclick = () => showRequest(r.request_id);
  prepend($("#requests tbody"), tr);
}

function markDone(d) {
  const row = document.querySelector(`#requests tr[data-request="${CSS.escape(d.request_id)}"] .state`);
  if (row) row.textContent = `${d.finish_reason} · ${d.completion_tokens} tokens` + (d.latency_ms != null ? ` · ${d.latency_ms} ms` : "");
}

async function showRequest(id) {
  const pre = $("#request-detail");
  pre.hidden = false;
  try { pre.textContent = JSON.stringify(await api(`/v1/fak/requests/${encodeURIComponent(id)}`), null, 2); }
  catch (err) { pre.textContent = err.message; }
}

function showWorkers(list) {
  const body = $("#workers tbody");
  body.replaceChildren(...list.map((w) => {
    const load = w.capacity ? Math.min(1, (w.active + w.queued) / w.capacity) : 0;
    return el("tr", { class: "worker" }, el("td", { class: "id" }, w.worker), el("td", {}, w.model), el("td", {}, w.backend),
              el("td", {}, w.device),
              el("td", {}, el("span", { class: "load" }, Object.assign(el("span"), { style: `width:${load * 100}%` })),
                 ` ${w.active} active, ${w.queued} queued of ${w.capacity}`));
  }));
  if (!list.length) body.append(el("tr", {}, el("td", { colSpan: 5, class: "meta" }, "no live workers")));
}

// --- plots: small inline SVG, one per model and measure ---------------------------------------------------

const SVG = "http://www.w3.org/2000/svg";

function plot(title, points, key, unit) {
  const w = 280, h = 70, pad = 4;
  const values = points.map((p) => p[key]);
  const max = Math.max(1e-9, ...values.filter((v) => v != null));
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("width", w); svg.setAttribute("height", h); svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  const step = (w - 2 * pad) / Math.max(1, points.length - 1);
  const xy = values.map((v, i) => v == null ? null : [pad + i * step, h - pad - (v / max) * (h - 2 * pad - 12)]);
  const line = document.createElementNS(SVG, "polyline");
  line.setAttribute("points", xy.filter(Boolean).map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(" "));
  svg.append(line);
  for (const [x, y] of xy.filter((p, i) => p && values[i] > 0)) {  // a lone point draws no line: a dot shows it
    const dot = document.createElementNS(SVG, "circle");
    dot.setAttribute("cx", x.toFixed(1)); dot.setAttribute("cy", y.toFixed(1)); dot.setAttribute("r", 2);
    svg.append(dot);
  }
  const label = document.createElementNS(SVG, "text");
  label.setAttribute("x", pad); label.setAttribute("y", 11);
  const last = values.filter((v) => v != null).pop();
  label.textContent = `${title}: max ${max.toFixed(1)} ${unit}` + (last != null ? `, last ${last.toFixed(1)}` : "");
  svg.append(label);
  return svg;
}

function showStats(stats) {
  const box = $("#plots");
  box.replaceChildren(...stats.models.map((m) => el("div", { class: "plot", "data-model": m.model },
    el("div", {}, el("b", {}, m.model), ` · ${m.requests} requests, ${m.completion_tokens} completion tokens`),
    plot("tokens/s", m.points, "tokens_per_s", "tok/s"), " ", plot("latency", m.points, "latency_ms", "ms"))));
  if (!stats.models.length) box.append(el("p", { class: "meta" }, "no completions in the last 5 minutes"));
}

async function refreshStats() {
  try { showStats(await api("/v1/fak/console/stats")); } catch (_) { /* the stream's status says why */ }
}

function showViewer(tenant, quarantined) {
  $("#viewer").textContent = tenant ? `tenant ${tenant}` : `operator · ${quarantined} blocks quarantined`;
}

// --- the live stream ------------------------------------------------------------------------------------

function onEvent(event, data) {
  switch (event) {
    case "snapshot":
      $("#verdicts").replaceChildren(); $("#receipts").replaceChildren(); $("#requests tbody").replaceChildren();
      seen.blocks.clear();
      showViewer(data.tenant, data.quarantined_blocks);
      for (const r of [...data.records].reverse()) if (r.kind === "eviction") addRecord(r, "snapshot");
      for (const r of [...data.records].reverse()) if (r.kind !== "eviction") addRecord(r, "snapshot");
      for (const r of [...data.requests].reverse()) addRequest(r, "snapshot");
      for (const d of data.done) markDone(d);
      showWorkers(data.workers);
      status("live", "live");
      break;
    case "record": addRecord(data, "stream"); break;
    case "request": addRequest(data, "stream"); break;
    case "done": markDone(data); refreshStats(); break;
    case "workers": showWorkers(data); break;
    case "quarantined": showViewer(null, data); break;
  }
}

async function stream() {
  const res = await fetch("/v1/fak/console/events", { headers: { Authorization: `Bearer ${key()}` } });
  if (!res.ok) throw await refusal(res);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let event = "message", data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) event = line.slice(7);
        else if (line.startsWith("data: ")) data += line.slice(6);
      }
      if (data) onEvent(event, JSON.parse(data));
    }
  }
}

async function run() {
  $("#login").hidden = true;
  $("#console").hidden = false;
  $("#forget").hidden = false;
  api("/v1/fak/console/policy").then((p) => { $("#policy").textContent = JSON.stringify(p, null, 2); },
                                      (err) => { $("#policy").textContent = err.message; });
  refreshStats();
  clearInterval(statsTimer);
  statsTimer = setInterval(refreshStats, 5000);
  for (;;) {
    status("connecting", "connecting…");
    try {
      await stream();
    } catch (err) {
      if (err.status === 401 || err.status === 403) {
        sessionStorage.removeItem(KEY);
        clearInterval(statsTimer);
        showLogin(err.message);
        return;
      }
    }
    status("down", "disconnected, retrying");
    await new Promise((r) => setTimeout(r, 2000));
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("#login").addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem(KEY, $("#key").value.trim());
    run();
  });
  $("#forget").addEventListener("click", () => { sessionStorage.removeItem(KEY); location.reload(); });
  if (key()) run(); else showLogin();
});
