// A small, bounded version of the load benchmark (bench/server/load.mjs): 32
// concurrent streaming clients over the four APIs for a few seconds on a small KV pool
// (so admission waits and preemption happen), then: zero errors, every request
// streamed to its terminal event with usage, and every KV block back (nothing in
// flight, used == 0, every block but the null one free). No timing is asserted.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, waitFor } from './lib/server.mjs';
import { runLoad, serverSummary } from './lib/load.mjs';

let srv;

before(async () => {
  srv = await startServer({ args: ['--pool-max-blocks', '96', '--max-num-seqs', '16'] });
});

after(async () => {
  if (srv) assert.equal((await srv.stop()).code, 0, srv.stderr().slice(-3000));
});

test('32 streaming clients under pool pressure: no errors, no leaked blocks', { timeout: 300000 }, async () => {
  const r = await runLoad(srv, { clients: 32, durationS: 8, maxTokens: 24, prefixes: 4, drainS: 120, maxRequests: 2000 });
  assert.equal(r.errors, 0, `errors: ${r.errorSamples.join('\n')}`);
  assert.ok(r.requests >= 32, `requests completed: ${r.requests}`);
  assert.ok(r.cachedPromptTokens > 0, 'the shared system prompts were reused');
  const idle = await waitFor(async () => { const s = await serverSummary(srv.url); return { ok: s.released, s }; }, 30000);
  assert.ok(idle.ok, `every block released: ${JSON.stringify(idle.s)}`);
  assert.equal(idle.s.engine.errors, 0);
  assert.equal(idle.s.engine.running + idle.s.engine.waiting, 0);
  console.log(`# ${r.requests} requests, ${r.completionTokens} tokens, preemptions ${idle.s.preemptions}, peak RSS ${r.rssMiB.peak?.toFixed(0)} MiB`);
});
