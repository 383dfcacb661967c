// Slow clients, run by tests/test_slow_clients.sh (and by hand for the
// 5,000-connection figure). Node built-ins only.
//
// MODE=slow: N connections from ADDRS loopback addresses (127.0.0.2 and
//   up) each trickle one header byte every 500 ms and never finish their
//   request. While they are open, /health and a short completion (whole and
//   streamed) from a new connection must answer within BOUND_MS (the
//   completions GEN_BOUND_MS, as they wait for the engine too); every slow
//   connection must be closed by the server once TIMEOUT_S (the server's
//   --request-timeout) has passed since it opened, and none before.
// MODE=perip: PER_IP idle connections from one address are accepted, one
//   more from it is closed unanswered, another address is still served.
// MODE=leave: a whole (not streamed) completion whose client leaves while
//   it runs is cancelled: /metrics counts the disconnect and a cancelled
//   request, and nothing is left running.
// Ends with "N passed, N failed".
import http from 'node:http';
import net from 'node:net';

const BASE = new URL(process.env.BASE_URL);
const PORT = Number(BASE.port);
const N = Number(process.env.N || 300);
const ADDRS = Number(process.env.ADDRS || 10);
const TIMEOUT_S = Number(process.env.TIMEOUT_S || 3);
const BOUND_MS = Number(process.env.BOUND_MS || 2000);
// a completion also waits for the engine, which a loaded machine slows
const GEN_BOUND_MS = Number(process.env.GEN_BOUND_MS || BOUND_MS);
const PER_IP = Number(process.env.PER_IP || 20);
const count = { pass: 0, fail: 0 };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function check(name, cond, detail) {
  if (cond) { count.pass++; console.log(`ok   ${name}`); }
  else { count.fail++; console.log(`FAIL ${name}${detail !== undefined ? ': ' + JSON.stringify(detail) : ''}`); }
}

// One request on a new connection from localAddress: {status, body, ms}
// (status 0: the connection failed or closed without an answer).
function request(method, path, body, localAddress = '127.0.0.1', timeoutMs = 30000) {
  return new Promise((resolve) => {
    const t0 = performance.now();
    const headers = body ? { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) } : {};
    const req = http.request({ host: '127.0.0.1', port: PORT, method, path, headers, localAddress, agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, body: text, ms: performance.now() - t0 }));
      res.on('error', () => resolve({ status: 0, body: text, ms: performance.now() - t0 }));
    });
    req.setTimeout(timeoutMs, () => req.destroy(new Error('timeout')));
    req.on('error', (e) => resolve({ status: 0, body: String(e), ms: performance.now() - t0 }));
    req.end(body);
  });
}

async function metric(name) {
  const r = await request('GET', '/metrics');
  let sum = 0;
  for (const line of r.body.split('\n'))
    if (line.startsWith(name + '{') || line.startsWith(name + ' ')) sum += Number(line.split(' ').pop());
  return sum;
}

// A connection that opens, then writes `text` one byte per `everyMs`.
function trickle(localAddress, text, everyMs) {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port: PORT, localAddress });
    const c = { s, opened: 0, closed: 0, got: 0, err: null };
    let i = 0, timer = null;
    s.on('connect', () => {
      c.opened = performance.now();
      resolve(c);
      const step = () => {
        if (i < text.length && !s.destroyed) { s.write(text[i++]); timer = setTimeout(step, everyMs); }
      };
      step();
    });
    s.on('data', (d) => { c.got += d.length; });
    s.on('error', (e) => { c.err = e.code || String(e); });
    s.on('close', () => { c.closed = performance.now(); clearTimeout(timer); if (!c.opened) resolve(c); });
  });
}

const SLOW_TEXT = 'GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ' + 'a'.repeat(4000);

async function timedHealthAndCompletion(tag) {
  const health = [];
  for (let k = 0; k < 5; k++) health.push(await request('GET', '/health'));
  const hmax = Math.max(...health.map((r) => r.ms));
  check(`${tag}: /health answers 200 from a new connection`, health.every((r) => r.status === 200), health.map((r) => r.status));
  const whole = await request('POST', '/v1/completions', JSON.stringify({ prompt: 'Once upon a time', max_tokens: 8, temperature: 0 }));
  check(`${tag}: a short completion answers 200`, whole.status === 200 && whole.body.includes('"choices"'), whole.body.slice(0, 200));
  const stream = await request('POST', '/v1/completions', JSON.stringify({ prompt: 'Once upon a time', max_tokens: 8, temperature: 0, stream: true }));
  check(`${tag}: a short streamed completion ends with [DONE]`, stream.status === 200 && stream.body.trimEnd().endsWith('data: [DONE]'), stream.body.slice(-200));
  console.log(`# ${tag}: /health max ${hmax.toFixed(1)} ms (of 5), completion ${whole.ms.toFixed(1)} ms, streamed ${stream.ms.toFixed(1)} ms`);
  check(`${tag}: /health within ${BOUND_MS} ms`, hmax < BOUND_MS, hmax);
  check(`${tag}: completion within ${GEN_BOUND_MS} ms`, whole.ms < GEN_BOUND_MS, whole.ms);
  check(`${tag}: streamed completion within ${GEN_BOUND_MS} ms`, stream.ms < GEN_BOUND_MS, stream.ms);
}

