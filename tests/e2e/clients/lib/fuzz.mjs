// A malformed-input fuzzer for `pagedkv serve`, over raw sockets: broken request
// lines, truncated requests, bad chunked encoding, huge and malformed headers, bad
// Content-Length, invalid UTF-8, deep JSON nesting, wrong types in every field, random
// byte flips of valid requests, pipelining and garbage. Each case must end, within a
// deadline, in well-formed responses (lib/raw_http.mjs checkResponse) or a closed
// connection; a case whose HTTP framing is valid must get a response (200 or 4xx,
// never 5xx); and the server process must stay alive throughout.
//
// runFuzz({srv, seed, iterations, timeBudgetMs}) is used by the short test
// (fuzz.test.mjs) and the long run (bench/server/fuzz.mjs).

import { exchange, parseResponses, checkResponse } from './raw_http.mjs';

// mulberry32: a small seeded RNG so a failing case can be replayed by seed.
export function rng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  next.int = (n) => Math.floor(next() * n);
  next.pick = (arr) => arr[Math.floor(next() * arr.length)];
  return next;
}

const MODEL = 'default';

// Valid bodies per endpoint and the fields each accepts (docs/server.md).
export const ENDPOINTS = {
  '/v1/chat/completions': {
    body: () => ({ model: MODEL, max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] }),
    fields: ['model', 'messages', 'max_tokens', 'max_completion_tokens', 'temperature', 'top_p', 'top_k', 'min_p',
      'seed', 'stream', 'stream_options', 'stop', 'n', 'user', 'cache_salt', 'prompt_cache_key', 'metadata',
      'logprobs', 'frequency_penalty', 'presence_penalty',
      'messages.0', 'messages.0.role', 'messages.0.content', 'stream_options.include_usage'],
  },
  '/v1/completions': {
    body: () => ({ model: MODEL, max_tokens: 1, prompt: 'hi' }),
    fields: ['model', 'prompt', 'max_tokens', 'temperature', 'top_p', 'top_k', 'min_p', 'seed', 'stream',
      'stream_options', 'stop', 'n', 'echo', 'logprobs', 'suffix', 'user', 'cache_salt', 'prompt_cache_key',
      'metadata', 'frequency_penalty', 'presence_penalty'],
  },
  '/v1/responses': {
    body: () => ({ model: MODEL, max_output_tokens: 1, input: 'hi' }),
    fields: ['model', 'input', 'instructions', 'max_output_tokens', 'temperature', 'top_p', 'top_k', 'min_p', 'seed',
      'stream', 'store', 'user', 'cache_salt', 'prompt_cache_key', 'metadata', 'stop', 'previous_response_id'],
  },
  '/v1/messages': {
    body: () => ({ model: MODEL, max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] }),
    fields: ['model', 'messages', 'system', 'max_tokens', 'temperature', 'top_p', 'top_k', 'min_p', 'seed', 'stream',
      'stop_sequences', 'metadata', 'metadata.user_id', 'cache_salt', 'prompt_cache_key',
      'messages.0', 'messages.0.role', 'messages.0.content'],
  },
};

// Values of every JSON type (and a few edge cases within types).
export const WRONG_VALUES = [null, true, false, 0, -1, 1.5, 1e308, -1e308, 2 ** 53 + 1, '', 'x', 'é\u0000\ud7ff',
  'x'.repeat(5000), [], [1], ['a', 'b'], [[[]]], {}, { a: 1 }, { type: 'text', text: 'x' }];

function setPath(obj, path, value) {
  const keys = path.split('.');
  let o = obj;
  for (let i = 0; i < keys.length - 1; i++) {
    const k = keys[i];
    if (o[k] === null || typeof o[k] !== 'object') o[k] = {};
    o = o[k];
  }
  o[keys[keys.length - 1]] = value;
  return obj;
}

export function httpRequest(path, body, extraHeaders = '', method = 'POST') {
  const b = Buffer.isBuffer(body) ? body : Buffer.from(body ?? '', 'utf8');
  const head = `${method} ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${b.length}\r\n${extraHeaders}\r\n`;
  return Buffer.concat([Buffer.from(head, 'latin1'), b]);
}

