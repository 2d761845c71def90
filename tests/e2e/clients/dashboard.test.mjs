// The dashboard (GET /) in headless Chromium (Debian's /usr/bin/chromium, driven by
// playwright-core): the page loads with no script error, asks for the API key (the
// server runs with --api-keys), then shows live numbers; requests sent through the
// page's chat box and through the API change them (finished requests, cached tokens,
// hit rate, the recent-requests table, the pool bar); a second chat turn reports
// cached tokens. Saves a screenshot (PAGEDKV_ARTIFACT_DIR, default the system temp
// dir) as dashboard.png.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, existsSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { startServer, longPrefix } from './lib/server.mjs';

const CHROMIUM = process.env.PAGEDKV_CHROMIUM || '/usr/bin/chromium';
const KEY = 'dashboard-key-0123';
let srv;
let ctx;
let userDataDir;

before(async () => {
  assert.ok(existsSync(CHROMIUM), `${CHROMIUM} is missing: scripts/install-deps.sh installs Debian's chromium`);
  srv = await startServer({ apiKeys: { [KEY]: 'dash' } });
  userDataDir = mkdtempSync(join(tmpdir(), 'pkv-chromium-'));
  ctx = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1280, height: 1000 },
  });
});

after(async () => {
  if (ctx) await ctx.close();
  if (userDataDir) rmSync(userDataDir, { recursive: true, force: true });
  if (srv) assert.equal((await srv.stop()).code, 0, srv.stderr());
});

const num = async (page, id) => Number((await page.textContent(`#${id}`)).replace(/[^0-9.]/g, ''));

async function apiChat(system, user) {
  const r = await fetch(`${srv.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ model: 'default', max_tokens: 4, messages: [{ role: 'system', content: system }, { role: 'user', content: user }] }),
  });
  assert.equal(r.status, 200);
  return r.json();
}

test('the dashboard shows live numbers that follow the traffic', { timeout: 180000 }, async () => {
  const page = await ctx.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  // Console errors other than the expected 401 (before the key is typed) and the
  // browser's own /favicon.ico probe (the page has no icon; 404 is fine).
  page.on('console', (m) => {
    if (m.type() !== 'error' || /401/.test(m.text())) return;
    if (/404/.test(m.text()) && /favicon\.ico$/.test(m.location()?.url ?? '')) return;
    problems.push(`console: ${m.text()} (${m.location()?.url})`);
  });
  const external = [];
  page.on('request', (r) => { if (!r.url().startsWith(srv.url)) external.push(r.url()); });

  const resp = await page.goto(srv.url + '/', { waitUntil: 'load' });
  assert.equal(resp.status(), 200);
  assert.match(resp.headers()['content-type'], /text\/html/);

  // Without the key the stats call is refused, and the page says so.
  await page.waitForFunction(() => /401/.test(document.getElementById('status').textContent), null, { timeout: 15000 });
  await page.fill('#api-key', KEY);
  await page.dispatchEvent('#api-key', 'change');
  await page.waitForFunction(() => document.getElementById('status').textContent === 'live', null, { timeout: 15000 });
  assert.equal(await page.textContent('#model'), 'default');
  const before = { finished: await num(page, 'finished'), cached: await num(page, 'cached-tokens') };
  assert.ok(await num(page, 'pool-max') > 0, 'the pool size is shown');

  // Two turns through the chat box: the second reuses the first turn's KV.
  await page.fill('#chat-input', 'Hello! What does git commit do?');
  await page.click('#chat-send');
  await page.waitForSelector('#chat-log .msg-meta', { timeout: 60000 });
  await page.fill('#chat-input', 'And what does git push do?');
  await page.click('#chat-send');
  await page.waitForFunction(() => document.querySelectorAll('#chat-log .msg-meta').length >= 2, null, { timeout: 60000 });
  const botLines = await page.$$eval('#chat-log .msg-bot', (els) => els.map((e) => e.textContent));
  assert.equal(botLines.length, 2);
  for (const l of botLines) assert.ok(/^model: ./.test(l) && !/\[(error|failed|HTTP)/.test(l), `a reply: ${l}`);
  const meta = await page.$$eval('#chat-log .msg-meta', (els) => els.map((e) => e.textContent));
  const cachedSecond = Number(/\((\d+) cached\)/.exec(meta[1])?.[1]);
  assert.ok(cachedSecond > 0, `the second chat turn reuses the first: ${meta[1]}`);

  // Two API requests with a shared system prompt.
  const sys = longPrefix('dashboard');
  await apiChat(sys, 'one');
  const second = await apiChat(sys, 'two');
  assert.ok(second.usage.prompt_tokens_details.cached_tokens > 0);

  // The page catches up within a few polls.
  await page.waitForFunction((b) => {
    const n = (id) => Number(document.getElementById(id).textContent.replace(/[^0-9.]/g, ''));
    return n('finished') >= b.finished + 4 && n('cached-tokens') > b.cached &&
      document.querySelectorAll('#recent tbody tr').length >= 4;
  }, before, { timeout: 15000 });
  const hit = await page.textContent('#hit-rate');
  assert.ok(Number(hit.replace('%', '')) > 0, `hit rate ${hit}`);
  const rows = await page.$$eval('#recent tbody tr', (trs) => trs.map((tr) => [...tr.children].map((td) => td.textContent)));
  assert.ok(rows.some((r) => r[1] === '/v1/chat/completions' && Number(r[5]) > 0), `a recent row with cached tokens: ${JSON.stringify(rows.slice(0, 4))}`);
  const cachedBlocks = await num(page, 'pool-cached');
  assert.ok(cachedBlocks > 0, 'finished requests leave cached blocks');
  const barWidth = await page.$eval('#bar-cached', (e) => e.getBoundingClientRect().width);
  assert.ok(barWidth > 0, 'the pool bar shows the cached blocks');

  const dir = process.env.PAGEDKV_ARTIFACT_DIR || tmpdir();
  const shot = join(dir, 'dashboard.png');
  await page.screenshot({ path: shot, fullPage: true });
  assert.ok(statSync(shot).size > 10000, 'a screenshot with content');
  console.log(`# dashboard screenshot: ${shot}`);

  assert.deepEqual(problems, [], 'no script errors on the page');
  assert.deepEqual(external, [], 'the page loads nothing from outside the server (no CDN)');
  await page.close();
});
