// A short, bounded fuzz run of malformed HTTP and JSON against `pagedkv serve` (the
// long one is bench/server/fuzz.mjs): every case ends in well-formed responses or a
// closed connection within its deadline, the server never dies, and afterwards it is
// healthy and holds no request and no KV block. Seed: PAGEDKV_FUZZ_SEED (default 1).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, waitFor, idleAndReleased } from './lib/server.mjs';
import { runFuzz } from './lib/fuzz.mjs';
import { exchange, parseResponses } from './lib/raw_http.mjs';

let srv;
const READ_TIMEOUT_S = 2;

before(async () => {
  srv = await startServer({ args: ['--read-timeout-s', String(READ_TIMEOUT_S), '--write-timeout-s', '5'] });
});

after(async () => {
  if (srv) assert.equal((await srv.stop()).code, 0, srv.stderr().slice(-3000));
});

test('malformed HTTP and JSON: no crash, no hang, every response well formed', async () => {
  const seed = Number(process.env.PAGEDKV_FUZZ_SEED || 1);
  const res = await runFuzz({ srv, seed, iterations: 300, valuesPerField: 4, concurrency: 4,
    timeBudgetMs: 60000, readTimeoutS: READ_TIMEOUT_S });
  assert.deepEqual(res.failures, [], `seed ${seed}: ${res.failures.length} failing cases of ${res.ran}`);
  assert.ok(res.ran >= Math.min(res.total, 200), `ran ${res.ran} of ${res.total} cases in the time budget`);
  assert.ok(srv.alive(), 'the server is alive');
  assert.equal((await fetch(srv.url + '/health')).status, 200);
  const idle = await waitFor(() => idleAndReleased(srv.url), 20000);
  assert.ok(idle.ok, `after the fuzz run the server holds no request and no block: ${JSON.stringify(idle.stats)}`);
});

// After a request it could not parse the server cannot find the next request's start,
// so it closes the connection (Connection: close; cpp-httplib 0.11's default would
// answer 400 with Keep-Alive and hold the socket for the keep-alive timeout).
test('an unparseable request is answered with Connection: close', async () => {
  for (const req of ['HELLO WORLD\r\n\r\n', 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n']) {
    const r = await exchange(srv.port, [req], { timeoutMs: 10000 });
    const p = parseResponses(r.buf);
    assert.equal(p.responses[0]?.status, 400);
    assert.equal(p.responses[0].headers.connection, 'close', JSON.stringify(p.responses[0].headers));
  }
});

// A negative Content-Length is malformed (400), not an oversize body (413): cpp-httplib
// parses it with strtoull, which wraps it to a huge length.
test('a negative Content-Length is a 400', async () => {
  const r = await exchange(srv.port, ['POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n'], { timeoutMs: 10000 });
  assert.equal(parseResponses(r.buf).responses[0]?.status, 400);
});