// Every field of every endpoint with each wrong value: framing is valid, so each must
// get a response: 200 when the value happens to be acceptable, else a 4xx.
export function* wrongTypeCases(valuesPerField = WRONG_VALUES.length, r = rng(1)) {
  for (const [path, ep] of Object.entries(ENDPOINTS)) {
    for (const field of ep.fields) {
      const vals = valuesPerField >= WRONG_VALUES.length ? WRONG_VALUES
        : Array.from({ length: valuesPerField }, () => r.pick(WRONG_VALUES));
      for (const v of vals) {
        // A large positive integer is a valid token limit: it would only make a long
        // (context-bounded) generation, not a malformed request.
        if (/max_(output_|completion_)?tokens$/.test(field) && Number.isInteger(v) && v > 64) continue;
        // A non-empty string is a valid prompt_cache_key: its owner would keep its KV
        // live (until the idle timeout), and the run's end checks that no block is held.
        if (field === 'prompt_cache_key' && typeof v === 'string' && v.length > 0) continue;
        const body = setPath(ep.body(), field, v);
        yield { name: `type ${path} ${field}=${JSON.stringify(v).slice(0, 30)}`, chunks: [httpRequest(path, JSON.stringify(body))],
          mustRespond: true };
      }
    }
  }
}

// The fixed catalogue of framing and parsing cases.
export function* fixedCases() {
  const ok = JSON.stringify(ENDPOINTS['/v1/completions'].body());
  const P = '/v1/completions';
  const H = 'Host: 127.0.0.1\r\n';
  const must = (name, chunks, extra = {}) => ({ name, chunks, mustRespond: true, ...extra });
  const may = (name, chunks, extra = {}) => ({ name, chunks, mustRespond: false, halfClose: true, ...extra });

  yield must('valid completions (control)', [httpRequest(P, ok)], { expectStatus: 200 });
  yield must('valid GET /health', [`GET /health HTTP/1.1\r\n${H}\r\n`], { expectStatus: 200 });
  // Request lines.
  yield may('empty request', ['\r\n\r\n']);
  yield may('garbage line', ['HELLO WORLD\r\n\r\n']);
  yield may('HTTP/0.9', ['GET /\r\n']);
  yield may('HTTP/3.0', [`GET /health HTTP/3.0\r\n${H}\r\n`]);
  yield may('no version', [`GET /health\r\n${H}\r\n`]);
  yield may('lowercase method', [`get /health HTTP/1.1\r\n${H}\r\n`]);
  yield may('unknown method', [`BREW /v1/completions HTTP/1.1\r\n${H}Content-Length: 0\r\n\r\n`]);
  yield may('100 KB URI', [`GET /${'a'.repeat(100000)} HTTP/1.1\r\n${H}\r\n`]);
  yield may('URI with NUL and bad escapes', [`GET /v1/models%00%zz%%/../.. HTTP/1.1\r\n${H}\r\n`]);
  yield may('absolute-form URI', [`GET http://127.0.0.1/health HTTP/1.1\r\n${H}\r\n`]);
  yield may('HTTP/2 preface', ['PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n']);
  yield may('TLS client hello', [Buffer.from('16030100a5010000a10303', 'hex')]);
  yield may('only LF line ends', [`GET /health HTTP/1.1\n${H.replace('\r', '')}\n`]);
  // Headers.
  yield may('64 KB header', [`GET /health HTTP/1.1\r\n${H}X-Big: ${'b'.repeat(65536)}\r\n\r\n`]);
  yield may('1 MB header', [`GET /health HTTP/1.1\r\n${H}X-Big: ${'b'.repeat(1 << 20)}\r\n\r\n`]);
  yield may('5000 headers', [`GET /health HTTP/1.1\r\n${H}${Array.from({ length: 5000 }, (_, i) => `X-H${i}: v\r\n`).join('')}\r\n`]);
  yield may('header without colon', [`GET /health HTTP/1.1\r\n${H}NoColonHere\r\n\r\n`]);
  yield may('header with NUL', [`GET /health HTTP/1.1\r\n${H}X-A: a\u0000b\r\n\r\n`]);
  yield may('obs-fold header', [`GET /health HTTP/1.1\r\n${H}X-A: a\r\n  continued\r\n\r\n`]);
  yield may('space before colon', [`GET /health HTTP/1.1\r\n${H}X-A : a\r\n\r\n`]);
  yield may('binary header bytes', [Buffer.concat([Buffer.from(`GET /health HTTP/1.1\r\n${H}X-A: `), Buffer.from([0xff, 0xfe, 0x80, 0x01]), Buffer.from('\r\n\r\n')])]);
  yield may('Authorization: Bearer of 100 KB', [`GET /v1/models HTTP/1.1\r\n${H}Authorization: Bearer ${'k'.repeat(100000)}\r\n\r\n`]);
  // Content-Length.
  yield may('negative Content-Length', [`POST ${P} HTTP/1.1\r\n${H}Content-Length: -5\r\n\r\n${ok}`]);
  yield may('non-numeric Content-Length', [`POST ${P} HTTP/1.1\r\n${H}Content-Length: lots\r\n\r\n${ok}`]);
  yield may('huge Content-Length', [`POST ${P} HTTP/1.1\r\n${H}Content-Length: 99999999999999999999\r\n\r\n${ok}`]);
  yield may('Content-Length over the body limit', [`POST ${P} HTTP/1.1\r\n${H}Content-Length: 999999999\r\n\r\n${ok}`]);
  yield may('two Content-Lengths', [`POST ${P} HTTP/1.1\r\n${H}Content-Length: 5\r\nContent-Length: ${ok.length}\r\n\r\n${ok}`]);
  yield may('Content-Length larger than the body, then EOF', [`POST ${P} HTTP/1.1\r\n${H}Content-Length: ${ok.length + 50}\r\n\r\n${ok}`]);
  yield may('Content-Length smaller than the body', [`POST ${P} HTTP/1.1\r\n${H}Content-Length: 10\r\n\r\n${ok}`]);
  yield may('POST without Content-Length', [`POST ${P} HTTP/1.1\r\n${H}Content-Type: application/json\r\n\r\n${ok}`]);
  // Chunked bodies.
  const chunked = (body) => [`POST ${P} HTTP/1.1\r\n${H}Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n${body}`];
  const hex = ok.length.toString(16);
  yield may('valid chunked body', chunked(`${hex}\r\n${ok}\r\n0\r\n\r\n`));
  yield may('chunk size not hex', chunked(`zz\r\n${ok}\r\n0\r\n\r\n`));
  yield may('chunk size larger than the data', chunked(`${(ok.length + 100).toString(16)}\r\n${ok}\r\n0\r\n\r\n`));
  yield may('chunk size 2^64', chunked(`ffffffffffffffffff\r\n${ok}\r\n0\r\n\r\n`));
  yield may('negative chunk size', chunked(`-1\r\n${ok}\r\n0\r\n\r\n`));
  yield may('chunk without CRLF', chunked(`${hex}\r\n${ok}0\r\n\r\n`));
  yield may('no last chunk', chunked(`${hex}\r\n${ok}\r\n`));
  yield may('chunk extension garbage', chunked(`${hex};;;===\u0001\r\n${ok}\r\n0\r\n\r\n`));
  yield may('chunked and Content-Length', [`POST ${P} HTTP/1.1\r\n${H}Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n${hex}\r\n${ok}\r\n0\r\n\r\n`]);
  yield may('unknown transfer coding', [`POST ${P} HTTP/1.1\r\n${H}Transfer-Encoding: gzip, chunked\r\n\r\n${hex}\r\n${ok}\r\n0\r\n\r\n`]);
  yield may('gzip Content-Encoding that is not gzip', [`POST ${P} HTTP/1.1\r\n${H}Content-Encoding: gzip\r\nContent-Length: ${ok.length}\r\n\r\n${ok}`]);
  yield may('Expect: 100-continue', [`POST ${P} HTTP/1.1\r\n${H}Expect: 100-continue\r\nContent-Length: ${ok.length}\r\n\r\n`, 50, ok]);
  // JSON bodies with valid framing: must get a response.
  for (const d of [64, 1000, 100000, 1000000]) {
    yield must(`nesting depth ${d} as the body`, [httpRequest(P, '['.repeat(d) + ']'.repeat(d))], { expect4xx: true });
    yield must(`nesting depth ${d} in a field`, [httpRequest(P, `{"model":"default","max_tokens":1,"prompt":"hi","metadata":${'{"a":'.repeat(d)}1${'}'.repeat(d)}}`)]);
    yield must(`unterminated nesting depth ${d}`, [httpRequest(P, '{"a":'.repeat(d))], { expect4xx: true });
  }
  yield must('invalid UTF-8 in a string', [httpRequest(P, Buffer.concat([Buffer.from('{"model":"default","max_tokens":1,"prompt":"a'), Buffer.from([0xff, 0xc0, 0x80, 0xed, 0xa0, 0x80]), Buffer.from('"}')]))], { expect4xx: true });
  yield must('overlong UTF-8 in a key', [httpRequest(P, Buffer.concat([Buffer.from('{"'), Buffer.from([0xc0, 0xaf]), Buffer.from('":1}')]))], { expect4xx: true });
  yield must('lone surrogate escape', [httpRequest(P, '{"model":"default","max_tokens":1,"prompt":"\\ud800"}')]);
  yield must('NUL escape in prompt', [httpRequest(P, '{"model":"default","max_tokens":1,"prompt":"a\\u0000b"}')]);
  yield must('UTF-8 BOM before the body', [httpRequest(P, Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(ok)]))]);
  yield must('duplicate keys', [httpRequest(P, '{"model":"default","max_tokens":1,"max_tokens":"x","prompt":"hi"}')]);
  yield must('NaN and Infinity', [httpRequest(P, '{"model":"default","max_tokens":1,"prompt":"hi","temperature":NaN}')], { expect4xx: true });
  yield must('number 1e400', [httpRequest(P, '{"model":"default","max_tokens":1e400,"prompt":"hi"}')], { expect4xx: true });
  yield must('integer 2^64', [httpRequest(P, '{"model":"default","max_tokens":18446744073709551616,"prompt":"hi"}')], { expect4xx: true });
  yield must('negative zero max_tokens', [httpRequest(P, '{"model":"default","max_tokens":-0,"prompt":"hi"}')], { expect4xx: true });
  yield must('comments in JSON', [httpRequest(P, '{"model":"default", /* c */ "max_tokens":1,"prompt":"hi"}')], { expect4xx: true });
  yield must('empty token-id prompt', [httpRequest(P, '{"model":"default","max_tokens":1,"prompt":[]}')], { expect4xx: true });
  yield must('negative token id', [httpRequest(P, '{"model":"default","max_tokens":1,"prompt":[-1]}')], { expect4xx: true });
  yield must('huge stop list item', [httpRequest(P, JSON.stringify({ model: MODEL, max_tokens: 1, prompt: 'hi', stop: ['s'.repeat(100000)] }))]);
  yield must('100k messages', [httpRequest('/v1/chat/completions', JSON.stringify({ model: MODEL, max_tokens: 1, messages: Array.from({ length: 100000 }, () => ({ role: 'user', content: 'x' })) }))], { expect4xx: true });
  yield must('GET on a POST endpoint', [`GET ${P} HTTP/1.1\r\n${H}\r\n`]);
  yield must('POST on a GET endpoint', [httpRequest('/v1/models', ok)]);
  yield must('wrong Content-Type', [Buffer.from(`POST ${P} HTTP/1.1\r\n${H}Content-Type: text/plain\r\nContent-Length: ${ok.length}\r\n\r\n${ok}`)]);
  // Pipelining: two valid requests in one write. cpp-httplib 0.11 answers the first
  // and drops the second (bytes read past the first request are lost with its
  // per-request stream buffer); the answer must still be well formed.
  yield { name: 'pipelined requests', chunks: [Buffer.concat([httpRequest(P, ok), httpRequest(P, ok, 'Connection: close\r\n')])],
    mustRespond: true, untilClose: true };
  // Keep-alive: a second request after the first response gets its own response.
  yield { name: 'keep-alive requests', chunks: [httpRequest('/health', '', '', 'GET'), 300, httpRequest('/health', '', 'Connection: close\r\n', 'GET')],
    mustRespond: true, untilClose: true, expectCount: 2 };
  // A stalled client: headers never finish; the server must drop it (read timeout).
  yield { name: 'stalled headers (read timeout)', chunks: [`POST ${P} HTTP/1.1\r\n${H}Content-Le`], mustRespond: false, halfClose: false, stall: true };
  yield { name: 'stalled body (read timeout)', chunks: [`POST ${P} HTTP/1.1\r\n${H}Content-Length: 500\r\n\r\n{"model":`], mustRespond: false, halfClose: false, stall: true };
}

