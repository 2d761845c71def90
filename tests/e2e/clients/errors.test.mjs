// Every error path of docs/server.md's contract, over plain HTTP (fetch) so the exact
// status, headers and body shape are checked, and through the OpenAI SDK for its
// error classes: 400 naming the field (n > 1, unknown field, wrong type, out of
// range, unsupported content), malformed JSON, a non-object body, 413 for an
// oversize body, 404 for an unknown model and path, and 429 + Retry-After when the
// queue is full. After all of it the server is still healthy and holds no block.

import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, waitFor, idleAndReleased, longPrefix } from './lib/server.mjs';

const model = 'default';
let srv;

before(async () => {
  srv = await startServer({ args: ['--max-body-bytes', '65536'] });
});

after(async () => {
  if (srv) assert.equal((await srv.stop()).code, 0, srv.stderr());
});

async function post(path, body, headers = {}) {
  const r = await fetch(srv.url + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* checked by the caller */ }
  return { status: r.status, headers: r.headers, text, json };
}

// Asserts an OpenAI-shaped error: status, type, and (when given) param and a message
// matching re.
function openaiError(r, status, { type = 'invalid_request_error', param, re, code } = {}) {
  assert.equal(r.status, status, r.text);
  assert.ok(r.json && r.json.error, `OpenAI error shape: ${r.text}`);
  assert.equal(r.json.error.type, type, r.text);
  assert.equal(typeof r.json.error.message, 'string');
  assert.ok(r.json.error.message.length > 0);
  if (param !== undefined) assert.equal(r.json.error.param, param, r.text);
  if (re) assert.match(r.json.error.message, re);
  if (code !== undefined) assert.equal(r.json.error.code, code, r.text);
  assert.match(r.headers.get('content-type') || '', /application\/json/);
}

function anthropicError(r, status, type, re) {
  assert.equal(r.status, status, r.text);
  assert.ok(r.json, r.text);
  assert.equal(r.json.type, 'error', r.text);
  assert.equal(r.json.error.type, type, r.text);
  if (re) assert.match(r.json.error.message, re);
}

const chat = (extra) => ({ model, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }], ...extra });
const comp = (extra) => ({ model, max_tokens: 2, prompt: 'hi', ...extra });
const resp = (extra) => ({ model, max_output_tokens: 2, input: 'hi', ...extra });
const msgs = (extra) => ({ model, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }], ...extra });

