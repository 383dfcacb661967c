// A bounded soak of `inflight serve` (tests/test_soak.sh starts it): for
// DURATION seconds, CONC workers send a random mix of every route, streamed
// and whole, good and bad, and a share of them walk away mid-request (an
// aborted fetch closes the socket, which must cancel the request). Then it
// checks what an operator would: no request lost (every one answered, fully,
// or abandoned by us), no 5xx, the gauges back to zero, the KV blocks back
// to their baseline, the process's RSS within a bound, and the counters
// consistent with what was sent. Plain fetch, so the client adds nothing of
// its own (no retries, no pooling tricks).
import { readFileSync } from 'node:fs';
import { check, finish } from './harness.mjs';

const BASE = process.env.BASE_URL;
const PID = Number(process.env.SERVER_PID);
const DURATION = Number(process.env.DURATION || 45) * 1000;
const CONC = Number(process.env.CONC || 24);
const RSS_SLACK_KB = Number(process.env.RSS_SLACK_KB || 32 * 1024);
const TIMEOUT = 60000; // no single request of this mix needs close to that: past it, a hang

let seed = Number(process.env.SEED || Date.now() % 1000000);
console.log(`# soak seed ${seed}, ${DURATION / 1000} s, ${CONC} workers`);
function rand() { // xorshift: a failing run can be replayed with SEED
  seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0;
  return seed / 4294967296;
}
const pick = (a) => a[Math.floor(rand() * a.length)];
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));

