// What the server's JavaScript suites share: a client for the server under
// test (BASE_URL, MODEL, API_KEY from tests/test_server.sh), named checks
// that count passes and failures, and the closing "N passed, N failed".
import OpenAI from 'openai';

export const BASE = process.env.BASE_URL;
export const MODEL = process.env.MODEL;
export const KEY = process.env.API_KEY || 'none';
export const client = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: KEY, maxRetries: 0, timeout: 60000 });
export { OpenAI };

const count = { pass: 0, fail: 0 };

export function check(name, cond, detail) {
  if (cond) { count.pass++; console.log(`ok   ${name}`); }
  else { count.fail++; console.log(`FAIL ${name}${detail !== undefined ? ': ' + JSON.stringify(detail) : ''}`); }
}

// Runs fn; an exception is one failure named after the test.
export async function test(name, fn) {
  try { await fn(); } catch (e) { count.fail++; console.log(`FAIL ${name}: threw ${e && e.stack || e}`); }
}

// fn must fail with an OpenAI error of this status; param and a substring
// of the message are checked when given.
export async function expectError(name, fn, status, param, needle) {
  try {
    await fn();
    count.fail++; console.log(`FAIL ${name}: no error`);
  } catch (e) {
    const msg = e.error && e.error.message;
    const ok = e instanceof OpenAI.APIError && e.status === status &&
      (param === undefined || (e.error && e.error.param === param)) &&
      typeof msg === 'string' && msg.length > 0 && (needle === undefined || msg.includes(needle));
    check(name, ok, { status: e.status, error: e.error, msg: String(e) });
  }
}

export async function collect(stream) {
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return chunks;
}

export function finish() {
  console.log(`${count.pass} passed, ${count.fail} failed`);
  process.exit(count.fail ? 1 : 0);
}