describe('400 naming the field', () => {
  test('n > 1', async () => {
    openaiError(await post('/v1/chat/completions', chat({ n: 2 })), 400, { param: 'n', re: /\bn\b/ });
    openaiError(await post('/v1/completions', comp({ n: 3 })), 400, { param: 'n' });
    // n = 1 is fine.
    assert.equal((await post('/v1/chat/completions', chat({ n: 1 }))).status, 200);
  });

  test('unknown fields', async () => {
    openaiError(await post('/v1/chat/completions', chat({ frobnicate: true })), 400, { param: 'frobnicate', re: /frobnicate/ });
    openaiError(await post('/v1/completions', comp({ best_of: 2 })), 400, { param: 'best_of' });
    openaiError(await post('/v1/responses', resp({ tools: [{ type: 'function', name: 'f', parameters: { type: 'object' } }] })), 400, { param: 'tools' });
    openaiError(await post('/v1/responses', resp({ previous_response_id: 'resp_1' })), 400, { param: 'previous_response_id' });
    anthropicError(await post('/v1/messages', msgs({ frobnicate: 1 })), 400, 'invalid_request_error', /frobnicate/);
  });

  test('wrong types', async () => {
    const cases = [
      ['/v1/chat/completions', chat({ temperature: 'hot' }), 'temperature'],
      ['/v1/chat/completions', chat({ max_tokens: 'many' }), 'max_tokens'],
      ['/v1/chat/completions', chat({ max_completion_tokens: 1.5 }), 'max_completion_tokens'],
      ['/v1/chat/completions', chat({ stream: 'yes' }), 'stream'],
      ['/v1/chat/completions', chat({ seed: 'abc' }), 'seed'],
      ['/v1/chat/completions', chat({ top_p: [1] }), 'top_p'],
      ['/v1/chat/completions', chat({ stop: 5 }), 'stop'],
      ['/v1/chat/completions', chat({ cache_salt: 7 }), 'cache_salt'],
      ['/v1/chat/completions', chat({ prompt_cache_key: {} }), 'prompt_cache_key'],
      ['/v1/chat/completions', chat({ messages: 'hi' }), 'messages'],
      ['/v1/chat/completions', chat({ model: 5 }), 'model'],
      ['/v1/completions', comp({ prompt: { text: 'x' } }), 'prompt'],
      ['/v1/completions', comp({ top_k: 'ten' }), 'top_k'],
      ['/v1/responses', resp({ input: 42 }), 'input'],
      ['/v1/responses', resp({ max_output_tokens: '2' }), 'max_output_tokens'],
      ['/v1/responses', resp({ instructions: ['x'] }), 'instructions'],
    ];
    for (const [path, body, field] of cases) {
      const r = await post(path, body);
      openaiError(r, 400, {});
      assert.ok(r.json.error.param === field || r.json.error.message.includes(field),
        `${path} ${JSON.stringify(body)}: the error names ${field}: ${r.text}`);
    }
    anthropicError(await post('/v1/messages', msgs({ max_tokens: 'x' })), 400, 'invalid_request_error', /max_tokens/);
    anthropicError(await post('/v1/messages', msgs({ system: 3 })), 400, 'invalid_request_error', /system/);
    anthropicError(await post('/v1/messages', msgs({ stop_sequences: 5 })), 400, 'invalid_request_error', /stop_sequences/);
  });

  test('out of range values', async () => {
    openaiError(await post('/v1/chat/completions', chat({ temperature: -1 })), 400, { param: 'temperature' });
    openaiError(await post('/v1/chat/completions', chat({ top_p: 0 })), 400, { param: 'top_p' });
    openaiError(await post('/v1/chat/completions', chat({ min_p: 2 })), 400, { param: 'min_p' });
    openaiError(await post('/v1/chat/completions', chat({ max_tokens: 0 })), 400, { param: 'max_tokens' });
    openaiError(await post('/v1/chat/completions', chat({ stop: ['a', 'b', 'c', 'd', 'e'] })), 400, { param: 'stop' });
    openaiError(await post('/v1/chat/completions', chat({ cache_salt: 'x'.repeat(257) })), 400, { param: 'cache_salt' });
    openaiError(await post('/v1/chat/completions', chat({ cache_salt: '' })), 400, { param: 'cache_salt' });
    openaiError(await post('/v1/chat/completions', chat({ logprobs: true })), 400, { param: 'logprobs' });
    openaiError(await post('/v1/chat/completions', chat({ frequency_penalty: 0.5 })), 400, { param: 'frequency_penalty' });
    openaiError(await post('/v1/completions', comp({ echo: true })), 400, { param: 'echo' });
    openaiError(await post('/v1/completions', comp({ prompt: [1, 99999999] })), 400, { re: /prompt/ });
    openaiError(await post('/v1/responses', resp({ store: true })), 400, { param: 'store' });
    // 256 bytes of salt are fine (multi-byte characters count as bytes).
    assert.equal((await post('/v1/chat/completions', chat({ cache_salt: 'é'.repeat(128) }))).status, 200);
    openaiError(await post('/v1/chat/completions', chat({ cache_salt: 'é'.repeat(129) })), 400, { param: 'cache_salt' });
  });

  test('unsupported message content names its JSON path', async () => {
    const r = await post('/v1/chat/completions', chat({ messages: [{ role: 'user', content: 'a' }, { role: 'assistant', content: 'b' },
      { role: 'user', content: [{ type: 'image_url', image_url: { url: 'http://x/y.png' } }] }] }));
    openaiError(r, 400, { re: /messages\[2\]\.content\[0\]/ });
    openaiError(await post('/v1/chat/completions', chat({ messages: [{ role: 'wizard', content: 'a' }] })), 400, { re: /messages\[0\]\.role/ });
    openaiError(await post('/v1/chat/completions', chat({ messages: [] })), 400, { re: /messages/ });
    anthropicError(await post('/v1/messages', msgs({ messages: [{ role: 'system', content: 'x' }] })), 400, 'invalid_request_error', /messages\[0\]/);
  });

  test('a missing required field', async () => {
    openaiError(await post('/v1/chat/completions', { model, max_tokens: 2 }), 400, { re: /messages/ });
    openaiError(await post('/v1/completions', { model, max_tokens: 2 }), 400, { re: /prompt/ });
    openaiError(await post('/v1/responses', { model }), 400, { re: /input/ });
    openaiError(await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }] }), 400, { re: /model/ });
    anthropicError(await post('/v1/messages', { model, messages: [{ role: 'user', content: 'x' }] }), 400, 'invalid_request_error', /max_tokens/);
  });

  test('a prompt longer than the model context', async () => {
    const r = await post('/v1/completions', comp({ prompt: longPrefix('too-long', 200) }));
    openaiError(r, 400, { re: /prompt|context|token/i });
  });
});

