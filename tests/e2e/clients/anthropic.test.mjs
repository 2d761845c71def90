// The real `@anthropic-ai/sdk` npm client against `pagedkv serve` on loopback:
// messages streaming and not, cache_read_input_tokens on a repeated prefix, stop
// sequences, abort mid-stream, and the Anthropic error shape.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, waitFor, idleAndReleased, getStats, longPrefix } from './lib/server.mjs';

let srv;
let client;
const model = 'default';

before(async () => {
  srv = await startServer();
  client = new Anthropic({ baseURL: srv.url, apiKey: 'unused-without-api-keys', maxRetries: 0, timeout: 60000 });
});

after(async () => {
  if (!srv) return;
  const r = await srv.stop();
  assert.equal(r.code, 0, `exit code after SIGTERM; stderr:\n${srv.stderr()}`);
});

test('messages, non-streaming', async () => {
  const r = await client.messages.create({
    model, max_tokens: 12, system: 'You are terse.',
    messages: [{ role: 'user', content: 'What is a commit?' }],
  });
  assert.equal(r.type, 'message');
  assert.equal(r.role, 'assistant');
  assert.equal(r.content[0].type, 'text');
  assert.equal(typeof r.content[0].text, 'string');
  assert.ok(['end_turn', 'max_tokens'].includes(r.stop_reason), r.stop_reason);
  assert.ok(r.usage.input_tokens > 0);
  assert.ok(r.usage.output_tokens > 0 && r.usage.output_tokens <= 12);
  assert.equal(typeof r.usage.cache_read_input_tokens, 'number');
});

test('messages, streaming: events in order and the same text as non-streaming', async () => {
  const req = { model, max_tokens: 16, temperature: 0, messages: [{ role: 'user', content: [{ type: 'text', text: 'Describe SQLAlchemy.' }] }] };
  const a = await client.messages.create(req);
  const stream = await client.messages.create({ ...req, stream: true });
  const types = [];
  let text = '';
  let stop = null;
  let outTokens = null;
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') text += ev.delta.text;
    if (ev.type === 'message_delta') { stop = ev.delta.stop_reason; outTokens = ev.usage.output_tokens; }
  }
  assert.equal(types[0], 'message_start');
  assert.equal(types[types.length - 1], 'message_stop');
  assert.ok(types.includes('content_block_start') && types.includes('content_block_stop'), types.join(','));
  assert.equal(text, a.content[0].text);
  assert.equal(stop, a.stop_reason);
  assert.equal(outTokens, a.usage.output_tokens);

  // The SDK's helper assembles the same message.
  const final = await client.messages.stream(req).finalMessage();
  assert.equal(final.content[0].text, a.content[0].text);
});

test('cache_read_input_tokens on a repeated system prompt', async () => {
  const system = longPrefix('anthropic-cache');
  const r1 = await client.messages.create({ model, max_tokens: 2, system, messages: [{ role: 'user', content: 'one' }] });
  const r2 = await client.messages.create({ model, max_tokens: 2, system: [{ type: 'text', text: system, cache_control: { type: 'ephemeral' } }],
    messages: [{ role: 'user', content: 'two' }] });
  assert.equal(r1.usage.cache_read_input_tokens, 0);
  assert.ok(r2.usage.cache_read_input_tokens >= 64, JSON.stringify(r2.usage));
  assert.ok(r2.usage.input_tokens >= r2.usage.cache_read_input_tokens, 'input_tokens counts every prompt token');

  // Streaming reports it in the final usage (message_delta), which the SDK's
  // finalMessage() carries.
  const s = await client.messages.create({ model, max_tokens: 2, system, messages: [{ role: 'user', content: 'three' }], stream: true });
  let final = null;
  for await (const ev of s) if (ev.type === 'message_delta') final = ev.usage;
  assert.ok(final.cache_read_input_tokens >= 64, JSON.stringify(final));
});

// docs/server.md promises cache_read_input_tokens in message_start (as Anthropic's API
// sends it there): the server writes message_start once the engine admitted the request.
test('streaming message_start carries cache_read_input_tokens', async () => {
  const system = longPrefix('anthropic-cache-start');
  await client.messages.create({ model, max_tokens: 1, system, messages: [{ role: 'user', content: 'one' }] });
  const s = await client.messages.create({ model, max_tokens: 2, system, messages: [{ role: 'user', content: 'two' }], stream: true });
  let start = null;
  for await (const ev of s) if (ev.type === 'message_start') start = ev.message;
  assert.ok(start.usage.cache_read_input_tokens >= 64, JSON.stringify(start.usage));
});

test('stop_sequences end the message with stop_sequence', async () => {
  // Find a piece of what the model writes greedily, then ask it to stop there.
  const req = { model, max_tokens: 24, temperature: 0, messages: [{ role: 'user', content: 'Tell me about Python lists.' }] };
  const a = await client.messages.create(req);
  const text = a.content[0].text;
  const words = text.split(/\s+/).filter((w) => w.length >= 3);
  if (words.length < 2) return; // the model wrote too little to pick a stop string from
  const stopAt = words[1];
  const b = await client.messages.create({ ...req, stop_sequences: [stopAt] });
  assert.equal(b.stop_reason, 'stop_sequence', JSON.stringify(b));
  assert.equal(b.stop_sequence, stopAt);
  assert.equal(b.content[0].text, text.slice(0, text.indexOf(stopAt)), 'text is cut before the stop string');
});

test('abort mid-stream releases the request', async () => {
  const before = await getStats(srv.url);
  // A fixed seed (a pagedkv extension field the SDK passes through), as in the OpenAI
  // abort test: with a server-drawn seed an early end-of-text could finish the request
  // before the abort reached the engine, and the test would be flaky.
  const stream = client.messages.stream({ model, max_tokens: 1500, temperature: 1.0, seed: 7,
    messages: [{ role: 'user', content: longPrefix('anthropic-abort', 5) }] });
  let deltas = 0;
  try {
    for await (const ev of stream) {
      if (ev.type === 'content_block_delta') deltas++;
      if (deltas === 3) { stream.abort(); break; }
    }
  } catch (e) {
    assert.ok(e.name === 'AbortError' || /abort/i.test(String(e)), String(e));
  }
  assert.equal(deltas, 3);
  const r = await waitFor(() => idleAndReleased(srv.url), 20000);
  assert.ok(r.ok, JSON.stringify(r.stats));
  assert.ok(r.stats.engine.cancelled > before.engine.cancelled, JSON.stringify(r.stats.engine));
});

test('errors come back as the SDK error classes with the Anthropic shape', async () => {
  // max_tokens is required by the Anthropic API.
  await assert.rejects(client.messages.create({ model, messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof Anthropic.BadRequestError && e.status === 400 && /max_tokens/.test(e.message)
      && e.error?.type === 'error' && e.error?.error?.type === 'invalid_request_error');
  await assert.rejects(client.messages.create({ model: 'no-such-model', max_tokens: 4, messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof Anthropic.NotFoundError && e.error?.error?.type === 'not_found_error' && /no-such-model/.test(e.message));
  await assert.rejects(client.messages.create({ model, max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }] }),
    (e) => e.status === 400 && /messages\[0\]\.content\[0\]/.test(e.message));
  await assert.rejects(client.messages.create({ model, max_tokens: 4, temperature: 'warm', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e.status === 400 && /temperature/.test(e.message));
  await assert.rejects(client.messages.create({ model, max_tokens: 4, tools: [{ name: 't', input_schema: { type: 'object' } }], messages: [{ role: 'user', content: 'x' }] }),
    (e) => e.status === 400 && /tools/.test(e.message));
});