const mode = process.env.MODE || 'slow';
if (mode === 'slow') {
  const t0 = performance.now();
  const conns = [];
  // open in batches so the listen backlog never overflows
  for (let i = 0; i < N; i += 200) {
    const batch = [];
    for (let k = i; k < Math.min(N, i + 200); k++) batch.push(trickle(`127.0.0.${2 + (k % ADDRS)}`, SLOW_TEXT, 500));
    conns.push(...(await Promise.all(batch)));
  }
  const opened = conns.filter((c) => c.opened).length;
  console.log(`# ${opened} slow connections open after ${(performance.now() - t0).toFixed(0)} ms`);
  check(`${N} slow connections open`, opened === N, { opened, errors: conns.filter((c) => c.err).slice(0, 3).map((c) => c.err) });
  await sleep(500);
  const stillOpen = conns.filter((c) => !c.closed).length;
  check('the slow connections are still open before the deadline', stillOpen === N, stillOpen);
  await timedHealthAndCompletion(`with ${stillOpen} slow connections open`);
  // each must be closed after its deadline: wait past it
  const until = performance.now() + (TIMEOUT_S + 5) * 1000;
  while (conns.some((c) => !c.closed) && performance.now() < until) await sleep(100);
  const life = conns.map((c) => (c.closed ? c.closed - c.opened : Infinity));
  const lmin = Math.min(...life), lmax = Math.max(...life);
  console.log(`# slow connections lived ${lmin.toFixed(0)} to ${lmax.toFixed(0)} ms (deadline ${TIMEOUT_S} s)`);
  check('every slow connection was closed by the server', life.every((l) => l !== Infinity), life.filter((l) => l === Infinity).length);
  check('none before its deadline (trickled bytes are not the cause)', lmin >= TIMEOUT_S * 1000 - 500, lmin);
  check('each within 2.5 s after its deadline (bytes kept coming: the deadline did not restart)', lmax <= TIMEOUT_S * 1000 + 2500, lmax);
  check('none got an answer', conns.every((c) => c.got === 0), conns.filter((c) => c.got).length);
  await timedHealthAndCompletion('after they were closed');
} else if (mode === 'perip') {
  const idle = [];
  for (let k = 0; k < PER_IP; k++) idle.push(trickle('127.0.0.200', '', 1000));
  const held = await Promise.all(idle);
  await sleep(500); // the server has accepted them all
  check(`${PER_IP} connections from one address stay open`, held.every((c) => c.opened && !c.closed), held.filter((c) => c.closed).length);
  const over = await request('GET', '/health', undefined, '127.0.0.200', 5000);
  check(`connection ${PER_IP + 1} from that address is closed unanswered`, over.status === 0, over);
  const other = await request('GET', '/health', undefined, '127.0.0.201', 5000);
  check('another address is served meanwhile', other.status === 200, other);
  for (const c of held) c.s.destroy();
  await sleep(300);
  const again = await request('GET', '/health', undefined, '127.0.0.200', 5000);
  check('once they close, that address is served again', again.status === 200, again);
} else if (mode === 'leave') {
  const before = await metric('inflight_client_disconnects_total');
  const cancelledBefore = await metric('inflight_request_success_total{model_name="' + process.env.MODEL + '",finish_reason="cancelled"}');
  const body = JSON.stringify({ prompt: 'Once', max_tokens: Number(process.env.MAXTOK || 400), ignore_eos: true, n: 4 });
  const s = net.connect({ host: '127.0.0.1', port: PORT });
  let got = 0;
  s.on('data', (d) => { got += d.length; });
  s.on('error', () => {});
  s.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  let running = 0;
  for (let t = 0; t < 50 && running === 0; t++) { await sleep(50); running = await metric('inflight_num_requests_running'); }
  check('the whole completion is running', running > 0 && got === 0, { running, got });
  s.destroy();
  const t0 = performance.now();
  let gone = 0, cancelled = 0;
  for (let t = 0; t < 60; t++) {
    gone = (await metric('inflight_client_disconnects_total')) - before;
    cancelled = (await metric('inflight_request_success_total{model_name="' + process.env.MODEL + '",finish_reason="cancelled"}')) - cancelledBefore;
    running = await metric('inflight_num_requests_running');
    if (gone >= 1 && cancelled >= 4 && running === 0) break;
    await sleep(50);
  }
  console.log(`# the departure was handled in ${(performance.now() - t0).toFixed(0)} ms`);
  check('/metrics counts the departure', gone === 1, gone);
  check('its 4 sequences end cancelled', cancelled === 4, cancelled);
  check('nothing is left running', running === 0, running);
  check('the server still answers', (await request('GET', '/health')).status === 200);
}
console.log(`${count.pass} passed, ${count.fail} failed`);
process.exit(count.fail ? 1 : 0);