function rssKb() {
  const m = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${PID}/status`, 'utf8'));
  return m ? Number(m[1]) : NaN;
}

async function metrics() {
  const r = await fetch(`${BASE}/metrics`);
  const text = await r.text();
  const get = (re) => { const m = re.exec(text); return m ? Number(m[1]) : NaN; };
  return {
    running: get(/^inflight_num_requests_running\{[^}]*\} (\d+)/m),
    waiting: get(/^inflight_num_requests_waiting\{[^}]*\} (\d+)/m),
    paused: get(/^inflight_num_requests_paused\{[^}]*\} (\d+)/m),
    inFlight: get(/^inflight_http_requests_in_flight (\d+)/m),
    kvUsed: get(/^inflight_kv_cache_blocks\{[^}]*state="used"\} (\d+)/m),
    requests: get(/^inflight_requests_total\{[^}]*\} (\d+)/m),
    disconnects: get(/^inflight_client_disconnects_total\{[^}]*\} (\d+)/m),
    http5xx: get(/^inflight_http_responses_total\{code="5xx"\} (\d+)/m),
  };
}

const PROMPTS = ['Once upon a time', 'The little dog', 'Tom and Lily went to the park. They',
  'One day, a big red ball', 'She was happy because', 'x'];

// One request kind: how to send it, and how to judge a complete answer.
// gen: it reaches the executor (counts towards inflight_requests_total).
const KINDS = [
  { name: 'completion', gen: true, path: '/v1/completions', stream: false,
    body: () => ({ prompt: pick(PROMPTS), max_tokens: int(1, 40), temperature: pick([0, 0.7, 1]), seed: int(0, 99) }),
    ok: (j) => j.choices && j.choices.length === 1 && typeof j.choices[0].text === 'string' && !!j.choices[0].finish_reason },
  { name: 'completion stream', gen: true, path: '/v1/completions', stream: 'oai',
    body: () => ({ prompt: pick(PROMPTS), max_tokens: int(1, 60), stream: true, temperature: pick([0, 1]) }) },
  { name: 'chat', gen: true, path: '/v1/chat/completions', stream: false,
    body: () => ({ messages: [{ role: 'user', content: pick(PROMPTS) }], max_tokens: int(1, 30) }),
    ok: (j) => j.choices && j.choices[0].message && typeof j.choices[0].message.content === 'string' },
  { name: 'chat stream', gen: true, path: '/v1/chat/completions', stream: 'oai',
    body: () => ({ messages: [{ role: 'user', content: pick(PROMPTS) }], max_tokens: int(1, 50), stream: true, n: pick([1, 1, 2]) }) },
  { name: 'tgi generate', gen: true, path: '/generate', stream: false,
    body: () => ({ inputs: pick(PROMPTS), parameters: { max_new_tokens: int(1, 40), details: rand() < 0.5 } }),
    ok: (j) => typeof j.generated_text === 'string' },
  { name: 'tgi stream', gen: true, path: '/generate_stream', stream: 'tgi',
    body: () => ({ inputs: pick(PROMPTS), parameters: { max_new_tokens: int(1, 60), do_sample: rand() < 0.5 } }) },
  { name: 'tokenize', path: '/tokenize', stream: false, body: () => ({ inputs: pick(PROMPTS) }),
    ok: (j) => Array.isArray(j) && j.length > 0 },
  { name: 'health', path: '/health', method: 'GET', stream: false, ok: () => true },
  { name: 'models', path: '/v1/models', method: 'GET', stream: false, ok: (j) => Array.isArray(j.data) },
  { name: 'bad json', path: '/v1/completions', stream: false, raw: () => '{"prompt": "x", ', want: [400] },
  { name: 'bad param', path: '/v1/completions', stream: false,
    body: () => ({ prompt: 'x', temperature: pick([-1, 'hot', 1e9]) }), want: [400] },
  { name: 'bad tgi', path: '/generate', stream: false,
    body: () => ({ inputs: 'x', parameters: { max_new_tokens: -3 } }), want: [400, 422] },
];

const tally = { sent: 0, done: 0, abandoned: 0, lost: 0, s5xx: 0, gen: 0, genDone: 0 };
const lostWhy = [];

// Reads an SSE body; returns the data payloads, or throws on a cut stream.
async function readEvents(res, stopAfter, ac) {
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  const events = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i); buf = buf.slice(i + 2);
      for (const line of ev.split('\n')) if (line.startsWith('data:')) events.push(line.slice(5).trim());
      if (stopAfter !== undefined && events.length >= stopAfter) { ac.abort(); return null; }
    }
  }
  return events;
}

function streamComplete(kind, events) {
  if (!events.length) return false;
  if (kind.stream === 'oai') {
    if (events[events.length - 1] !== '[DONE]') return false;
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
    return chunks.some((c) => c.choices && c.choices.some((ch) => ch.finish_reason));
  }
  const last = JSON.parse(events[events.length - 1]);
  return typeof last.generated_text === 'string' && !!(last.details && last.details.finish_reason);
}

async function one() {
  const kind = pick(KINDS);
  const ac = new AbortController();
  const leave = kind.gen && rand() < 0.25; // this client walks away
  const leaveAfter = kind.stream ? int(1, 8) : undefined;
  let timer = setTimeout(() => ac.abort(new Error('timeout')), TIMEOUT);
  let leaveTimer;
  if (leave && !kind.stream) leaveTimer = setTimeout(() => ac.abort(), int(1, 40));
  tally.sent++;
  if (kind.gen) tally.gen++;
  try {
    const init = { method: kind.method || 'POST', signal: ac.signal };
    if (init.method === 'POST') {
      init.headers = { 'Content-Type': 'application/json' };
      init.body = kind.raw ? kind.raw() : JSON.stringify(kind.body());
    }
    const res = await fetch(BASE + kind.path, init);
    if (res.status >= 500) { tally.s5xx++; lostWhy.push(`${kind.name}: ${res.status} ${await res.text()}`); return; }
    const want = kind.want || [200];
    if (!want.includes(res.status)) {
      tally.lost++; lostWhy.push(`${kind.name}: status ${res.status} ${(await res.text()).slice(0, 200)}`); return;
    }
    if (kind.stream && res.status === 200) {
      const events = await readEvents(res, leave ? leaveAfter : undefined, ac);
      if (events === null) { tally.abandoned++; return; }
      if (!streamComplete(kind, events)) {
        tally.lost++; lostWhy.push(`${kind.name}: cut stream ${JSON.stringify(events.slice(-2))}`); return;
      }
    } else {
      const text = await res.text();
      if (res.status === 200) {
        let j;
        try { j = JSON.parse(text); } catch { j = null; }
        if (!j || !kind.ok(j)) { tally.lost++; lostWhy.push(`${kind.name}: bad body ${text.slice(0, 200)}`); return; }
      }
    }
    tally.done++;
    if (kind.gen) tally.genDone++;
  } catch (e) {
    if (ac.signal.aborted && !(ac.signal.reason instanceof Error && ac.signal.reason.message === 'timeout')) {
      tally.abandoned++;
    } else {
      tally.lost++; lostWhy.push(`${kind.name}: ${e && e.message}`);
    }
  } finally {
    clearTimeout(timer);
    clearTimeout(leaveTimer);
  }
}

// Polls until cond(metrics) holds or ms pass; returns the last reading.
async function settle(cond, ms) {
  const t0 = Date.now();
  let m = await metrics();
  while (!cond(m) && Date.now() - t0 < ms) {
    await new Promise((r) => setTimeout(r, 100));
    m = await metrics();
  }
  return m;
}

const greedy = async () => (await (await fetch(`${BASE}/v1/completions`, { method: 'POST',
  body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 24, temperature: 0 }) })).json()).choices[0].text;
const greedyBefore = await greedy();

// warm up: every route once, so buffers that grow once are grown
for (const k of KINDS) {
  const init = { method: k.method || 'POST' };
  if (init.method === 'POST') init.body = k.raw ? k.raw() : JSON.stringify(k.body());
  await (await fetch(BASE + k.path, init)).arrayBuffer();
}
const idle = (m) => m.running === 0 && m.waiting === 0 && m.paused === 0 && m.inFlight === 1;
const m0 = await settle(idle, 10000);
const rss0 = rssKb();
console.log(`# before: rss ${rss0} kB, kv used ${m0.kvUsed}, requests ${m0.requests}`);

const deadline = Date.now() + DURATION;
await Promise.all(Array.from({ length: CONC }, async () => {
  while (Date.now() < deadline) await one();
}));

const m1 = await settle((m) => idle(m) && m.kvUsed === m0.kvUsed, 15000);
const rss1 = rssKb();
console.log(`# sent ${tally.sent} (${tally.gen} generations), answered ${tally.done}, abandoned ${tally.abandoned}, ` +
  `lost ${tally.lost}, 5xx ${tally.s5xx}`);
console.log(`# after: rss ${rss1} kB (+${rss1 - rss0}), kv used ${m1.kvUsed}, requests +${m1.requests - m0.requests}, ` +
  `disconnects +${m1.disconnects - m0.disconnects}`);
for (const w of lostWhy.slice(0, 10)) console.log(`#   ${w}`);

check('soak sent a real load', tally.sent > 200 && tally.genDone > 50 && tally.abandoned > 10, tally);
check('no request lost', tally.lost === 0, lostWhy.slice(0, 5));
check('no 5xx answered', tally.s5xx === 0 && m1.http5xx === m0.http5xx, { seen: tally.s5xx, metric: m1.http5xx - m0.http5xx });
check('gauges back to zero', idle(m1), m1);
check('KV blocks back to the baseline', m1.kvUsed === m0.kvUsed, { before: m0.kvUsed, after: m1.kvUsed });
check(`RSS grew under ${RSS_SLACK_KB} kB`, rss1 - rss0 < RSS_SLACK_KB, { before: rss0, after: rss1 });
// Every generation that completed was counted by the server; none that we
// did not send was. (A client that left early may or may not have been
// accepted before it left.)
const accepted = m1.requests - m0.requests;
check('requests_total between completed and sent', accepted >= tally.genDone && accepted <= tally.gen,
  { accepted, completed: tally.genDone, sent: tally.gen });
check('disconnects counted, no more than walked away', m1.disconnects - m0.disconnects <= tally.abandoned,
  { disconnects: m1.disconnects - m0.disconnects, abandoned: tally.abandoned });
// After all that, the server still answers exactly: greedy is deterministic.
const greedyAfter = await greedy();
check('greedy output unchanged after the soak', greedyAfter === greedyBefore, { before: greedyBefore, after: greedyAfter });
finish();
