// The playground page in a real browser: Debian's chromium (CHROMIUM),
// headless, driven by playwright-core (which downloads no browser), against
// the servers tests/test_playground.sh started: BASE_URL (stories260K) and
// LONG_URL (a 32768-token model behind the key LONG_KEY, with CORS) and
// SPEC_URL (stories260K with n-gram speculation: the dashboard's) and
// THINK_URL (stories260K with DeepSeek-R1's template: a reasoning model's).
// RUN_FILE holds what `inflight run --temp 0 -n 64` printed for "Once upon a
// time"; LOADGEN is a load generator's command line; screenshots go to
// SHOTS. Every wait is bounded.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import { chromium } from 'playwright-core';
import { check, test, finish } from './harness.mjs';

const BASE = process.env.BASE_URL;
const LONG = process.env.LONG_URL;
const LONG_KEY = process.env.LONG_KEY;
const SPEC = process.env.SPEC_URL;
const THINK = process.env.THINK_URL;
const SHOTS = process.env.SHOTS;
const RUN_TEXT = fs.readFileSync(process.env.RUN_FILE, 'utf8').replace(/\n$/, ''); // run adds one newline

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu'],
});
const ctx = await browser.newContext({ viewport: { width: 1100, height: 760 } });
const page = await ctx.newPage();
const pageErrors = [];
page.on('pageerror', (e) => pageErrors.push(e.message));
// a blocked script or style would be a CSP violation: counted as an error
// (the 401 the key test provokes is expected)
page.on('console', (m) => {
  if (m.type() === 'error' && !/status of 401/.test(m.text())) pageErrors.push(m.text());
});

const stats = () => page.evaluate(() => ({ ...document.getElementById('stats').dataset }));
const waitState = (states, timeout = 20000) => page.waitForFunction(
  (s) => s.includes(document.getElementById('stats').dataset.state), states, { timeout });