// Mutations of valid requests: truncation, byte flips, insertions.
export function* randomCases(r, count) {
  const bases = Object.entries(ENDPOINTS).map(([p, ep]) => httpRequest(p, JSON.stringify({ ...ep.body(), stream: r() < 0.3 })));
  for (let i = 0; i < count; i++) {
    const base = r.pick(bases);
    const kind = r.int(5);
    let b = Buffer.from(base);
    let name;
    if (kind === 0) {
      const cut = r.int(b.length);
      b = b.subarray(0, cut);
      name = `truncated at ${cut}`;
    } else if (kind === 1) {
      const n = 1 + r.int(8);
      for (let j = 0; j < n; j++) b[r.int(b.length)] = r.int(256);
      name = `${n} random bytes`;
    } else if (kind === 2) {
      const at = r.int(b.length);
      const ins = Buffer.from(Array.from({ length: 1 + r.int(64) }, () => r.int(256)));
      b = Buffer.concat([b.subarray(0, at), ins, b.subarray(at)]);
      name = `insert ${ins.length} bytes at ${at}`;
    } else if (kind === 3) {
      // Mutate only the JSON body, keeping the framing valid: must respond.
      const i0 = b.indexOf('\r\n\r\n') + 4;
      const head = b.subarray(0, i0).toString('latin1');
      const body = Buffer.from(b.subarray(i0));
      const n = 1 + r.int(4);
      for (let j = 0; j < n; j++) body[r.int(body.length)] = r.pick([0x22, 0x5c, 0x7b, 0x7d, 0x5b, 0x5d, 0x2c, 0x3a, 0x00, 0xff, 0x80, 0x30, 0x2d, r.int(256)]);
      const path = head.split(' ')[1];
      yield { name: `body mutation ${n} on ${path} #${i}`, chunks: [httpRequest(path, body)], mustRespond: true };
      continue;
    } else {
      b = Buffer.from(Array.from({ length: 1 + r.int(2048) }, () => r.int(256)));
      name = `${b.length} random bytes`;
    }
    yield { name: `${name} #${i}`, chunks: [b], mustRespond: false, halfClose: true };
  }
}

