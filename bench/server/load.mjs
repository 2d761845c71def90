#!/usr/bin/env node
// Load benchmark for `pagedkv serve` (issue 13): starts the server on loopback with a
// small KV pool (pool pressure: preemption and eviction happen), runs N concurrent
// streaming clients over the four APIs for a bounded time, then checks zero errors,
// that every KV block came back (the stats endpoint: nothing in flight, used == 0,
// every block but the null one free) and the server's peak RSS, and prints p50/p99 time
// to first token, inter-token latency and throughput. First a single client runs
// alone for a few seconds: the baseline the concurrent throughput is a ratio of.
// Bounded: --duration-s of load plus at most --drain-s for what is in flight.
//
//   node bench/server/load.mjs [--clients 256] [--duration-s 60] [--max-tokens 32]
//        [--pool-max-blocks 512] [--max-rss-mib 4096] [--json out.json]
// Env: PAGEDKV_BINARY, PAGEDKV_MODEL (as for the e2e tests). Exit 1 on any failure.

import { writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { startServer, waitFor } from '../../tests/e2e/clients/lib/server.mjs';
import { runLoad, serverSummary } from '../../tests/e2e/clients/lib/load.mjs';

const args = Object.fromEntries(process.argv.slice(2).reduce((a, v, i, all) => {
  if (v.startsWith('--')) a.push([v.slice(2), all[i + 1]]);
  return a;
}, []));
const opt = (k, d) => (args[k] === undefined ? d : Number(args[k]));
const clients = opt('clients', 256);
const durationS = opt('duration-s', 60);
const maxTokens = opt('max-tokens', 32);
const poolBlocks = opt('pool-max-blocks', 512);
const maxRssMiB = opt('max-rss-mib', 4096);
const baselineS = opt('baseline-s', 10);

const srv = await startServer({ args: ['--pool-max-blocks', String(poolBlocks), '--max-queue', String(Math.max(256, clients)),
  '--http-threads', String(Math.max(512, clients * 2))] });
let failed = [];
let report;
try {
  const base = await runLoad(srv, { clients: 1, durationS: baselineS, maxTokens, drainS: 60 });
  const load = await runLoad(srv, { clients, durationS, maxTokens, drainS: 120 });
  const idle = await waitFor(async () => { const s = await serverSummary(srv.url); return { ok: s.released, s }; }, 30000);
  const summary = idle.s;
  report = {
    machine: `${cpus().length} x ${cpus()[0]?.model ?? 'cpu'}`, poolMaxBlocks: poolBlocks,
    baseline: base, load, server: summary,
    throughputRatio: base.tokensPerS > 0 ? load.tokensPerS / base.tokensPerS : null,
  };
  if (base.errors) failed.push(`baseline errors: ${base.errorSamples.join(' | ')}`);
  if (load.errors) failed.push(`${load.errors} errors under load: ${load.errorSamples.join(' | ')}`);
  if (!summary.released) failed.push(`blocks not released after the load: ${JSON.stringify(summary)}`);
  if (summary.engine.errors) failed.push(`engine errors: ${summary.engine.errors}`);
  if (load.rssMiB.peak > maxRssMiB) failed.push(`peak RSS ${load.rssMiB.peak.toFixed(0)} MiB over ${maxRssMiB}`);
  if (load.requests === 0) failed.push('no request completed');
} catch (e) {
  failed.push(String(e.stack || e));
} finally {
  const st = await srv.stop();
  if (st.code !== 0) failed.push(`server exit ${JSON.stringify(st)}; stderr tail: ${srv.stderr().slice(-2000)}`);
}
if (report) {
  const f = (x) => (x === null || x === undefined ? '-' : x.toFixed(1));
  const l = report.load;
  const b = report.baseline;
  console.log(`machine: ${report.machine}; pool ${poolBlocks} blocks; max_tokens ${maxTokens}`);
  console.log(`baseline (1 client, ${b.durationS} s): ${b.requests} requests, ${f(b.tokensPerS)} tok/s, TTFT p50 ${f(b.ttftMs.p50)} ms, ITL p50 ${f(b.itlMs.p50)} ms`);
  console.log(`load (${l.clients} clients, ${l.durationS} s, wall ${f(l.wallS)} s): ${l.requests} requests, ${l.errors} errors, ` +
    `${f(l.tokensPerS)} tok/s (${f(report.throughputRatio)}x the single client), ${f(l.requestsPerS)} req/s`);
  console.log(`  TTFT ms p50 ${f(l.ttftMs.p50)} p99 ${f(l.ttftMs.p99)} max ${f(l.ttftMs.max)}; ITL ms p50 ${f(l.itlMs.p50)} p99 ${f(l.itlMs.p99)} max ${f(l.itlMs.max)}`);
  console.log(`  cached prompt tokens ${l.cachedPromptTokens}; preemptions ${report.server.preemptions}; RSS MiB start ${f(l.rssMiB.start)} peak ${f(l.rssMiB.peak)} end ${f(l.rssMiB.end)}`);
  console.log(`  after: pool ${JSON.stringify(report.server.pool)} released=${report.server.released}`);
  if (args.json) writeFileSync(args.json, JSON.stringify(report, null, 2));
}
if (failed.length) {
  console.error(`FAILED:\n${failed.join('\n')}`);
  process.exit(1);
}
console.log('bench_server_load: OK');