test('malformed JSON and a non-object body', async () => {
  for (const path of ['/v1/chat/completions', '/v1/completions', '/v1/responses']) {
    openaiError(await post(path, '{"model": "default", "messages": ['), 400, { re: /json/i });
    openaiError(await post(path, '[1,2,3]'), 400, {});
    openaiError(await post(path, ''), 400, {});
    openaiError(await post(path, '{"model":"default"} trailing'), 400, {});
  }
  anthropicError(await post('/v1/messages', '{"model": '), 400, 'invalid_request_error', /json/i);
  anthropicError(await post('/v1/messages', '"just a string"'), 400, 'invalid_request_error');
});

test('413 for a body over --max-body-bytes', async () => {
  const big = JSON.stringify(chat({ messages: [{ role: 'user', content: 'x'.repeat(70000) }] }));
  const r = await post('/v1/chat/completions', big);
  openaiError(r, 413, { code: 'request_too_large' });
  const m = await post('/v1/messages', JSON.stringify(msgs({ messages: [{ role: 'user', content: 'x'.repeat(70000) }] })));
  anthropicError(m, 413, 'request_too_large');
  // Just under the limit is fine.
  const ok = await post('/v1/completions', comp({ prompt: 'word '.repeat(300) }));
  assert.equal(ok.status, 200, ok.text);
});

test('404 for an unknown model and an unknown path', async () => {
  openaiError(await post('/v1/chat/completions', chat({ model: 'gpt-17' })), 404, { code: 'model_not_found', re: /gpt-17/ });
  openaiError(await post('/v1/completions', comp({ model: 'gpt-17' })), 404, { code: 'model_not_found' });
  openaiError(await post('/v1/responses', resp({ model: 'gpt-17' })), 404, { code: 'model_not_found' });
  anthropicError(await post('/v1/messages', msgs({ model: 'claude-17' })), 404, 'not_found_error', /claude-17/);
  const r = await fetch(srv.url + '/v1/no-such-endpoint');
  assert.equal(r.status, 404);
  assert.ok((await r.json()).error);
});

test('the OpenAI SDK maps the errors to its classes with param', async () => {
  const client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'x', maxRetries: 0 });
  await assert.rejects(client.chat.completions.create(chat({ n: 2 })),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'n' && e.type === 'invalid_request_error');
  await assert.rejects(client.chat.completions.create(chat({ model: 'nope' })),
    (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');
  // An error before a stream starts is an HTTP error, not a broken stream.
  await assert.rejects(client.chat.completions.create(chat({ temperature: -3, stream: true })),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'temperature');
});

test('the server is still healthy and holds no block after the errors', async () => {
  const r = await waitFor(() => idleAndReleased(srv.url), 10000);
  assert.ok(r.ok, JSON.stringify(r.stats));
  assert.equal((await fetch(srv.url + '/health')).status, 200);
});

test('429 with Retry-After when the queue is full', async () => {
  // One running sequence and no queue: of many simultaneous long requests, the
  // ones beyond the first get 429 while it runs.
  const small = await startServer({ args: ['--max-num-seqs', '1', '--max-queue', '0'] });
  try {
    const N = 8;
    const body = JSON.stringify({ model, prompt: longPrefix('queue', 4), max_tokens: 400, temperature: 1.0, seed: 1 });
    const rs = await Promise.all(Array.from({ length: N }, async () => {
      const r = await fetch(small.url + '/v1/completions', { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      return { status: r.status, retryAfter: r.headers.get('retry-after'), text: await r.text() };
    }));
    const limited = rs.filter((r) => r.status === 429);
    const okc = rs.filter((r) => r.status === 200);
    assert.equal(limited.length + okc.length, N, rs.map((r) => `${r.status} ${r.text.slice(0, 200)}`).join('\n'));
    assert.ok(limited.length >= 1, 'at least one request was turned away');
    assert.ok(okc.length >= 1, 'at least one ran');
    for (const r of limited) {
      assert.ok(Number(r.retryAfter) >= 1, `Retry-After: ${r.retryAfter}`);
      assert.equal(JSON.parse(r.text).error.type, 'rate_limit_error');
    }
    // Anthropic shape for the same condition.
    const ab = JSON.stringify(msgs({ max_tokens: 400, temperature: 1.0, messages: [{ role: 'user', content: longPrefix('queue-a', 4) }] }));
    const ar = await Promise.all(Array.from({ length: N }, async () => {
      const r = await fetch(small.url + '/v1/messages', { method: 'POST', headers: { 'content-type': 'application/json' }, body: ab });
      return { status: r.status, text: await r.text() };
    }));
    for (const r of ar.filter((x) => x.status === 429)) assert.equal(JSON.parse(r.text).error.type, 'rate_limit_error');
    assert.ok(ar.some((x) => x.status === 429));
    const idle = await waitFor(() => idleAndReleased(small.url), 20000);
    assert.ok(idle.ok, JSON.stringify(idle.stats));
  } finally {
    assert.equal((await small.stop()).code, 0, small.stderr());
  }
});
