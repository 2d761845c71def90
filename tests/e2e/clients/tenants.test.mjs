// Tenants and keys (`--api-keys`): 401 without a valid key (both clients, both
// headers), tenant separation of the KV cache even with the same cache_salt, a
// cache_salt subdividing one tenant's domain, per-tenant /v1/stats, the server secret
// kept 0600, and a second start reusing it.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { statSync, readFileSync, writeFileSync, chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, longPrefix } from './lib/server.mjs';

const KEY_A = 'key-alpha-0123456789';
const KEY_A2 = 'key-alpha-second-key';
const KEY_B = 'key-bravo-0123456789';
let srv;
const model = 'default';
const oa = (key) => new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: key, maxRetries: 0, timeout: 60000 });

before(async () => {
  srv = await startServer({ apiKeys: { [KEY_A]: 'alpha', [KEY_A2]: 'alpha', [KEY_B]: 'bravo' } });
});

after(async () => {
  if (srv) assert.equal((await srv.stop()).code, 0, srv.stderr());
});

test('the server secret is 64 hex characters, mode 0600', () => {
  const f = join(srv.stateDir, 'server-secret');
  const st = statSync(f);
  assert.equal(st.mode & 0o777, 0o600, `mode ${(st.mode & 0o777).toString(8)}`);
  assert.match(readFileSync(f, 'utf8'), /^[0-9a-f]{64}\n$/);
});

test('401 without a key or with a wrong key, in each API shape', async () => {
  for (const path of ['/v1/chat/completions', '/v1/completions', '/v1/responses', '/v1/models', '/v1/stats']) {
    const method = path === '/v1/models' || path === '/v1/stats' ? 'GET' : 'POST';
    const body = method === 'POST' ? JSON.stringify({ model, prompt: 'x', messages: [{ role: 'user', content: 'x' }], input: 'x' }) : undefined;
    for (const headers of [{}, { authorization: 'Bearer wrong-key-123456' }, { 'x-api-key': 'wrong-key-123456' }]) {
      const r = await fetch(srv.url + path, { method, headers: { 'content-type': 'application/json', ...headers }, body });
      assert.equal(r.status, 401, `${method} ${path} ${JSON.stringify(headers)}`);
      const j = await r.json();
      assert.equal(j.error?.type, 'authentication_error', JSON.stringify(j));
      assert.equal(typeof j.error.message, 'string');
    }
  }
  const r = await fetch(srv.url + '/v1/messages', { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, max_tokens: 1, messages: [{ role: 'user', content: 'x' }] }) });
  assert.equal(r.status, 401);
  const j = await r.json();
  assert.equal(j.type, 'error');
  assert.equal(j.error.type, 'authentication_error');
  // Health, metrics and the dashboard page need no key.
  for (const p of ['/health', '/metrics', '/']) assert.equal((await fetch(srv.url + p)).status, 200, p);
});

