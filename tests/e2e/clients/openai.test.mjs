// The real `openai` npm client against `pagedkv serve` on loopback: chat completions,
// completions and responses, streaming and not; cached-token usage on a repeated
// prefix; the model list; cancellation mid-stream (the server stays healthy and the
// request's KV blocks are released); graceful SIGTERM (exit 0).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, getStats, getMetrics, waitFor, idleAndReleased, longPrefix } from './lib/server.mjs';

let srv;
let client;
let model;

before(async () => {
  srv = await startServer();
  client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused-without-api-keys', maxRetries: 0, timeout: 60000 });
  const models = await client.models.list();
  assert.equal(models.data.length, 1, 'one served model');
  model = models.data[0].id;
  assert.equal(model, 'default', 'the served name of models/default');
});

after(async () => {
  if (!srv) return;
  const r = await srv.stop();
  assert.equal(r.killed, false, `SIGTERM did not stop the server in time; stderr:\n${srv.stderr()}`);
  assert.equal(r.code, 0, `exit code after SIGTERM; stderr:\n${srv.stderr()}`);
});

test('chat completion, non-streaming', async () => {
  const r = await client.chat.completions.create({
    model,
    messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'What is a block?' }],
    max_completion_tokens: 12,
  });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason), r.choices[0].finish_reason);
  assert.ok(r.usage.prompt_tokens > 0);
  assert.ok(r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 12);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
});

test('chat completion, greedy is deterministic and streaming gives the same text', async () => {
  const req = { model, messages: [{ role: 'user', content: 'Explain git rebase.' }], max_tokens: 16, temperature: 0 };
  const a = await client.chat.completions.create(req);
  const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta?.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(chunks >= 2, `chunks: ${chunks}`);
  assert.equal(text, a.choices[0].message.content, 'stream text equals the non-streaming text');
  assert.equal(finish, a.choices[0].finish_reason);
  assert.ok(usage, 'include_usage gives a usage chunk');
  assert.equal(usage.completion_tokens, a.usage.completion_tokens);
  assert.equal(usage.prompt_tokens, a.usage.prompt_tokens);
});

test('completions, non-streaming and streaming', async () => {
  const r = await client.completions.create({ model, prompt: 'The git commit command', max_tokens: 10 });
  assert.equal(r.object, 'text_completion');
  assert.equal(typeof r.choices[0].text, 'string');
  assert.ok(r.usage.completion_tokens > 0);
  const s = await client.completions.create({ model, prompt: 'The git commit command', max_tokens: 10, stream: true,
    stream_options: { include_usage: true } });
  let text = '';
  let usage = null;
  for await (const chunk of s) {
    for (const c of chunk.choices) text += c.text ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(text, r.choices[0].text);
  assert.equal(usage?.completion_tokens, r.usage.completion_tokens);
});

test('completions accepts token ids as the prompt', async () => {
  const r = await client.completions.create({ model, prompt: [1, 2, 3, 4, 5], max_tokens: 4 });
  assert.equal(r.usage.prompt_tokens, 5);
});

test('responses, non-streaming and streaming', async () => {
  const r = await client.responses.create({ model, instructions: 'Be brief.', input: 'What is Perl?', max_output_tokens: 16 });
  assert.equal(r.object, 'response');
  assert.ok(['completed', 'incomplete'].includes(r.status), r.status);
  assert.equal(typeof r.output_text, 'string');
  assert.ok(r.usage.input_tokens > 0);
  assert.ok(r.usage.output_tokens > 0);
  assert.equal(typeof r.usage.input_tokens_details.cached_tokens, 'number');

  const s = await client.responses.create({ model, instructions: 'Be brief.', input: 'What is Perl?', max_output_tokens: 16, stream: true });
  const types = [];
  let text = '';
  let final = null;
  let lastSeq = -1;
  for await (const ev of s) {
    types.push(ev.type);
    assert.ok(ev.sequence_number > lastSeq, 'sequence numbers increase');
    lastSeq = ev.sequence_number;
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.completed' || ev.type === 'response.incomplete') final = ev.response;
  }
  assert.equal(types[0], 'response.created');
  assert.ok(types.includes('response.output_text.delta'), types.join(','));
  assert.ok(final, `a final response event; got ${types.join(',')}`);
  assert.equal(text, r.output_text);
  assert.equal(final.usage.output_tokens, r.usage.output_tokens);
});

test('responses with message-array input', async () => {
  const r = await client.responses.create({
    model, max_output_tokens: 8,
    input: [{ role: 'user', content: [{ type: 'input_text', text: 'Hello' }] }],
  });
  assert.ok(r.usage.output_tokens > 0);
});

test('cached tokens on a repeated prefix: chat, completions and responses', async () => {
  const prefix = longPrefix('openai-cache');
  const c1 = await client.chat.completions.create({ model, max_tokens: 2,
    messages: [{ role: 'system', content: prefix }, { role: 'user', content: 'first question' }] });
  const c2 = await client.chat.completions.create({ model, max_tokens: 2,
    messages: [{ role: 'system', content: prefix }, { role: 'user', content: 'second question' }] });
  assert.equal(c1.usage.prompt_tokens_details.cached_tokens, 0, 'a fresh prefix is not cached');
  assert.ok(c2.usage.prompt_tokens > 64);
  assert.ok(c2.usage.prompt_tokens_details.cached_tokens >= 64,
    `second chat request reuses the system prompt: ${JSON.stringify(c2.usage)}`);

  const p = longPrefix('openai-completions');
  const d1 = await client.completions.create({ model, prompt: p + ' One', max_tokens: 2 });
  const d2 = await client.completions.create({ model, prompt: p + ' Two', max_tokens: 2 });
  assert.equal(d1.usage.prompt_tokens_details?.cached_tokens ?? 0, 0);
  assert.ok(d2.usage.prompt_tokens_details.cached_tokens >= 64, JSON.stringify(d2.usage));

  const q = longPrefix('openai-responses');
  const e1 = await client.responses.create({ model, instructions: q, input: 'one', max_output_tokens: 2 });
  const e2 = await client.responses.create({ model, instructions: q, input: 'two', max_output_tokens: 2, stream: false });
  assert.equal(e1.usage.input_tokens_details.cached_tokens, 0);
  assert.ok(e2.usage.input_tokens_details.cached_tokens >= 64, JSON.stringify(e2.usage));

  // The cached tokens are counted in /metrics and /v1/stats too.
  const m = await getMetrics(srv.url);
  assert.ok(m.pagedkv_cached_prompt_tokens_total >= 192, `metrics: ${m.pagedkv_cached_prompt_tokens_total}`);
  const s = await getStats(srv.url);
  assert.ok(s.engine.cached_prompt_tokens >= 192);
  assert.ok(s.engine.prefix_hit_rate > 0);
});

test('cancellation mid-stream releases the request and its blocks', async () => {
  const before = await getStats(srv.url);
  const ac = new AbortController();
  const stream = await client.chat.completions.create({
    model, stream: true, max_tokens: 1500, temperature: 1.0, seed: 7,
    messages: [{ role: 'user', content: longPrefix('cancel-me', 6) }],
  }, { signal: ac.signal });
  let got = 0;
  // The SDK ends the iteration quietly (or throws an AbortError) once aborted.
  try {
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta?.content) got++;
      if (got === 3) { ac.abort(); break; }
    }
  } catch (e) {
    assert.ok(e.name === 'AbortError' || /abort/i.test(String(e)), String(e));
  }
  assert.equal(got, 3, 'the stream was aborted after three content chunks');
  const r = await waitFor(() => idleAndReleased(srv.url), 20000);
  assert.ok(r.ok, `after abort the server holds no request and no block: ${JSON.stringify(r.stats)}`);
  assert.ok(r.stats.engine.cancelled > before.engine.cancelled,
    `the engine request was cancelled, not run to the end: ${JSON.stringify(r.stats.engine)}`);
  // Still healthy and serving.
  const h = await fetch(srv.url + '/health');
  assert.equal(h.status, 200);
  const again = await client.chat.completions.create({ model, max_tokens: 3, messages: [{ role: 'user', content: 'hi' }] });
  assert.ok(again.usage.completion_tokens > 0);
});

