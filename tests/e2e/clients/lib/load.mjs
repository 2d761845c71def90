// A streaming load generator for `pagedkv serve`: N concurrent clients, each sending
// streaming requests back to back (the four APIs in turn, prompts sharing a few
// system prefixes so the prefix cache is exercised) until a time limit, then waiting
// for what is in flight. Measures time to first token, inter-token latency and
// completion-token throughput, counts every error (a non-200, an error event, a
// stream without its terminal event), and samples the server's RSS. Bounded in time
// and count; loopback only. Used by bench/server/load.mjs and the small load test.

import { readFileSync } from 'node:fs';
import { longPrefix, getStats, getMetrics, poolReleased } from './server.mjs';

const MODEL = 'default';
const ENDPOINTS = ['/v1/chat/completions', '/v1/completions', '/v1/responses', '/v1/messages'];

function bodyFor(endpoint, system, user, maxTokens, seed) {
  const common = { model: MODEL, stream: true, temperature: 0.8, seed };
  switch (endpoint) {
    case '/v1/chat/completions':
      return { ...common, max_tokens: maxTokens, stream_options: { include_usage: true },
        messages: [{ role: 'system', content: system }, { role: 'user', content: user }] };
    case '/v1/completions':
      return { ...common, max_tokens: maxTokens, stream_options: { include_usage: true }, prompt: `${system}\n${user}` };
    case '/v1/responses':
      return { ...common, max_output_tokens: maxTokens, instructions: system, input: user };
    default:
      return { ...common, max_tokens: maxTokens, system, messages: [{ role: 'user', content: user }] };
  }
}

// Reads an SSE body; calls onEvent(eventName, dataString) per event.
async function readSse(res, onEvent) {
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      let name = null;
      let data = '';
      for (const line of ev.split('\n')) {
        if (line.startsWith('event: ')) name = line.slice(7);
        else if (line.startsWith('data: ')) data += line.slice(6);
      }
      onEvent(name, data);
    }
  }
  if (buf.trim()) throw new Error(`stream ended inside an event: ${buf.slice(0, 100)}`);
}

// One streaming request. Returns {ok, error, ttftMs, gapsMs[], tokens, cached}.
async function oneRequest(url, endpoint, body, signal) {
  const t0 = performance.now();
  const res = await fetch(url + endpoint, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body), signal });
  if (res.status !== 200) return { ok: false, error: `${endpoint} ${res.status}: ${(await res.text()).slice(0, 200)}` };
  let first = null;
  let last = null;
  const gaps = [];
  let tokens = null;
  let cached = 0;
  let terminal = false;
  let error = null;
  const piece = () => {
    const t = performance.now();
    if (first === null) first = t; else gaps.push(t - last);
    last = t;
  };
  await readSse(res, (name, data) => {
    if (data === '[DONE]') { terminal = true; return; }
    let j;
    try { j = JSON.parse(data); } catch { error = `unparseable SSE data ${data.slice(0, 80)}`; return; }
    if (j.error || name === 'error') { error = `error event: ${data.slice(0, 200)}`; return; }
    switch (endpoint) {
      case '/v1/chat/completions':
        if (j.choices?.[0]?.delta?.content) piece();
        if (j.usage) { tokens = j.usage.completion_tokens; cached = j.usage.prompt_tokens_details?.cached_tokens ?? 0; }
        break;
      case '/v1/completions':
        if (j.choices?.[0]?.text) piece();
        if (j.usage) { tokens = j.usage.completion_tokens; cached = j.usage.prompt_tokens_details?.cached_tokens ?? 0; }
        break;
      case '/v1/responses':
        if (j.type === 'response.output_text.delta' && j.delta) piece();
        if (j.type === 'response.completed' || j.type === 'response.incomplete') {
          terminal = true; tokens = j.response.usage.output_tokens; cached = j.response.usage.input_tokens_details?.cached_tokens ?? 0;
        }
        break;
      default:
        if (j.type === 'message_start') cached = j.message.usage.cache_read_input_tokens ?? 0;
        if (j.type === 'content_block_delta' && j.delta?.text) piece();
        if (j.type === 'message_delta') tokens = j.usage.output_tokens;
        if (j.type === 'message_stop') terminal = true;
    }
  });
  if (error) return { ok: false, error };
  if (!terminal) return { ok: false, error: `${endpoint}: stream without its terminal event` };
  if (tokens === null) return { ok: false, error: `${endpoint}: no usage in the stream` };
  return { ok: true, ttftMs: first === null ? null : first - t0, gapsMs: gaps, tokens, cached, totalMs: performance.now() - t0 };
}

