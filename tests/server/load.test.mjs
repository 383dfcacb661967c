// Load and backpressure, run by tests/test_server.sh.
//   MODE=clients: 64 concurrent streaming clients, every 4th leaves after the
//     response headers or its first chunk; every other one must get exactly the greedy text, and
//     /metrics must count each departure as a cancellation (or, when its
//     stream was already over, a finished request).
//   MODE=queue: a server with --parallel 1 --max-queue 1 under 20 requests at
//     once: the overflow gets 429 with an OpenAI error body, the rest complete.
// Ends with "N passed, N failed".
import http from 'node:http';
import { BASE, MODEL, KEY, client, check, finish } from './harness.mjs';

async function metric(name) {
  const text = await (await fetch(`${BASE}/metrics`, { headers: { Authorization: `Bearer ${KEY}` } })).text();
  let sum = 0;
  for (const line of text.split('\n'))
    if (line.startsWith(name + '{') || line.startsWith(name + ' ')) sum += Number(line.split(' ').pop());
  return sum;
}
const MAXTOK = Number(process.env.MAXTOK || 100);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

if (process.env.MODE === 'clients') {
  const prompts = ['Once upon a time', 'Tom had a', 'The sun was', 'One day, a little'];
  const ref = [];
  for (const p of prompts) {
    const r = await client.completions.create({ model: MODEL, prompt: p, max_tokens: MAXTOK, temperature: 0, ignore_eos: true });
    ref.push(r.choices[0].text);
  }
  const before = await metric('inflight_client_disconnects_total');
  const reason = (r) => metric('inflight_request_success_total{model_name="' + MODEL + '",finish_reason="' + r + '"}');
  const cancelledBefore = await reason('cancelled'), lengthBefore = await reason('length');
  const N = 64;
  let aborted = 0, good = 0;
  const bad = [];
  const jobs = [];
  // a leaver closes its socket (the openai client's abort() leaves the
  // connection open and drained, which to a server is a client still there)
  function leaveEarly(prompt, afterChunk) {
    return new Promise((resolve) => {
      // twice the length of the others, so that a leaver's stream is rarely
      // over before the client reads its first chunk
      const body = JSON.stringify({ model: MODEL, prompt, max_tokens: 2 * MAXTOK, temperature: 0, ignore_eos: true, stream: true });
      const req = http.request(`${BASE}/v1/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}`, 'Content-Length': Buffer.byteLength(body) } }, (res) => {
        if (!afterChunk) { req.destroy(); resolve(res.statusCode === 200); return; }
        res.once('data', () => { req.destroy(); resolve(res.statusCode === 200); });
        res.on('end', () => resolve(false));
      });
      req.on('error', () => {});
      req.end(body);
    });
  }
  for (let i = 0; i < N; i++) {
    jobs.push((async () => {
      if (i % 4 === 0) {
        // half go as soon as the headers arrive (often still queued), half after a chunk
        if (await leaveEarly(prompts[i % 4], i % 8 !== 0)) aborted++;
        return;
      }
      try {
        const stream = await client.completions.create({ model: MODEL, prompt: prompts[i % 4], max_tokens: MAXTOK, temperature: 0, ignore_eos: true, stream: true });
        let text = '', fin = null;
        for await (const c of stream)
          for (const x of c.choices) { text += x.text; if (x.finish_reason) fin = x.finish_reason; }
        if (text === ref[i % 4] && fin === 'length') good++;
        else bad.push({ i, text, fin });
      } catch (e) {
        bad.push({ i, err: String(e) });
      }
    })());
  }
  await Promise.all(jobs);
  check('every remaining client got the exact greedy text', good === N - N / 4 && bad.length === 0, { good, bad: bad.slice(0, 3) });
  check('a quarter of the clients left early (after the headers or the first chunk)', aborted === N / 4, aborted);
  // the server notices a departure within one await slice; give it a moment.
  // A leaver whose whole stream was already written when its client closed
  // (a busy event loop can read the first chunk that late) is a finished
  // request, not a departure: every leaver must be counted as exactly one of
  // the two.
  let gone = 0, cancelled = 0, finished = 0;
  for (let t = 0; t < 50; t++) {
    gone = (await metric('inflight_client_disconnects_total')) - before;
    cancelled = (await reason('cancelled')) - cancelledBefore;
    finished = (await reason('length')) - lengthBefore - (N - N / 4);
    if (gone + finished >= N / 4 && (await metric('inflight_http_requests_in_flight')) <= 1 &&
        (await metric('inflight_num_requests_running')) === 0) break;
    await sleep(100);
  }
  check('/metrics counts each departure as a disconnect or, if its stream was over, a finished request', gone + finished === N / 4 && finished >= 0, { gone, finished });
  check('most departures came while the stream ran', gone >= N / 8, { gone, finished });
  check('/metrics counts the disconnects as cancelled requests', cancelled === gone, { cancelled, gone });
  check('nothing left running', (await metric('inflight_num_requests_running')) === 0 && (await metric('inflight_http_requests_in_flight')) <= 1);
} else if (process.env.MODE === 'queue') {
  const body = JSON.stringify({ model: MODEL, prompt: 'Once upon a time', max_tokens: 100, temperature: 0, ignore_eos: true });
  const res = await Promise.all(Array.from({ length: 20 }, () => fetch(`${BASE}/v1/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}` }, body,
  }).then(async (r) => ({ status: r.status, body: await r.json() }))));
  const full = res.filter((r) => r.status === 429), ok = res.filter((r) => r.status === 200);
  check('a full queue answers 429', full.length > 0, res.map((r) => r.status));
  check('429 carries an OpenAI error', full.every((r) => r.body.error && typeof r.body.error.message === 'string' && r.body.error.type === 'rate_limit_error'), full[0]);
  check('the admitted requests complete', ok.length >= 1 && ok.length + full.length === 20 && ok.every((r) => r.body.usage.completion_tokens === 100), res.map((r) => r.status));
  check('/metrics counts the rejections', (await metric('inflight_requests_rejected_total')) === full.length);
}
finish();
