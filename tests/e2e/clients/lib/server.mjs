// Starts and stops a `pagedkv serve` process for the end-to-end tests and the server
// benchmarks (bench/server/), and reads its /v1/stats and /metrics. Every server runs
// on loopback with `--port 0` (the ready line carries the real port) and a fresh
// temporary state dir; stop() sends SIGTERM and reports the exit code, so a test can
// check the graceful shutdown the contract promises (docs/server.md).
//
// Environment: PAGEDKV_BINARY (the pagedkv executable; default build/src/cli/pagedkv
// under the repository) and PAGEDKV_MODEL (default models/default).

import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../../..');

export function binaryPath() {
  const b = process.env.PAGEDKV_BINARY || join(REPO_ROOT, 'build/src/cli/pagedkv');
  if (!existsSync(b)) throw new Error(`pagedkv binary not found at ${b} (set PAGEDKV_BINARY)`);
  return b;
}

export function modelPath() {
  return process.env.PAGEDKV_MODEL || join(REPO_ROOT, 'models/default');
}

const live = new Set();
process.on('exit', () => {
  for (const p of live) {
    try { p.kill('SIGKILL'); } catch { /* already gone */ }
  }
});

// Starts `pagedkv serve`. opts.apiKeys: {key: tenant} written to a keys file;
// opts.args: extra flags. Resolves once the ready line is printed.
export async function startServer(opts = {}) {
  const ownDir = !opts.stateDir;
  const stateDir = opts.stateDir || mkdtempSync(join(tmpdir(), 'pkv-e2e-'));
  const args = ['serve', '--model', modelPath(), '--host', '127.0.0.1', '--port', '0',
    '--state-dir', stateDir];
  if (opts.apiKeys) {
    const file = join(stateDir, `api-keys-${process.pid}-${Date.now()}`);
    const lines = Object.entries(opts.apiKeys).map(([k, t]) => `${k} ${t}`);
    writeFileSync(file, `# e2e test keys\n${lines.join('\n')}\n`);
    args.push('--api-keys', file);
  }
  args.push(...(opts.args || []));
  const proc = spawn(binaryPath(), args, { stdio: ['ignore', 'pipe', 'pipe'] });
  live.add(proc);
  let stdout = '';
  let stderr = '';
  proc.stderr.setEncoding('utf8');
  proc.stderr.on('data', (d) => { stderr += d; if (stderr.length > 1e6) stderr = stderr.slice(-5e5); });
  proc.stdout.setEncoding('utf8');
  const exited = new Promise((res) => proc.on('exit', (code, signal) => {
    live.delete(proc);
    res({ code, signal });
  }));
  const url = await new Promise((res, rej) => {
    const timer = setTimeout(() => rej(new Error(`pagedkv serve printed no ready line in 120 s; stderr:\n${stderr}`)), 120000);
    proc.stdout.on('data', (d) => {
      stdout += d;
      const m = /pagedkv serve: listening on (http:\/\/\S+)/.exec(stdout);
      if (m) { clearTimeout(timer); res(m[1].replace(/\/$/, '')); }
    });
    exited.then(({ code, signal }) => {
      clearTimeout(timer);
      rej(new Error(`pagedkv serve exited (code ${code}, signal ${signal}) before it was ready; args: ${args.join(' ')}\nstderr:\n${stderr}`));
    });
  });
  const port = Number(new URL(url).port);
  let stopped = null;
  return {
    url, port, proc, stateDir, args,
    stderr: () => stderr,
    stdout: () => stdout,
    alive: () => proc.exitCode === null && proc.signalCode === null,
    exited,
    // SIGTERM, then SIGKILL after graceMs; resolves {code, signal, killed}.
    async stop(graceMs = 40000) {
      if (stopped) return stopped;
      stopped = (async () => {
        let killed = false;
        if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
        const t = setTimeout(() => { killed = true; proc.kill('SIGKILL'); }, graceMs);
        const r = await exited;
        clearTimeout(t);
        if (ownDir) rmSync(stateDir, { recursive: true, force: true });
        return { ...r, killed };
      })();
      return stopped;
    },
  };
}

export async function getJson(url, path, key) {
  const headers = key ? { authorization: `Bearer ${key}` } : {};
  const r = await fetch(url + path, { headers });
  const text = await r.text();
  if (r.status !== 200) throw new Error(`GET ${path} -> ${r.status}: ${text}`);
  return JSON.parse(text);
}

export const getStats = (url, key) => getJson(url, '/v1/stats', key);

// Parses Prometheus text into {'name{labels}': value}; labels kept as written.
export async function getMetrics(url) {
  const r = await fetch(url + '/metrics');
  const text = await r.text();
  if (r.status !== 200) throw new Error(`GET /metrics -> ${r.status}: ${text}`);
  return parseMetrics(text);
}

export function parseMetrics(text) {
  const out = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?)\s+(\S+)/.exec(line);
    if (m) out[m[1]] = Number(m[2]);
  }
  return out;
}

// Polls fn() until it returns a truthy value or timeoutMs passes; returns the last
// value (the caller asserts on it, so a failure shows what was seen).
export async function waitFor(fn, timeoutMs = 20000, everyMs = 50) {
  const end = Date.now() + timeoutMs;
  let v;
  for (;;) {
    v = await fn();
    if (v && (v.ok === undefined || v.ok)) return v;
    if (Date.now() > end) return v;
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

// Every block is back in the pool: none in use, all but the null block free (cached
// ones included), the cached ones a subset of the free ones.
export function poolReleased(p) {
  return p.used_blocks === 0 && p.free_blocks === p.num_blocks - 1 && p.cached_blocks <= p.free_blocks;
}

// True once the server holds no request and no KV block: nothing in flight, nothing
// running or waiting, no live owner (prompt_cache_key), no block in use, and every block but the null block in the free
// queue (EngineStats: free_blocks counts cached + unhashed free blocks; num_blocks
// counts the null block). Returns {ok, stats}.
export async function idleAndReleased(url, key) {
  const s = await getStats(url, key);
  const p = s.pool;
  const ok = s.server.in_flight === 0 && s.engine.running === 0 && s.engine.waiting === 0 &&
    s.engine.live_owners === 0 &&
    poolReleased(p);
  return { ok, stats: s };
}

// A prompt long enough to fill several 16-token KV blocks, distinct per tag.
export function longPrefix(tag, sentences = 12) {
  const words = ['The', 'paged', 'cache', 'keeps', 'blocks', 'of', 'sixteen', 'tokens',
    'and', 'shares', 'them', 'between', 'requests', 'with', 'one', 'prefix'];
  let s = `Document ${tag}. `;
  for (let i = 0; i < sentences; i++) {
    s += words.map((_, j) => words[(i + j) % words.length]).join(' ') + ` (${tag}-${i}). `;
  }
  return s;
}