// Runs one case; returns null or a failure description.
export async function runCase(srv, c, readTimeoutS) {
  // A stalled client is answered (or dropped) after the read timeout; the server may
  // then hold the connection for its keep-alive timeout (5 s) before closing it.
  const deadline = c.stall ? (readTimeoutS + 12) * 1000 : 30000;
  const res = await exchange(srv.port, c.chunks, { timeoutMs: deadline, halfClose: c.halfClose, untilClose: c.untilClose || c.stall });
  if (!srv.alive()) return `${c.name}: the server died (${JSON.stringify(await srv.exited)}); stderr tail:\n${srv.stderr().slice(-2000)}`;
  if (res.timedOut) {
    return `${c.name}: no response and no close within ${deadline} ms (${res.buf.length} bytes back)`;
  }
  const p = parseResponses(res.buf);
  if (p.error) return `${c.name}: malformed response: ${p.error}; raw: ${JSON.stringify(res.buf.toString('latin1').slice(0, 300))}`;
  if (p.partial && !res.closed) return `${c.name}: a partial response`;
  // A client that half-closes its side after sending is taken for gone (the server
  // polls for POLLRDHUP), so a response it started may be cut; only then is a cut
  // response accepted.
  if (p.partial && !c.halfClose) return `${c.name}: the connection closed in the middle of a response: ${JSON.stringify(res.buf.toString('latin1').slice(0, 300))}`;
  for (const resp of p.responses) {
    const bad = checkResponse(resp);
    if (bad) return `${c.name}: ${bad}`;
  }
  if (c.mustRespond && p.responses.length === 0) return `${c.name}: the connection closed without a response`;
  if (c.expectCount && p.responses.length !== c.expectCount) return `${c.name}: ${p.responses.length} responses, expected ${c.expectCount}`;
  const first = p.responses[0];
  if (c.expectStatus && first?.status !== c.expectStatus) return `${c.name}: status ${first?.status}, expected ${c.expectStatus}`;
  if (c.expect4xx && !(first?.status >= 400 && first?.status < 500)) return `${c.name}: status ${first?.status}, expected 4xx: ${first?.body.toString().slice(0, 200)}`;
  if (c.stall && !res.closed) return `${c.name}: not dropped`;
  return null;
}

// Runs the fixed catalogue, every field with `valuesPerField` wrong values, and
// `iterations` random mutations (seeded), with `concurrency` cases at once, stopping
// when timeBudgetMs is spent. Returns {failures, ran, byStatus}.
export async function runFuzz({ srv, seed = 1, iterations = 200, valuesPerField = 3, concurrency = 4,
  timeBudgetMs = 60000, readTimeoutS = 2, log = () => {} }) {
  const r = rng(seed);
  const cases = [...fixedCases(), ...wrongTypeCases(valuesPerField, r), ...randomCases(r, iterations)];
  const failures = [];
  const end = Date.now() + timeBudgetMs;
  let next = 0;
  let ran = 0;
  const worker = async () => {
    while (next < cases.length && Date.now() < end && failures.length < 20) {
      const c = cases[next++];
      const f = await runCase(srv, c, readTimeoutS);
      ran++;
      if (f) { failures.push(f); log(`FAIL ${f}`); }
      if (!srv.alive()) return;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return { failures, ran, total: cases.length };
}
