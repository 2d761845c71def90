// Raw-socket HTTP/1.1 exchanges for the fuzzer: send arbitrary bytes, collect what
// comes back until the server closes, a full response has arrived, or a deadline
// passes, and parse the responses strictly (status line, headers, a body framed by
// Content-Length or chunked encoding, JSON bodies that parse). Used by the fuzz test
// (tests/e2e/clients/fuzz.test.mjs) and the long fuzz run (bench/server/fuzz.mjs).

import net from 'node:net';

// Sends `chunks` (Buffers or strings; a number is a pause in ms) to host:port.
// Resolves {buf, closed, timedOut, error, ms}; it ends the exchange as soon as one
// complete response has been parsed (opts.untilClose keeps reading until close).
export function exchange(port, chunks, opts = {}) {
  const timeoutMs = opts.timeoutMs ?? 15000;
  const t0 = Date.now();
  return new Promise((resolve) => {
    const sock = net.connect({ host: '127.0.0.1', port });
    const parts = [];
    let done = false;
    const finish = (extra) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      resolve({ buf: Buffer.concat(parts), ms: Date.now() - t0, closed: false, timedOut: false, error: null, ...extra });
    };
    const timer = setTimeout(() => finish({ timedOut: true }), timeoutMs);
    sock.on('data', (d) => {
      parts.push(d);
      if (!opts.untilClose) {
        const p = parseResponses(Buffer.concat(parts));
        if (p.responses.length >= 1 && !p.partial) finish({});
      }
    });
    sock.on('end', () => finish({ closed: true }));
    sock.on('close', () => finish({ closed: true }));
    sock.on('error', (e) => finish({ closed: true, error: e.code || String(e) }));
    sock.on('connect', async () => {
      try {
        for (const c of chunks) {
          if (done) return;
          if (typeof c === 'number') { await new Promise((r) => setTimeout(r, c)); continue; }
          await new Promise((r) => sock.write(c, () => r()));
        }
        if (opts.halfClose) sock.end();
      } catch { /* the server may close first */ }
    });
  });
}

function indexOfCrlf2(buf, from) {
  return buf.indexOf('\r\n\r\n', from, 'latin1');
}

// Parses zero or more HTTP/1.1 responses from buf. Returns {responses, partial,
// error}: partial when the last one is incomplete; error names the first framing
// violation (a malformed status line or header, bad chunk sizes, trailing garbage).
export function parseResponses(buf) {
  const responses = [];
  let pos = 0;
  while (pos < buf.length) {
    const hEnd = indexOfCrlf2(buf, pos);
    if (hEnd < 0) return { responses, partial: true, error: null };
    const head = buf.subarray(pos, hEnd).toString('latin1');
    const lines = head.split('\r\n');
    const m = /^HTTP\/1\.[01] (\d{3}) ?(.*)$/.exec(lines[0]);
    if (!m) return { responses, partial: false, error: `malformed status line ${JSON.stringify(lines[0].slice(0, 80))}` };
    const headers = {};
    for (const l of lines.slice(1)) {
      const i = l.indexOf(':');
      if (i <= 0 || /[\s]/.test(l.slice(0, i))) return { responses, partial: false, error: `malformed header ${JSON.stringify(l.slice(0, 80))}` };
      headers[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim();
    }
    const status = Number(m[1]);
    let p = hEnd + 4;
    let body;
    if ((headers['transfer-encoding'] || '').toLowerCase() === 'chunked') {
      const chunks = [];
      for (;;) {
        const le = buf.indexOf('\r\n', p, 'latin1');
        if (le < 0) return { responses, partial: true, error: null, status, headers };
        const sizeHex = buf.subarray(p, le).toString('latin1').split(';')[0];
        if (!/^[0-9a-fA-F]+$/.test(sizeHex)) return { responses, partial: false, error: `bad chunk size ${JSON.stringify(sizeHex)}` };
        const size = parseInt(sizeHex, 16);
        p = le + 2;
        if (size === 0) {
          const te = buf.indexOf('\r\n', p, 'latin1');
          if (te < 0) return { responses, partial: true, error: null, status, headers };
          p = te + 2; // no trailers expected
          break;
        }
        if (buf.length < p + size + 2) return { responses, partial: true, error: null, status, headers };
        chunks.push(buf.subarray(p, p + size));
        if (buf.subarray(p + size, p + size + 2).toString('latin1') !== '\r\n') return { responses, partial: false, error: 'chunk not followed by CRLF' };
        p += size + 2;
      }
      body = Buffer.concat(chunks);
    } else if (headers['content-length'] !== undefined) {
      if (!/^\d+$/.test(headers['content-length'])) return { responses, partial: false, error: `bad content-length ${headers['content-length']}` };
      const n = Number(headers['content-length']);
      if (buf.length < p + n) return { responses, partial: true, error: null, status, headers };
      body = buf.subarray(p, p + n);
      p += n;
    } else if (status === 204 || status === 304 || (status >= 100 && status < 200)) {
      body = Buffer.alloc(0);
    } else {
      // Body until close: only valid as the last response.
      body = buf.subarray(p);
      p = buf.length;
    }
    responses.push({ status, headers, body });
    pos = p;
  }
  return { responses, partial: false, error: null };
}

// Checks one parsed response against the contract: a JSON body parses and, for a
// 4xx/5xx, has an error object in the OpenAI or Anthropic shape; an SSE body has
// only well-formed events. Returns null or a description of what is wrong.
export function checkResponse(r) {
  const ct = (r.headers['content-type'] || '').toLowerCase();
  const text = r.body.toString('utf8');
  if (ct.includes('application/json')) {
    let j;
    try { j = JSON.parse(text); } catch (e) { return `status ${r.status}: JSON body does not parse: ${text.slice(0, 120)}`; }
    if (r.status >= 400) {
      const msg = j?.error?.message;
      if (typeof msg !== 'string' || !msg) return `status ${r.status}: error body without error.message: ${text.slice(0, 200)}`;
      if (!(typeof j.error.type === 'string')) return `status ${r.status}: error body without error.type: ${text.slice(0, 200)}`;
    }
  } else if (ct.includes('text/event-stream')) {
    for (const ev of text.split('\n\n')) {
      if (!ev.trim()) continue;
      for (const line of ev.split('\n')) {
        if (line.startsWith('data: ')) {
          const d = line.slice(6);
          if (d === '[DONE]') continue;
          try { JSON.parse(d); } catch { return `SSE data line does not parse: ${d.slice(0, 120)}`; }
        } else if (!/^(event: \S+|: .*|:)$/.test(line)) {
          return `malformed SSE line ${JSON.stringify(line.slice(0, 80))}`;
        }
      }
    }
  } else if (r.status >= 400 && r.body.length > 0 && !ct) {
    return `status ${r.status}: a body without Content-Type`;
  }
  if (r.status >= 500 && r.status !== 503) return `server error ${r.status}: ${text.slice(0, 200)}`;
  return null;
}