test('401 through the SDKs is their AuthenticationError', async () => {
  await assert.rejects(oa('not-a-valid-key').chat.completions.create({ model, max_tokens: 1, messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
  const an = new Anthropic({ baseURL: srv.url, apiKey: 'not-a-valid-key', maxRetries: 0 });
  await assert.rejects(an.messages.create({ model, max_tokens: 1, messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof Anthropic.AuthenticationError && e.status === 401);
});

test('both key headers work on every API', async () => {
  const a = await oa(KEY_A).completions.create({ model, prompt: 'hello', max_tokens: 1 });
  assert.equal(a.usage.completion_tokens, 1);
  const an = new Anthropic({ baseURL: srv.url, apiKey: KEY_A, maxRetries: 0 }); // sends x-api-key
  const m = await an.messages.create({ model, max_tokens: 1, messages: [{ role: 'user', content: 'hello' }] });
  assert.equal(m.usage.output_tokens, 1);
});

test('two tenants with the same cache_salt never share cached tokens', async () => {
  const prompt = longPrefix('tenant-shared');
  const req = { model, max_tokens: 2, cache_salt: 'same-salt', messages: [{ role: 'user', content: prompt }] };
  const a1 = await oa(KEY_A).chat.completions.create(req);
  const a2 = await oa(KEY_A).chat.completions.create(req);
  assert.equal(a1.usage.prompt_tokens_details.cached_tokens, 0);
  assert.ok(a2.usage.prompt_tokens_details.cached_tokens >= 64, `same tenant reuses: ${JSON.stringify(a2.usage)}`);
  // Another key of the same tenant shares the domain.
  const a3 = await oa(KEY_A2).chat.completions.create(req);
  assert.ok(a3.usage.prompt_tokens_details.cached_tokens >= 64, JSON.stringify(a3.usage));
  // The other tenant, same salt, same prompt: nothing cached.
  const b1 = await oa(KEY_B).chat.completions.create(req);
  assert.equal(b1.usage.prompt_tokens_details.cached_tokens, 0, `tenant bravo must not hit alpha's blocks: ${JSON.stringify(b1.usage)}`);
  // And without a salt either.
  const { cache_salt: _drop, ...noSalt } = req;
  const a4 = await oa(KEY_A).chat.completions.create(noSalt);
  const b2 = await oa(KEY_B).chat.completions.create(noSalt);
  assert.equal(a4.usage.prompt_tokens_details.cached_tokens, 0, 'no salt is a different domain than salt "same-salt"');
  assert.equal(b2.usage.prompt_tokens_details.cached_tokens, 0);
  // The Anthropic client too.
  const an = new Anthropic({ baseURL: srv.url, apiKey: KEY_B, maxRetries: 0 });
  const m = await an.messages.create({ model, max_tokens: 2, cache_salt: 'same-salt', messages: [{ role: 'user', content: longPrefix('tenant-anthropic') }] });
  const anA = new Anthropic({ baseURL: srv.url, apiKey: KEY_A, maxRetries: 0 });
  const m2 = await anA.messages.create({ model, max_tokens: 2, cache_salt: 'same-salt', messages: [{ role: 'user', content: longPrefix('tenant-anthropic') }] });
  assert.equal(m.usage.cache_read_input_tokens, 0);
  assert.equal(m2.usage.cache_read_input_tokens, 0, JSON.stringify(m2.usage));
});

test('a cache_salt subdivides a tenant: different salts do not share', async () => {
  const prompt = longPrefix('salted');
  const r1 = await oa(KEY_A).completions.create({ model, prompt, max_tokens: 1, cache_salt: 'user-1' });
  const r2 = await oa(KEY_A).completions.create({ model, prompt, max_tokens: 1, cache_salt: 'user-2' });
  const r3 = await oa(KEY_A).completions.create({ model, prompt, max_tokens: 1, cache_salt: 'user-1' });
  assert.equal(r1.usage.prompt_tokens_details.cached_tokens, 0);
  assert.equal(r2.usage.prompt_tokens_details.cached_tokens, 0);
  assert.ok(r3.usage.prompt_tokens_details.cached_tokens >= 64, JSON.stringify(r3.usage));
});

test('/v1/stats shows a tenant only its own recent requests', async () => {
  await oa(KEY_B).completions.create({ model, prompt: 'bravo marker', max_tokens: 1, user: 'bravo-user' });
  const get = async (key) => (await fetch(srv.url + '/v1/stats', { headers: { authorization: `Bearer ${key}` } })).json();
  const sa = await get(KEY_A);
  const sb = await get(KEY_B);
  assert.ok(Array.isArray(sa.recent) && Array.isArray(sb.recent));
  assert.ok(sb.recent.length >= 1);
  const idsA = new Set(sa.recent.map((r) => r.id));
  for (const r of sb.recent) assert.ok(!idsA.has(r.id), `alpha sees bravo's request ${r.id}`);
});

test('a second server on the same state dir reuses the secret; a group-readable secret is refused', async () => {
  const f = join(srv.stateDir, 'server-secret');
  const secret = readFileSync(f, 'utf8');
  const other = await startServer({ apiKeys: { [KEY_A]: 'alpha' }, stateDir: srv.stateDir });
  assert.equal((await other.stop()).code, 0);
  assert.equal(readFileSync(f, 'utf8'), secret, 'the secret is read, not rewritten');

  const dir = mkdtempSync(join(tmpdir(), 'pkv-e2e-secret-'));
  try {
    writeFileSync(join(dir, 'server-secret'), secret, { mode: 0o644 });
    chmodSync(join(dir, 'server-secret'), 0o644);
    await assert.rejects(startServer({ stateDir: dir }), /server-secret/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('without --api-keys a non-loopback bind is refused unless --insecure', async () => {
  await assert.rejects(startServer({ args: ['--host', '0.0.0.0'] }), (e) => {
    assert.match(e.message, /exited \(code [1-9]/);
    assert.match(e.message, /insecure|api-keys/);
    return true;
  });
});

test('a malformed api-keys file is refused, naming the file and the line', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'pkv-e2e-keys-'));
  try {
    const f = join(dir, 'keys');
    writeFileSync(f, '# keys\nkey-good-0123456 alpha\nshort beta\n');
    await assert.rejects(startServer({ args: ['--api-keys', f] }), (e) => {
      assert.match(e.message, /keys/);
      assert.match(e.message, /line 3|:3/);
      return true;
    });
    writeFileSync(f, 'key-dup-01234567 alpha\nkey-dup-01234567 beta\n');
    await assert.rejects(startServer({ args: ['--api-keys', f] }), /line 2|:2/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('prompt_cache_key keeps a conversation live, scoped to its tenant', async () => {
  const msgs1 = [{ role: 'system', content: longPrefix('owner-conv', 6) }, { role: 'user', content: 'First question?' }];
  const t1 = await oa(KEY_A).chat.completions.create({ model, max_tokens: 8, temperature: 0, prompt_cache_key: 'conv-1', messages: msgs1 });
  const msgs2 = [...msgs1, { role: 'assistant', content: t1.choices[0].message.content }, { role: 'user', content: 'Second question?' }];
  const t2 = await oa(KEY_A).chat.completions.create({ model, max_tokens: 8, temperature: 0, prompt_cache_key: 'conv-1', messages: msgs2 });
  assert.ok(t2.usage.prompt_tokens_details.cached_tokens >= 64, `turn 2 continues the live conversation: ${JSON.stringify(t2.usage)}`);
  // The same key from another tenant is another owner: nothing of alpha's is reused.
  const b = await oa(KEY_B).chat.completions.create({ model, max_tokens: 8, temperature: 0, prompt_cache_key: 'conv-1', messages: msgs2 });
  assert.equal(b.usage.prompt_tokens_details.cached_tokens, 0, JSON.stringify(b.usage));
  const s = await (await fetch(srv.url + '/v1/stats', { headers: { authorization: `Bearer ${KEY_A}` } })).json();
  assert.ok(s.engine.live_owners >= 1, `a live owner: ${JSON.stringify(s.engine)}`);
});