async function metrics(base, key) {
  const res = await fetch(base + '/metrics', { headers: key ? { Authorization: 'Bearer ' + key } : {} });
  return res.text();
}
const gauge = (text, name) => {
  const m = new RegExp('^' + name.replace(/[{}"=]/g, '\\$&') + '.*? (\\S+)$', 'm').exec(text);
  return m ? Number(m[1]) : NaN;
};
const metricLine = (text, name, labelPart) => {
  for (const l of text.split('\n')) if (l.startsWith(name + '{') && l.includes(labelPart)) return Number(l.split(' ').pop());
  return NaN;
};

await page.goto(BASE + '/');

await test('streaming: completion mode at temperature 0 shows what inflight run prints', async () => {
  check('the prompt box has the focus at load (keyboard use)', await page.evaluate(() => document.activeElement.id) === 'prompt');
  await page.selectOption('#mode', 'completion');
  await page.fill('#temperature', '0');
  await page.fill('#max_tokens', '64');
  // typed and sent from the keyboard: Ctrl+Enter in completion mode
  await page.focus('#prompt');
  await page.keyboard.type('Once upon a time');
  // record every change of the output while it streams
  await page.evaluate(() => {
    window.__seen = [];
    new MutationObserver(() => window.__seen.push(document.getElementById('gen').textContent))
      .observe(document.getElementById('gen'), { childList: true, characterData: true, subtree: true });
  });
  // a fast CPU makes the 64 tokens in a few milliseconds, which may reach
  // the page in one read; a link of 16 KB/s spreads the stream's 16 KB over
  // a second, so that a page that waited for the whole body would show one
  // step where a streaming one shows many
  const cdp = await ctx.newCDPSession(page);
  await cdp.send('Network.enable');
  await cdp.send('Network.emulateNetworkConditions', { offline: false, latency: 0, downloadThroughput: 16384, uploadThroughput: -1 });
  await page.keyboard.press('Control+Enter');
  await waitState(['done', 'error', 'stopped']);
  await cdp.send('Network.emulateNetworkConditions', { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: -1 });
  await cdp.detach();
  const gen = await page.textContent('#gen');
  const st = await stats();
  check('the page shows the same text as inflight run --temp 0', gen === RUN_TEXT, { page: gen, run: RUN_TEXT });
  check('the reply ended well (length)', st.state === 'done' && st.finish === 'length', st);
  const seen = await page.evaluate(() => window.__seen);
  const partial = seen.filter((s) => s.length > 0 && s.length < RUN_TEXT.length && RUN_TEXT.startsWith(s));
  check('streamed: the text grew in steps (prefixes shown before the end)', partial.length >= 5, { steps: seen.length, partial: partial.length });
  check('the stream came in many events', Number(st.chunks) >= 10, st);
  check('token count: 64', st.tokens === '64', st);
  check('tokens/s computed and positive', Number(st.tps) > 0, st);
  check('the figures are shown', /64 tokens · [\d.]+ tokens\/s/.test(await page.textContent('#stats')), await page.textContent('#stats'));
  check('the prompt is shown before the output', await page.textContent('#out-prompt') === 'Once upon a time');
  await page.screenshot({ path: `${SHOTS}/page.png` });
});

await test('HTML in the prompt and output shows as text', async () => {
  const evil = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script><b>bold?</b>';
  await page.fill('#max_tokens', '4');
  await page.fill('#prompt', evil);
  await page.click('#send');
  await waitState(['done', 'error']);
  check('the HTML prompt is shown as its text', await page.textContent('#out-prompt') === evil);
  check('no element was made from it', await page.evaluate(() => document.querySelectorAll('#out img, #out script, #out b').length) === 0);
  check('nothing ran', await page.evaluate(() => window.__xss) === undefined);
});

await test('guided decoding: a JSON Schema in the box gives output that parses', async () => {
  const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer', minimum: 0, maximum: 99 } }, required: ['name', 'age'], additionalProperties: false };
  await page.fill('#schema', JSON.stringify(schema, null, 1));
  await page.fill('#max_tokens', '100');
  await page.fill('#prompt', 'Once upon a time');
  await page.click('#send');
  await waitState(['done', 'error']);
  const gen = await page.textContent('#gen');
  let doc = null;
  try { doc = JSON.parse(gen); } catch (e) { /* checked below */ }
  check('the output parses as JSON', doc !== null, gen);
  check('it follows the schema', doc && typeof doc.name === 'string' && doc.name.length <= 12 &&
    Number.isInteger(doc.age) && doc.age >= 0 && doc.age <= 99 && Object.keys(doc).length === 2, doc);
  check('it ended at the grammar\'s end (stop)', (await stats()).finish === 'stop', await stats());
  // a schema that is no JSON is refused on the page, before any request
  await page.fill('#schema', '{"type": ');
  await page.click('#send');
  check('a broken schema is named on the page', /not JSON/.test(await page.textContent('#schema-err')));
  await page.fill('#schema', '');
});

await test('chat: Enter sends, the reply streams as Markdown, the conversation survives a reload', async () => {
  await page.selectOption('#mode', 'chat');
  await page.click('#clear');
  await page.fill('#max_tokens', '24');
  await page.focus('#prompt');
  await page.keyboard.type('Tell me a story.');
  await page.keyboard.press('Enter');
  await waitState(['done', 'error']);
  const roles = await page.$$eval('#log .msg .role', (e) => e.map((x) => x.textContent));
  check('a user message and an assistant reply', JSON.stringify(roles) === '["user","assistant"]', roles);
  const reply = await page.textContent('#log .msg.assistant .body');
  check('the reply has text', reply.trim().length > 0, reply);
  check('the reply carries its figures', /24 tokens · [\d.]+ tokens\/s/.test(await page.textContent('#log .msg.assistant .meta')));
  await page.reload();
  check('after a reload the conversation is still there (localStorage)',
    JSON.stringify(await page.$$eval('#log .msg .role', (e) => e.map((x) => x.textContent))) === '["user","assistant"]');
  check('the settings too', await page.inputValue('#temperature') === '0' && await page.inputValue('#mode') === 'chat');
});

await test('Markdown from the model is rendered with DOM nodes: HTML stays text', async () => {
  // an assistant message as the conversation keeps it, written as a model
  // could write it, rendered by the page's own path on reload
  const md = 'Hi <img src=x onerror="window.__xss=3"> there\n\n**bold** and `<b>code</b>` and ' +
    '[bad](javascript:window.__xss=4) and [good](https://example.com/a)\n\n' +
    '```html\n<script>window.__xss=5</script>\n<img src=x onerror="window.__xss=6">\n```\n\n- one\n- <i>two</i>\n\n# Title';
  await page.evaluate((m) => localStorage.setItem('inflight.chat', JSON.stringify([
    { role: 'user', content: '<img src=x onerror="window.__xss=7">' }, { role: 'assistant', content: m }])), md);
  await page.reload();
  const r = await page.evaluate(() => {
    const log = document.getElementById('log');
    return {
      img: log.querySelectorAll('img, script, i, iframe').length,
      strong: log.querySelectorAll('strong').length,
      code: [...log.querySelectorAll('code')].map((c) => c.textContent),
      links: [...log.querySelectorAll('a')].map((a) => a.getAttribute('href')),
      items: log.querySelectorAll('li').length,
      text: log.textContent,
      xss: window.__xss,
    };
  });
  check('no element made from the HTML in it', r.img === 0, r);
  check('nothing ran', r.xss === undefined, r.xss);
  check('the HTML shows as text', r.text.includes('<img src=x onerror="window.__xss=3">') && r.text.includes('<i>two</i>'), r.text);
  check('Markdown: bold, inline code, the code block as text, a list', r.strong === 1 && r.code.includes('<b>code</b>') &&
    r.code.some((c) => c.includes('<script>window.__xss=5</script>')) && r.items === 2, r);
  check('only the https link is a link; javascript: stays text', JSON.stringify(r.links) === '["https://example.com/a"]' &&
    r.text.includes('[bad](javascript:window.__xss=4)'), r.links);
  await page.click('#clear');
});

await test('stop: the button ends the request on the server (base URL, CORS, 401 asks for the key)', async () => {
  await page.click('#conn summary');
  await page.fill('#base', LONG);
  await page.fill('#key', '');
  await page.selectOption('#mode', 'completion');
  await page.fill('#temperature', '1');
  await page.fill('#max_tokens', '30000');
  await page.check('#ignore_eos');
  await page.fill('#prompt', 'Once');
  const before = await metrics(LONG, LONG_KEY);
  await page.click('#send');
  // the server needs a key: the page asks for it
  await page.waitForSelector('#keydlg[open]', { timeout: 10000 });
  check('a 401 opens the key dialog with its input focused', await page.evaluate(() => document.activeElement.id) === 'keydlg-input');
  await page.keyboard.type(LONG_KEY);
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => Number(document.getElementById('stats').dataset.chunks) >= 20, null, { timeout: 20000 });
  const during = await metrics(LONG, LONG_KEY);
  check('the request runs on the server', gauge(during, 'inflight_num_requests_running') === 1, gauge(during, 'inflight_num_requests_running'));
  check('the stop button is enabled while it runs', await page.isEnabled('#stop'));
  await page.click('#stop');
  await waitState(['stopped'], 10000);
  const t0 = Date.now();
  let after = '';
  while (Date.now() - t0 < 15000) {
    after = await metrics(LONG, LONG_KEY);
    if (metricLine(after, 'inflight_request_success_total', 'finish_reason="cancelled"') >= 1 &&
      gauge(after, 'inflight_num_requests_running') === 0) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const cancelled = metricLine(after, 'inflight_request_success_total', 'finish_reason="cancelled"') -
    metricLine(before, 'inflight_request_success_total', 'finish_reason="cancelled"');
  check('/metrics counts the request cancelled', cancelled === 1, cancelled);
  check('/metrics: nothing runs any more', gauge(after, 'inflight_num_requests_running') === 0);
  const gen = metricLine(after, 'inflight_generation_tokens_total', 'model_name');
  check('it stopped far short of 30000 tokens', gen < 25000, gen);
  const st = await stats();
  check('the page says stopped, with the tokens it got', st.state === 'stopped' && Number(st.tokens) >= 20, st);
  check('the key was kept for the next request', await page.inputValue('#key') === LONG_KEY);
});
// back to the page's own server, without the key (also after a failure)
await page.evaluate(() => localStorage.removeItem('inflight.settings'));

await test('the page works at phone width', async () => {
  const phone = await ctx.newPage();
  await phone.setViewportSize({ width: 390, height: 844 });
  for (const path of ['/', '/dashboard']) {
    await phone.goto(BASE + path);
    await phone.waitForTimeout(300);
    const w = await phone.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
    check(`${path}: nothing wider than a 390 px screen`, w[0] <= w[1], w);
    await phone.screenshot({ path: `${SHOTS}/phone${path === '/' ? '' : '-dashboard'}.png`, fullPage: true });
  }
  await phone.close();
});

await test('keyboard: Tab reaches every control, in order', async () => {
  await page.goto(BASE + '/');
  await page.evaluate(() => document.activeElement.blur());
  const seen = [];
  for (let i = 0; i < 30; i++) {
    await page.keyboard.press('Tab');
    seen.push(await page.evaluate(() => document.activeElement.id || document.activeElement.tagName));
  }
  const want = ['tab-play', 'tab-dash', 'settings-summary', 'mode', 'temperature', 'top_p', 'top_k', 'max_tokens', 'seed', 'stop', 'ignore_eos', 'schema', 'clear', 'prompt', 'send'];
  const missing = want.filter((id) => !seen.includes(id));
  check('every control is reached by Tab', missing.length === 0, { missing, seen });
  check('a link to /openapi.json', await page.$('a[href="openapi.json"]') !== null);
  // Escape stops a running reply
  await page.selectOption('#mode', 'completion');
  await page.fill('#max_tokens', '100');
  await page.fill('#prompt', 'Once');
  await page.focus('#prompt');
  await page.keyboard.press('Control+Enter');
  await page.keyboard.press('Escape');
  await waitState(['stopped', 'done']);
  check('Escape stops (or the reply had ended)', ['stopped', 'done'].includes((await stats()).state));
});

await test('dashboard: live charts under load', async () => {
  const dash = await ctx.newPage();
  dash.on('pageerror', (e) => pageErrors.push(e.message));
  await dash.goto(BASE + '/dashboard');
  // this server, whatever the tests before left in the settings
  await dash.evaluate(() => localStorage.removeItem('inflight.settings'));
  await dash.reload();
  check('the dashboard view is shown', await dash.isVisible('#dash') && !(await dash.isVisible('#play')));
  await dash.waitForFunction(() => Number(document.getElementById('dash').dataset.samples) >= 1, null, { timeout: 10000 });
  check('speculative acceptance is hidden on a server that does not draft', await dash.evaluate(() => document.getElementById('f-spec').hidden));
  await dash.goto(SPEC + '/dashboard');
  await dash.waitForFunction(() => Number(document.getElementById('dash').dataset.samples) >= 2, null, { timeout: 10000 });
  const [cmd, ...args] = process.env.LOADGEN.split(' ');
  const load = spawn(cmd, args, { stdio: 'ignore' });
  process.on('exit', () => load.kill('SIGTERM'));
  const t0 = Date.now();
  let peak = {};
  try {
    await dash.waitForFunction(() => {
      const d = (id) => document.getElementById(id).dataset;
      return Number(d('f-req').peakRunning) > 0 && Number(d('f-tps').peakGenerated) > 0 &&
        Number(d('f-ttft').p50) > 0 && Number(d('f-kv').peakUsed) > 0;
    }, null, { timeout: 30000, polling: 200 });
  } catch (e) { /* the checks below say what was missing */ }
  // a few seconds more of load, so that the screenshot shows the charts move
  await dash.waitForTimeout(Math.max(0, 6000 - (Date.now() - t0)));
  peak = await dash.evaluate(() => {
    const d = (id) => ({ ...document.getElementById(id).dataset });
    return { req: d('f-req'), tps: d('f-tps'), kv: d('f-kv'), ttft: d('f-ttft'), itl: d('f-itl'), specAcc: d('f-spec'), spec: document.getElementById('f-spec').hidden };
  });
  const bottom = await dash.evaluate(() => Math.ceil(document.querySelector('.charts').getBoundingClientRect().bottom) + 16);
  await dash.screenshot({ path: `${SHOTS}/dashboard.png`, clip: { x: 0, y: 0, width: 1100, height: Math.min(bottom, 760) } });
  load.kill('SIGTERM');
  check('running requests: the chart saw more than 0', Number(peak.req.peakRunning) > 0, peak.req);
  check('tokens/s: the chart saw more than 0', Number(peak.tps.peakGenerated) > 0, peak.tps);
  check('KV blocks used: more than 0', Number(peak.kv.peakUsed) > 0, peak.kv);
  check('TTFT and ITL percentiles: positive, p50 <= p99', Number(peak.ttft.p50) > 0 && Number(peak.ttft.p50) <= Number(peak.ttft.p99) &&
    Number(peak.itl.p50) > 0 && Number(peak.itl.p50) <= Number(peak.itl.p99), { ttft: peak.ttft, itl: peak.itl });
  check('speculative acceptance is shown while the server drafts', peak.spec === false);
  check('speculative acceptance: a share, above 0 at its peak', Number(peak.specAcc.peakAccepted) > 0 && Number(peak.specAcc.peakAccepted) <= 100, peak.specAcc);
  // the canvas holds a drawn line, not just a blank surface
  const inked = await dash.evaluate(() => {
    const c = document.getElementById('c-tps');
    const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 3; i < px.length; i += 4) if (px[i]) n++;
    return n;
  });
  check('the tokens/s canvas is drawn', inked > 200, inked);
  await dash.close();
});

await test('reasoning: a <think> block shows folded above the answer', async () => {
  // THINK_URL's template (DeepSeek-R1's) opens the block at the prompt's
  // end, so the whole reply of the small model is reasoning
  const tp = await ctx.newPage();
  tp.on('pageerror', (e) => pageErrors.push(e.message));
  await tp.goto(THINK + '/');
  await tp.selectOption('#mode', 'chat');
  await tp.fill('#temperature', '0');
  await tp.fill('#max_tokens', '20');
  await tp.fill('#prompt', 'Hi');
  await tp.click('#send');
  await tp.waitForFunction(() => ['done', 'error'].includes(document.getElementById('stats').dataset.state),
    null, { timeout: 20000 });
  const res = await fetch(THINK + '/v1/chat/completions', {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'Hi' }], temperature: 0, max_tokens: 20 }),
  });
  const want = (await res.json()).choices[0].message;
  const got = await tp.evaluate(() => {
    const m = document.querySelector('#log .msg.assistant');
    const r = m.querySelector('details.reasoning');
    return { reasoning: r && r.querySelector('.text').textContent, open: r && r.open,
      body: m.querySelector('.body').textContent, summary: r && r.querySelector('summary').textContent };
  });
  check('the API gives reasoning_content for it', (want.reasoning_content || '').length > 0, want);
  check('the page shows the same reasoning, folded once done, under "Reasoning"',
    got.reasoning === want.reasoning_content && got.open === false && got.summary === 'Reasoning', got);
  check('and the answer (none here) as the body', got.body === want.content, [got.body, want.content]);
  // the reader opens the first reply's block; the next reply re-renders
  // the whole log, and the block the reader opened stays open
  await tp.click('#log .msg.assistant details.reasoning summary');
  await tp.fill('#prompt', 'Again');
  await tp.click('#send');
  await tp.waitForFunction(() => document.querySelectorAll('#log .msg.assistant').length === 2 &&
    document.getElementById('stats').dataset.state !== 'running', null, { timeout: 20000 });
  const opened = await tp.evaluate(() => [...document.querySelectorAll('#log .msg.assistant details.reasoning')]
    .map((r) => r.open));
  check('a block the reader opened stays open through later renders; the new one is folded',
    opened.length === 2 && opened[0] === true && opened[1] === false, opened);
  await tp.close();
});

check('no script error and no CSP violation on the page', pageErrors.length === 0, pageErrors);
await browser.close();
finish();