test('cancellation of a non-streaming request (client timeout) releases it', async () => {
  const before = await getStats(srv.url);
  const ac = new AbortController();
  const p = client.completions.create({ model, prompt: longPrefix('cancel-nonstream', 4), max_tokens: 1800,
    temperature: 1.0, seed: 3 }, { signal: ac.signal });
  // Abort once the request is running in the engine.
  await waitFor(async () => (await getStats(srv.url)).server.in_flight > 0, 10000, 5);
  ac.abort();
  await assert.rejects(p);
  const r = await waitFor(() => idleAndReleased(srv.url), 20000);
  assert.ok(r.ok, JSON.stringify(r.stats));
  // Either the engine saw the cancel, or the request had already finished.
  assert.ok(r.stats.engine.cancelled > before.engine.cancelled || r.stats.engine.finished > before.engine.finished);
});

test('metrics count requests by endpoint and status', async () => {
  const m = await getMetrics(srv.url);
  const key = Object.keys(m).find((k) => k.startsWith('pagedkv_http_requests_total{') &&
    k.includes('endpoint="/v1/chat/completions"') && k.includes('status="200"'));
  assert.ok(key, `a chat/completions 200 counter in ${Object.keys(m).filter((k) => k.startsWith('pagedkv_http')).join(', ')}`);
  assert.ok(m[key] >= 3);
  for (const name of ['pagedkv_prompt_tokens_total', 'pagedkv_completion_tokens_total', 'pagedkv_prefix_hit_rate',
    'pagedkv_kv_blocks{state="free"}', 'pagedkv_kv_blocks{state="used"}', 'pagedkv_preemptions_total',
    'pagedkv_requests_running', 'pagedkv_requests_waiting', 'pagedkv_queue_depth', 'pagedkv_time_to_first_token_seconds_count',
    'pagedkv_inter_token_latency_seconds_count']) {
    assert.ok(name in m, `metric ${name}`);
  }
  assert.ok(m.pagedkv_time_to_first_token_seconds_count > 0);
});

test('SIGTERM drains: an in-flight stream runs to its end, then the server exits 0', async () => {
  const s = await startServer({ args: ['--drain-timeout-s', '60'] });
  const c = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'x', maxRetries: 0, timeout: 60000 });
  const stream = await c.chat.completions.create({ model, stream: true, max_tokens: 48, temperature: 0,
    stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'Tell me about Perl modules.' }] });
  let chunks = 0;
  let finish = null;
  let usage = null;
  let stopping = null;
  for await (const chunk of stream) {
    chunks++;
    if (chunks === 2) stopping = s.stop(); // SIGTERM while the stream is running
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) if (ch.finish_reason) finish = ch.finish_reason;
  }
  assert.ok(stopping, 'SIGTERM was sent mid-stream');
  assert.ok(finish === 'length' || finish === 'stop', `the stream finished normally: ${finish}`);
  assert.ok(usage && usage.completion_tokens > 1, JSON.stringify(usage));
  const r = await stopping;
  assert.equal(r.killed, false);
  assert.equal(r.code, 0, s.stderr());
});
