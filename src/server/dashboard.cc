// The dashboard page (dashboard.h).
#include "server/dashboard.h"

namespace pagedkv::server {
namespace {

constexpr std::string_view kHtml = R"PKVHTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>pagedkv dashboard</title>
<style>
  :root { --bg:#0f1419; --card:#1a2129; --fg:#e6e6e6; --mute:#8a96a3; --used:#e8a33d;
          --cached:#3d9be8; --free:#2e3a46; --ok:#5fc37a; --bad:#e05d5d; }
  * { box-sizing: border-box; }
  body { margin:0; font:14px/1.4 system-ui, sans-serif; background:var(--bg); color:var(--fg); }
  header { padding:12px 20px; display:flex; gap:16px; align-items:center; border-bottom:1px solid #253040; }
  header h1 { font-size:18px; margin:0; }
  header .mute { color:var(--mute); }
  header input { margin-left:auto; background:var(--card); color:var(--fg); border:1px solid #334; padding:4px 8px; width:240px; }
  main { display:grid; grid-template-columns: repeat(auto-fit, minmax(340px, 1fr)); gap:16px; padding:16px 20px; }
  section { background:var(--card); border-radius:8px; padding:14px 16px; }
  h2 { font-size:13px; text-transform:uppercase; letter-spacing:.06em; color:var(--mute); margin:0 0 10px; }
  .big { font-size:28px; font-weight:600; }
  .row { display:flex; justify-content:space-between; padding:2px 0; }
  .row span:first-child { color:var(--mute); }
  .bar { display:flex; height:22px; border-radius:4px; overflow:hidden; background:var(--free); margin:8px 0; }
  .bar div { height:100%; transition: width .4s; }
  .legend span { margin-right:12px; font-size:12px; }
  .dot { display:inline-block; width:9px; height:9px; border-radius:2px; margin-right:4px; }
  table { width:100%; border-collapse:collapse; font-size:12px; }
  th, td { text-align:right; padding:3px 5px; border-bottom:1px solid #253040; white-space:nowrap; }
  th:first-child, td:first-child { text-align:left; }
  #chat-log { height:220px; overflow:auto; background:#11171d; padding:8px; border-radius:4px; white-space:pre-wrap; }
  .msg-user { color:#9cc9ff; } .msg-bot { color:var(--fg); } .msg-meta { color:var(--mute); font-size:12px; }
  form { display:flex; gap:8px; margin-top:8px; }
  form input { flex:1; background:#11171d; color:var(--fg); border:1px solid #334; padding:6px 8px; }
  button { background:#2d6cdf; color:white; border:0; padding:6px 14px; border-radius:4px; cursor:pointer; }
  button:disabled { opacity:.5; }
  #status.ok { color:var(--ok); } #status.bad { color:var(--bad); }
  .wide { grid-column: 1 / -1; }
</style>
</head>
<body>
<header>
  <h1>pagedkv</h1>
  <span class="mute">model <b id="model">…</b></span>
  <span class="mute">uptime <span id="uptime">…</span></span>
  <span id="status" class="mute">connecting…</span>
  <input id="api-key" type="password" placeholder="API key (only with --api-keys)">
</header>
<main>
  <section>
    <h2>KV pool</h2>
    <div class="big"><span id="pool-used">0</span> / <span id="pool-max">0</span> <span class="mute" style="font-size:14px">blocks in use</span></div>
    <div class="bar" id="pool-bar"><div id="bar-used" style="background:var(--used);width:0"></div><div id="bar-cached" style="background:var(--cached);width:0"></div></div>
    <div class="legend"><span><i class="dot" style="background:var(--used)"></i>used <b id="pool-used2">0</b></span><span><i class="dot" style="background:var(--cached)"></i>cached <b id="pool-cached">0</b></span><span><i class="dot" style="background:var(--free)"></i>free <b id="pool-free">0</b></span></div>
    <div class="row"><span>pool now / max</span><span><span id="pool-num">0</span> / <span id="pool-max2">0</span></span></div>
    <div class="row"><span>block size (tokens)</span><span id="block-size">0</span></div>
  </section>
  <section>
    <h2>Prefix cache</h2>
    <div class="big" id="hit-rate">0%</div>
    <div class="row"><span>cached prompt tokens</span><span id="cached-tokens">0</span></div>
    <div class="row"><span>prompt tokens</span><span id="prompt-tokens">0</span></div>
    <div class="row"><span>completion tokens</span><span id="completion-tokens">0</span></div>
    <div class="row"><span>live owners (prompt_cache_key)</span><span id="live-owners">0</span></div>
  </section>
  <section>
    <h2>Requests</h2>
    <div class="row"><span>running</span><span class="big" id="running">0</span></div>
    <div class="row"><span>waiting</span><span id="waiting">0</span></div>
    <div class="row"><span>in flight (server) / capacity</span><span><span id="in-flight">0</span> / <span id="capacity">0</span></span></div>
    <div class="row"><span>finished / cancelled / errors</span><span><span id="finished">0</span> / <span id="cancelled">0</span> / <span id="errors">0</span></span></div>
    <div class="row"><span>preemptions</span><span id="preemptions">0</span></div>
    <div class="row"><span>engine steps</span><span id="steps">0</span></div>
  </section>
  <section>
    <h2>Cold tier</h2>
    <div id="cold">not enabled</div>
  </section>
  <section class="wide">
    <h2>Recent requests</h2>
    <table id="recent"><thead><tr><th>id</th><th>endpoint</th><th>status</th><th>stream</th><th>prompt</th><th>cached</th><th>completion</th><th>TTFT ms</th><th>total ms</th><th>finish</th></tr></thead><tbody></tbody></table>
  </section>
  <section class="wide">
    <h2>Chat</h2>
    <div id="chat-log"></div>
    <form id="chat-form"><input id="chat-input" placeholder="Say something to the model…" autocomplete="off"><button id="chat-send" type="submit">Send</button></form>
  </section>
</main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const keyInput = $("api-key");
keyInput.value = localStorage.getItem("pagedkv-key") || "";
keyInput.addEventListener("change", () => localStorage.setItem("pagedkv-key", keyInput.value));
function headers() {
  const h = {"Content-Type": "application/json"};
  if (keyInput.value) h["Authorization"] = "Bearer " + keyInput.value;
  return h;
}
let modelName = null;
const history = [];
function set(id, v) { const e = $(id); if (e) e.textContent = v; }
function pct(x) { return (100 * x).toFixed(1) + "%"; }
async function poll() {
  try {
    const r = await fetch("/v1/stats", {headers: headers(), cache: "no-store"});
    if (!r.ok) { $("status").className = "bad"; $("status").textContent = "stats: HTTP " + r.status; return; }
    const s = await r.json();
    modelName = s.model;
    $("status").className = "ok"; $("status").textContent = s.draining ? "draining" : "live";
    set("model", s.model); set("uptime", Math.round(s.uptime_s) + " s");
    const p = s.pool, max = Math.max(1, p.max_blocks - 1);
    set("pool-used", p.used_blocks); set("pool-used2", p.used_blocks); set("pool-max", p.max_blocks);
    set("pool-max2", p.max_blocks); set("pool-cached", p.cached_blocks); set("pool-free", p.free_blocks);
    set("pool-num", p.num_blocks); set("block-size", p.block_size);
    $("bar-used").style.width = (100 * p.used_blocks / max) + "%";
    $("bar-cached").style.width = (100 * p.cached_blocks / max) + "%";
    const e = s.engine;
    set("hit-rate", pct(e.prefix_hit_rate)); set("cached-tokens", e.cached_prompt_tokens);
    set("prompt-tokens", e.prompt_tokens); set("completion-tokens", e.completion_tokens);
    set("live-owners", e.live_owners); set("running", e.running); set("waiting", e.waiting);
    set("finished", e.finished); set("cancelled", e.cancelled); set("errors", e.errors);
    set("preemptions", e.preemptions); set("steps", e.steps);
    set("in-flight", s.server.in_flight); set("capacity", s.server.admission_width + s.server.max_queue);
    $("cold").textContent = !s.cold ? "not enabled" : s.cold.open_errors > 0 ?
        ("could not be opened: " + s.cold.open_error) :
        ("hits " + s.cold.hits + " · misses " + s.cold.misses + " · restored tokens " +
         s.cold.restored_tokens + " (engine: " + e.cached_prompt_tokens_cold + " cold / " +
         e.cached_prompt_tokens_hot + " hot) · corruptions " + s.cold.corruptions +
         " · queue drops " + s.cold.queue_drops + " · written " +
         (s.cold.bytes / 1048576).toFixed(1) + " MiB");
    const tb = $("recent").querySelector("tbody");
    tb.innerHTML = "";
    for (const q of s.recent) {
      const tr = document.createElement("tr");
      for (const v of [q.id.slice(0, 18), q.endpoint, q.status, q.stream ? "yes" : "no", q.prompt_tokens,
                       q.cached_tokens, q.completion_tokens, q.ttft_ms.toFixed(1), q.total_ms.toFixed(1), q.finish_reason]) {
        const td = document.createElement("td"); td.textContent = v; tr.appendChild(td);
      }
      tb.appendChild(tr);
    }
  } catch (err) {
    $("status").className = "bad"; $("status").textContent = "offline";
  }
}
function line(cls, text) {
  const d = document.createElement("div"); d.className = cls; d.textContent = text;
  $("chat-log").appendChild(d); $("chat-log").scrollTop = 1e9; return d;
}
$("chat-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const text = $("chat-input").value.trim();
  if (!text) return;
  $("chat-input").value = ""; $("chat-send").disabled = true;
  history.push({role: "user", content: text});
  line("msg-user", "you: " + text);
  const out = line("msg-bot", "model: ");
  let reply = "", usage = null;
  try {
    const r = await fetch("/v1/chat/completions", {method: "POST", headers: headers(),
      body: JSON.stringify({model: modelName || "default", messages: history, stream: true,
                            max_tokens: 64, stream_options: {include_usage: true}})});
    if (!r.ok) { out.textContent += "[HTTP " + r.status + "] " + (await r.text()); throw 0; }
    const reader = r.body.getReader(), dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buf += dec.decode(value, {stream: true});
      let i;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const ev = buf.slice(0, i); buf = buf.slice(i + 2);
        const data = ev.split("\n").filter(l => l.startsWith("data: ")).map(l => l.slice(6)).join("\n");
        if (!data || data === "[DONE]") continue;
        const j = JSON.parse(data);
        if (j.error) { out.textContent += " [error] " + j.error.message; continue; }
        if (j.usage) usage = j.usage;
        for (const c of j.choices || []) if (c.delta && c.delta.content) { reply += c.delta.content; out.textContent = "model: " + reply; }
      }
    }
    history.push({role: "assistant", content: reply});
    if (usage) line("msg-meta", "prompt " + usage.prompt_tokens + " tokens (" +
        usage.prompt_tokens_details.cached_tokens + " cached), completion " + usage.completion_tokens);
  } catch (err) {
    if (err !== 0) out.textContent += " [failed: " + err + "]";
  } finally {
    $("chat-send").disabled = false; poll();
  }
});
poll();
setInterval(poll, 1000);
</script>
</body>
</html>
)PKVHTML";

}  // namespace

std::string_view dashboard_html() { return kHtml; }

}  // namespace pagedkv::server
