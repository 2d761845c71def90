#!/usr/bin/env node
// The long fuzz run of malformed HTTP and JSON against `pagedkv serve` (the short one
// is tests/e2e/clients/fuzz.test.mjs): the same case catalogue with every wrong value
// in every field and many more seeded random mutations, bounded by --time-s.
//
//   node bench/server/fuzz.mjs [--seed 1] [--iterations 20000] [--time-s 120]
// Exit 1 on any failing case (printed with the seed to replay it).

import { startServer, waitFor, idleAndReleased } from '../../tests/e2e/clients/lib/server.mjs';
import { runFuzz } from '../../tests/e2e/clients/lib/fuzz.mjs';

const args = Object.fromEntries(process.argv.slice(2).reduce((a, v, i, all) => {
  if (v.startsWith('--')) a.push([v.slice(2), all[i + 1]]);
  return a;
}, []));
const seed = Number(args.seed ?? 1);
const iterations = Number(args.iterations ?? 20000);
const timeS = Number(args['time-s'] ?? 120);
const readTimeoutS = 2;

const srv = await startServer({ args: ['--read-timeout-s', String(readTimeoutS), '--write-timeout-s', '5'] });
const failures = [];
let res;
try {
  const t0 = Date.now();
  res = await runFuzz({ srv, seed, iterations, valuesPerField: 1000, concurrency: 8, timeBudgetMs: timeS * 1000,
    readTimeoutS, log: (m) => console.log(m) });
  failures.push(...res.failures);
  console.log(`fuzz seed ${seed}: ran ${res.ran} of ${res.total} cases in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  if (srv.alive()) {
    const idle = await waitFor(() => idleAndReleased(srv.url), 30000);
    if (!idle.ok) failures.push(`blocks not released: ${JSON.stringify(idle.stats)}`);
  }
} finally {
  const st = await srv.stop();
  if (st.code !== 0) failures.push(`server exit ${JSON.stringify(st)}`);
}
if (failures.length) {
  console.error(`FAILED (seed ${seed}):\n${failures.join('\n')}`);
  process.exit(1);
}
console.log('bench_server_fuzz: OK');