function rssKb(pid) {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : null;
  } catch { return null; }
}

export function percentile(xs, p) {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

// Runs the load. opts: clients, durationS, maxTokens, prefixes (distinct shared
// system prompts), drainS (how long in-flight requests may take after the time is
// up before they are aborted and counted as errors), maxRequests (a hard cap).
export async function runLoad(srv, opts = {}) {
  const clients = opts.clients ?? 256;
  const durationMs = (opts.durationS ?? 30) * 1000;
  const maxTokens = opts.maxTokens ?? 32;
  const prefixes = Array.from({ length: opts.prefixes ?? 8 }, (_, i) => longPrefix(`load-${i}`, opts.prefixSentences ?? 6));
  const maxRequests = opts.maxRequests ?? 100000;
  const drainMs = (opts.drainS ?? 120) * 1000;
  const ac = new AbortController();
  const results = [];
  const errors = [];
  let started = 0;
  const rss = [];
  const rssTimer = setInterval(() => { const v = rssKb(srv.proc.pid); if (v) rss.push(v); }, 250);
  const t0 = performance.now();
  const stopAt = t0 + durationMs;
  const client = async (c) => {
    let k = 0;
    while (performance.now() < stopAt && started < maxRequests) {
      started++;
      const endpoint = ENDPOINTS[(c + k) % ENDPOINTS.length];
      const system = prefixes[(c * 7 + k) % prefixes.length];
      const body = bodyFor(endpoint, system, `client ${c} request ${k}: say something about blocks.`, maxTokens, c * 1000 + k);
      k++;
      try {
        const r = await oneRequest(srv.url, endpoint, body, ac.signal);
        if (r.ok) results.push({ ...r, endpoint }); else errors.push(r.error);
      } catch (e) {
        errors.push(`${endpoint}: ${e.name}: ${e.message}`);
      }
    }
  };
  const all = Promise.all(Array.from({ length: clients }, (_, c) => client(c)));
  const killer = setTimeout(() => ac.abort(), durationMs + drainMs);
  await all;
  clearTimeout(killer);
  const wallMs = performance.now() - t0;
  clearInterval(rssTimer);
  const ttft = results.map((r) => r.ttftMs).filter((x) => x !== null);
  const gaps = results.flatMap((r) => r.gapsMs);
  const tokens = results.reduce((a, r) => a + r.tokens, 0);
  const cached = results.reduce((a, r) => a + r.cached, 0);
  return {
    clients, durationS: durationMs / 1000, wallS: wallMs / 1000, requests: results.length, errors: errors.length,
    errorSamples: [...new Set(errors)].slice(0, 10),
    completionTokens: tokens, cachedPromptTokens: cached,
    tokensPerS: tokens / (wallMs / 1000), requestsPerS: results.length / (wallMs / 1000),
    ttftMs: { p50: percentile(ttft, 50), p99: percentile(ttft, 99), max: percentile(ttft, 100) },
    itlMs: { p50: percentile(gaps, 50), p99: percentile(gaps, 99), max: percentile(gaps, 100) },
    rssMiB: { start: rss.length ? rss[0] / 1024 : null, peak: rss.length ? Math.max(...rss) / 1024 : null, end: rss.length ? rss[rss.length - 1] / 1024 : null },
  };
}

// The server-side view after a run: stats, preemptions, and whether every block is
// back (idle, used == 0, free == total - the null block).
export async function serverSummary(url) {
  const s = await getStats(url);
  const m = await getMetrics(url);
  return {
    engine: s.engine, pool: s.pool, server: s.server,
    preemptions: m.pagedkv_preemptions_total,
    released: s.server.in_flight === 0 && s.engine.running === 0 && s.engine.waiting === 0 && s.engine.live_owners === 0 && poolReleased(s.pool),
  };
}
