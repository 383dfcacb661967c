/*
 * The playground and the dashboard of `inflight serve`: plain JavaScript,
 * no library. Model text never reaches innerHTML: the Markdown renderer
 * below builds DOM nodes and text nodes, and the server's
 * Content-Security-Policy allows this file's code alone, so text that looks
 * like HTML shows as text. The page keeps its state (conversation, settings,
 * API key) in localStorage; it talks to the server (or to the API base URL
 * set under Connection) with fetch, streams with a reader of the response
 * body, and stops a reply by aborting the fetch: the server notices the
 * closed connection and cancels the request.
 */
'use strict';

const $ = (id) => document.getElementById(id);

/* ---- storage ---- */

const store = {
  get(k, d) {
    try { const v = localStorage.getItem('inflight.' + k); return v === null ? d : JSON.parse(v); }
    catch (e) { return d; }
  },
  set(k, v) { try { localStorage.setItem('inflight.' + k, JSON.stringify(v)); } catch (e) { /* full or off */ } },
};

/* ---- the API: base URL, key, 401 ---- */

function apiUrl(path) {
  const base = ($('base').value || '').trim().replace(/\/+$/, '');
  return base + path;
}

let keyWaiter = null;
/* Shows the key dialog; resolves with the key typed, or null. */
function askKey() {
  if (keyWaiter) return keyWaiter;
  const dlg = $('keydlg');
  keyWaiter = new Promise((resolve) => {
    const done = (v) => {
      $('keydlg-ok').onclick = $('keydlg-cancel').onclick = $('keydlg-input').onkeydown = null;
      dlg.close();
      keyWaiter = null;
      resolve(v);
    };
    $('keydlg-ok').onclick = () => done($('keydlg-input').value.trim() || null);
    $('keydlg-cancel').onclick = () => done(null);
    $('keydlg-input').onkeydown = (e) => {
      if (e.key === 'Enter') { e.preventDefault(); done($('keydlg-input').value.trim() || null); }
    };
    dlg.oncancel = (e) => { e.preventDefault(); done(null); };
    $('keydlg-input').value = '';
    dlg.showModal();
    $('keydlg-input').focus();
  });
  return keyWaiter;
}

/* fetch with the key; a 401 asks for the key once and tries again. */
async function api(path, opts = {}) {
  for (let attempt = 0; ; attempt++) {
    const headers = Object.assign({}, opts.headers || {});
    const key = $('key').value.trim();
    if (key) headers.Authorization = 'Bearer ' + key;
    const res = await fetch(apiUrl(path), Object.assign({}, opts, { headers }));
    if (res.status !== 401 || attempt > 0 || opts.noAsk) return res;
    const k = await askKey();
    if (!k) return res;
    $('key').value = k;
    saveSettings();
  }
}

async function errorText(res) {
  const t = await res.text().catch(() => '');
  try {
    const j = JSON.parse(t);
    if (j.error && typeof j.error === 'object') return `${res.status}: ${j.error.message}`;
    if (typeof j.error === 'string') return `${res.status}: ${j.error}`;
  } catch (e) { /* not JSON */ }
  return `${res.status}: ${t.slice(0, 300) || res.statusText}`;
}

/* Reads a Server-Sent Events body; calls onEvent(json) per data event until
 * [DONE]. */
async function readEvents(res, onEvent) {
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let at;
    while ((at = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, at);
      buf = buf.slice(at + 2);
      for (const line of ev.split('\n')) {
        if (!line.startsWith('data:')) continue;
        const data = line.slice(5).trim();
        if (data === '[DONE]') return;
        onEvent(JSON.parse(data));
      }
    }
  }
}

/* ---- Markdown, as DOM nodes ---- */

/* Inline spans: `code`, **bold**, *em*, [text](http(s) URL). Anything
 * else, HTML included, is text. */
function inline(parent, text) {
  const re = /(`[^`\n]+`)|(\*\*[^*\n]+\*\*)|(\*[^*\s\n][^*\n]*\*)|(\[[^\]\n]+\]\([^)\s]+\))/;
  while (text.length) {
    const m = re.exec(text);
    if (!m) { parent.append(document.createTextNode(text)); return; }
    if (m.index) parent.append(document.createTextNode(text.slice(0, m.index)));
    const t = m[0];
    let el;
    if (m[1]) { el = document.createElement('code'); el.textContent = t.slice(1, -1); }
    else if (m[2]) { el = document.createElement('strong'); inline(el, t.slice(2, -2)); }
    else if (m[3]) { el = document.createElement('em'); inline(el, t.slice(1, -1)); }
    else {
      const close = t.indexOf('](');
      const label = t.slice(1, close), url = t.slice(close + 2, -1);
      if (/^https?:\/\//i.test(url)) {
        el = document.createElement('a');
        el.href = url;
        el.rel = 'noopener noreferrer';
        el.target = '_blank';
        inline(el, label);
      } else {
        el = document.createTextNode(t); /* javascript:, data: ... stay text */
      }
    }
    parent.append(el);
    text = text.slice(m.index + t.length);
  }
}

/* Blocks: fenced code (an unclosed fence, as while streaming, runs to the
 * end), headings, lists, quotes, paragraphs. */
function renderMarkdown(src) {
  const frag = document.createDocumentFragment();
  const lines = src.replace(/\r\n?/g, '\n').split('\n');
  let i = 0, para = [];
  const flush = () => {
    if (!para.length) return;
    const p = document.createElement('p');
    para.forEach((l, k) => { if (k) p.append(document.createElement('br')); inline(p, l); });
    frag.append(p);
    para = [];
  };
  while (i < lines.length) {
    const l = lines[i];
    const fence = /^\s*(```|~~~)\s*([\w+-]*)/.exec(l);
    if (fence) {
      flush();
      const body = [];
      i++;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
      i++;
      const pre = document.createElement('pre'), code = document.createElement('code');
      if (fence[2]) code.dataset.lang = fence[2];
      code.textContent = body.join('\n');
      pre.append(code);
      frag.append(pre);
      continue;
    }
    const h = /^(#{1,6})\s+(.*)$/.exec(l);
    if (h) {
      flush();
      const el = document.createElement('h' + Math.min(6, h[1].length + 2));
      inline(el, h[2]);
      frag.append(el);
      i++;
      continue;
    }
    const li = /^\s*([-*+]|\d+[.)])\s+/.exec(l);
    if (li) {
      flush();
      const ordered = /\d/.test(li[1]);
      const list = document.createElement(ordered ? 'ol' : 'ul');
      while (i < lines.length) {
        const m = /^\s*([-*+]|\d+[.)])\s+(.*)$/.exec(lines[i]);
        if (!m || /\d/.test(m[1]) !== ordered) break;
        const item = document.createElement('li');
        inline(item, m[2]);
        list.append(item);
        i++;
      }
      frag.append(list);
      continue;
    }
    if (/^\s*>/.test(l)) {
      flush();
      const q = [];
      while (i < lines.length && /^\s*>/.test(lines[i])) q.push(lines[i++].replace(/^\s*>\s?/, ''));
      const bq = document.createElement('blockquote');
      bq.append(renderMarkdown(q.join('\n')));
      frag.append(bq);
      continue;
    }
    if (!l.trim()) { flush(); i++; continue; }
    para.push(l);
    i++;
  }
  flush();
  return frag;
}

/* ---- settings ---- */

const FIELDS = ['mode', 'temperature', 'top_p', 'top_k', 'max_tokens', 'seed', 'stop', 'ignore_eos', 'schema', 'base', 'key'];

function saveSettings() {
  const s = {};
  for (const f of FIELDS) s[f] = $(f).type === 'checkbox' ? $(f).checked : $(f).value;
  store.set('settings', s);
}

function loadSettings() {
  const s = store.get('settings', {});
  for (const f of FIELDS) {
    if (!(f in s)) continue;
    if ($(f).type === 'checkbox') $(f).checked = !!s[f]; else $(f).value = s[f];
  }
}

/* The request's sampling fields; an empty box leaves the server's default.
 * Throws with a sentence when the schema is not JSON. */
function params() {
  const p = {};
  const num = (id, int) => {
    const v = $(id).value.trim();
    if (v === '') return;
    const n = Number(v);
    if (!Number.isFinite(n)) throw new Error(`${id}: not a number`);
    p[id] = int ? Math.trunc(n) : n;
  };
  num('temperature'); num('top_p'); num('top_k', true); num('max_tokens', true); num('seed', true);
  const stops = $('stop').value.split('\n').filter((s) => s.length).map((s) => s.replace(/\\n/g, '\n'));
  if (stops.length) p.stop = stops;
  if ($('ignore_eos').checked) p.ignore_eos = true;
  const schema = $('schema').value.trim();
  $('schema-err').textContent = '';
  if (schema) {
    let obj;
    try { obj = JSON.parse(schema); }
    catch (e) { $('schema-err').textContent = 'The schema is not JSON: ' + e.message; throw e; }
    p.response_format = { type: 'json_schema', json_schema: { name: 'playground', schema: obj, strict: true } };
  }
  return p;
}

/* ---- the playground ---- */

let chat = store.get('chat', []); /* [{role, content, reasoning?, meta?, error?}] */
let running = null; /* {ctl: AbortController} while a reply streams */

function renderMessage(m) {
  const div = document.createElement('div');
  div.className = 'msg ' + m.role + (m.error ? ' error' : '');
  const role = document.createElement('div');
  role.className = 'role';
  role.textContent = m.role;
  div.append(role);
  if (m.reasoning) { /* a reasoning model's <think> block: folded away once done */
    const r = document.createElement('details');
    r.className = 'reasoning';
    /* the reader's own open or close stands over every later render
     * (one a frame while the reply streams, and the whole log's) */
    r.open = m.reasonOpen !== undefined ? m.reasonOpen : !!m.thinking;
    const sum = document.createElement('summary');
    sum.textContent = 'Reasoning';
    sum.addEventListener('click', () => { m.reasonOpen = !r.open; });
    const txt = document.createElement('div');
    txt.className = 'text';
    txt.textContent = m.reasoning;
    r.append(sum, txt);
    div.append(r);
  }
  const body = document.createElement('div');
  body.className = 'body';
  if (m.error) body.textContent = m.error;
  else body.append(renderMarkdown(m.content));
  const meta = document.createElement('div');
  meta.className = 'meta';
  meta.textContent = m.meta || '';
  div.append(body, meta);
  return div;
}

function renderLog() {
  const log = $('log');
  log.replaceChildren(...chat.map(renderMessage));
}

function setMode() {
  const completion = $('mode').value === 'completion';
  $('log').hidden = completion;
  $('out').hidden = !completion;
  $('prompt').placeholder = completion
    ? 'Prompt (Ctrl+Enter sends, Esc stops)'
    : 'Message (Enter sends, Shift+Enter: new line, Esc stops)';
  $('clear').textContent = completion ? 'Clear output' : 'Clear conversation';
}

/* The reply's figures: tokens, tokens/s (over the time tokens came, so the
 * wait for the first does not count), time to the first token. */
function statsText(st) {
  const parts = [`${st.tokens} tokens`];
  if (st.tps > 0) parts.push(`${st.tps.toFixed(1)} tokens/s`);
  if (st.ttft >= 0) parts.push(`first token ${Math.round(st.ttft)} ms`);
  if (st.finish) parts.push(st.finish);
  return parts.join(' · ');
}

function showStats(st, state) {
  const el = $('stats');
  el.dataset.state = state;
  el.dataset.tokens = st.tokens;
  el.dataset.tps = st.tps.toFixed(2);
  el.dataset.chunks = st.chunks;
  el.dataset.finish = st.finish || '';
  el.textContent = statsText(st) + (state === 'running' ? ' …' : '');
}

function setRunning(on) {
  $('send').disabled = on;
  $('stop').disabled = !on;
}

async function send() {
  if (running) return;
  const text = $('prompt').value;
  const completion = $('mode').value === 'completion';
  if (!completion && !text.trim()) return;
  let p;
  try { p = params(); } catch (e) { return; }
  saveSettings();
  const ctl = new AbortController();
  running = { ctl };
  setRunning(true);
  const st = { tokens: 0, tps: 0, ttft: -1, chunks: 0, finish: '' };
  const t0 = performance.now();
  let tFirst = 0, tLast = 0, n = 0;
  let onText, onEnd, path, body;
  if (completion) {
    $('out-prompt').textContent = text;
    $('gen').textContent = '';
    path = '/v1/completions';
    body = Object.assign({ prompt: text }, p);
    onText = (t) => { $('gen').append(document.createTextNode(t)); };
    onEnd = () => store.set('completion', { prompt: text, output: $('gen').textContent });
  } else {
    chat.push({ role: 'user', content: text });
    const reply = { role: 'assistant', content: '' };
    const history = chat.filter((m) => !m.error).map((m) => ({ role: m.role, content: m.content }));
    chat.push(reply);
    $('prompt').value = '';
    renderLog();
    const node = () => $('log').lastElementChild;
    let pending = false;
    onText = (t, reasoning) => {
      if (reasoning) { reply.reasoning = (reply.reasoning || '') + t; reply.thinking = true; }
      else { reply.content += t; reply.thinking = false; }
      if (pending) return;
      pending = true; /* one Markdown pass per frame, not per token */
      requestAnimationFrame(() => {
        pending = false;
        node().replaceWith(renderMessage(reply));
      });
    };
    onEnd = () => {
      delete reply.thinking;
      if (!reply.error) reply.meta = statsText(st);
      node().replaceWith(renderMessage(reply));
      store.set('chat', chat);
    };
    path = '/v1/chat/completions';
    body = Object.assign({ messages: history }, p);
  }
  body.stream = true;
  body.stream_options = { include_usage: true };
  showStats(st, 'running');
  let state = 'done';
  try {
    const res = await api(path, {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(body), signal: ctl.signal,
    });
    if (!res.ok) throw new Error(await errorText(res));
    await readEvents(res, (ev) => {
      if (ev.error) throw new Error(ev.error.message || String(ev.error));
      if (ev.usage) st.tokens = ev.usage.completion_tokens;
      for (const ch of ev.choices || []) {
        const d = ch.delta || {};
        const r = completion ? '' : d.reasoning_content;
        const t = completion ? ch.text : d.content;
        if (t || r) {
          const now = performance.now();
          if (!tFirst) { tFirst = now; st.ttft = now - t0; }
          tLast = now;
          n++;
          st.chunks++;
          if (!ev.usage) st.tokens = Math.max(st.tokens, n);
          if (r) onText(r, true);
          if (t) onText(t, false);
        }
        if (ch.finish_reason) st.finish = ch.finish_reason;
      }
      st.tps = n > 1 && tLast > tFirst ? ((st.tokens - 1) * 1000) / (tLast - tFirst) : 0;
      showStats(st, 'running');
    });
  } catch (e) {
    if (e.name === 'AbortError') { state = 'stopped'; st.finish = 'stopped'; }
    else {
      state = 'error';
      if (completion) $('gen').append(document.createTextNode(`\n[${e.message}]`));
      else { chat[chat.length - 1].error = e.message; }
    }
  }
  const secs = (tLast - tFirst) / 1000;
  st.tps = st.tokens > 1 && secs > 0 ? (st.tokens - 1) / secs : 0;
  running = null;
  setRunning(false);
  onEnd();
  showStats(st, state);
  $('prompt').focus();
}

function stop() {
  if (running) running.ctl.abort();
}

/* ---- the dashboard ---- */

/* Prometheus text: {name: [{labels, value}]} */
function parseMetrics(text) {
  const out = {};
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    if (m[2]) for (const kv of m[2].slice(1, -1).matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[kv[1]] = kv[2];
    (out[m[1]] = out[m[1]] || []).push({ labels, value: Number(m[3]) });
  }
  return out;
}

function metric(ms, name, label, value) {
  const rows = ms[name] || [];
  const r = label ? rows.find((x) => x.labels[label] === value) : rows[0];
  return r ? r.value : NaN;
}

/* A histogram's cumulative buckets: [[le, count]] by le. */
function buckets(ms, name) {
  return (ms[name + '_bucket'] || [])
    .map((r) => [r.labels.le === '+Inf' ? Infinity : Number(r.labels.le), r.value])
    .sort((a, b) => a[0] - b[0]);
}

/* The q-quantile of the observations between two bucket snapshots, linear
 * within its bucket (as Prometheus's histogram_quantile); NaN with none. */
function quantile(q, now, before) {
  const d = now.map(([le, c], i) => [le, c - (before && before[i] ? before[i][1] : 0)]);
  const total = d.length ? d[d.length - 1][1] : 0;
  if (!(total > 0)) return NaN;
  const rank = q * total;
  let prevLe = 0, prevC = 0;
  for (const [le, c] of d) {
    if (c >= rank) {
      if (le === Infinity) return prevLe;
      return prevLe + ((le - prevLe) * (rank - prevC)) / Math.max(c - prevC, 1e-9);
    }
    prevLe = le;
    prevC = c;
  }
  return prevLe;
}

const HISTORY = 120; /* points kept per series */
const WINDOW_MS = 10000; /* latency percentiles over the last ten seconds */

const charts = {
  req: { canvas: 'c-req', series: ['running', 'queued'], unit: '' },
  kv: { canvas: 'c-kv', series: ['used', 'cached'], unit: '' },
  tps: { canvas: 'c-tps', series: ['generated', 'prompt'], unit: '/s' },
  ttft: { canvas: 'c-ttft', series: ['p50', 'p90', 'p99'], unit: ' ms' },
  itl: { canvas: 'c-itl', series: ['p50', 'p90', 'p99'], unit: ' ms' },
  spec: { canvas: 'c-spec', series: ['accepted'], unit: ' %' },
};
for (const c of Object.values(charts)) c.data = c.series.map(() => []);

function fmt(v) {
  if (!Number.isFinite(v)) return '–';
  return Math.abs(v) >= 1000 ? v.toFixed(0) : String(Number(v.toPrecision(3)));
}

function drawChart(c) {
  const cv = $(c.canvas);
  const fig = cv.parentElement;
  const dpr = window.devicePixelRatio || 1;
  const w = cv.clientWidth, h = cv.clientHeight;
  if (!w || !h) return;
  cv.width = Math.round(w * dpr);
  cv.height = Math.round(h * dpr);
  const g = cv.getContext('2d');
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  const css = getComputedStyle(document.documentElement);
  const colors = ['--s0', '--s1', '--s2', '--s3'].map((v) => css.getPropertyValue(v).trim());
  const line = css.getPropertyValue('--line').trim(), muted = css.getPropertyValue('--muted').trim();
  let max = 0;
  for (const s of c.data) for (const v of s) if (Number.isFinite(v)) max = Math.max(max, v);
  max = max > 0 ? niceMax(max) : 1;
  const left = 44, right = 6, top = 6, bottom = 6;
  const pw = w - left - right, ph = h - top - bottom;
  g.font = '11px system-ui, sans-serif';
  g.textAlign = 'right';
  g.textBaseline = 'middle';
  for (let k = 0; k <= 4; k++) {
    const y = top + ph - (ph * k) / 4;
    g.strokeStyle = line;
    g.lineWidth = 1;
    g.beginPath(); g.moveTo(left, y); g.lineTo(w - right, y); g.stroke();
    g.fillStyle = muted;
    g.fillText(fmt((max * k) / 4), left - 4, y);
  }
  /* the x axis spans the points there are (30 at least, HISTORY at most),
   * the newest at the right */
  const span = Math.max(30, ...c.data.map((s) => s.length));
  c.data.forEach((s, si) => {
    g.strokeStyle = colors[si % colors.length];
    g.lineWidth = 1.8;
    g.beginPath();
    let pen = false;
    s.forEach((v, i) => {
      const x = left + (pw * (i + span - s.length)) / (span - 1);
      if (!Number.isFinite(v)) { pen = false; return; }
      const y = top + ph - (ph * v) / max;
      if (pen) g.lineTo(x, y); else g.moveTo(x, y);
      pen = true;
    });
    g.stroke();
  });
  /* the legend with the latest values, also as data attributes */
  const legend = fig.querySelector('.legend');
  legend.replaceChildren(...c.series.map((name, si) => {
    const s = c.data[si], v = s.length ? s[s.length - 1] : NaN;
    const peak = s.reduce((a, x) => (Number.isFinite(x) ? Math.max(a, x) : a), 0);
    fig.dataset[name] = Number.isFinite(v) ? String(v) : '';
    fig.dataset['peak' + name[0].toUpperCase() + name.slice(1)] = String(peak);
    const span = document.createElement('span');
    span.className = 's' + (si % 4);
    span.textContent = `■ ${name} ${fmt(v)}${c.unit}`;
    return span;
  }));
}

function niceMax(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

const snaps = []; /* [{t, ms}] the recent scrapes */

function push(chart, values) {
  charts[chart].data.forEach((s, i) => {
    s.push(values[i]);
    if (s.length > HISTORY) s.shift();
  });
}

async function scrape() {
  const status = $('dash-status');
  let ms;
  try {
    const res = await api('/metrics', { cache: 'no-store' });
    if (!res.ok) { status.textContent = 'GET /metrics: ' + (await errorText(res)); return; }
    ms = parseMetrics(await res.text());
  } catch (e) { status.textContent = 'GET /metrics: ' + e.message; return; }
  const t = performance.now();
  const prev = snaps.length ? snaps[snaps.length - 1] : null;
  snaps.push({ t, ms });
  while (snaps.length > 2 && t - snaps[1].t >= WINDOW_MS) snaps.shift();
  const old = snaps[0];
  const model = (ms.inflight_num_requests_running || [{ labels: {} }])[0].labels.model_name || '';
  push('req', [metric(ms, 'inflight_num_requests_running'), metric(ms, 'inflight_num_requests_waiting')]);
  push('kv', [metric(ms, 'inflight_kv_cache_blocks', 'state', 'used'), metric(ms, 'inflight_kv_cache_blocks', 'state', 'cached')]);
  const rate = (name) => {
    if (!prev) return NaN;
    const dt = (t - prev.t) / 1000;
    return dt > 0 ? Math.max(0, metric(ms, name) - metric(prev.ms, name)) / dt : NaN;
  };
  push('tps', [rate('inflight_generation_tokens_total'), rate('inflight_prompt_tokens_total')]);
  const lat = (name) => {
    const now = buckets(ms, name);
    let before = old !== snaps[snaps.length - 1] ? buckets(old.ms, name) : null;
    /* nothing in the window: the percentiles since start */
    if (before && quantile(0.5, now, before) !== quantile(0.5, now, before)) before = null;
    return [0.5, 0.9, 0.99].map((q) => quantile(q, now, before) * 1000);
  };
  push('ttft', lat('inflight_time_to_first_token_seconds'));
  push('itl', lat('inflight_inter_token_latency_seconds'));
  const drafts = metric(ms, 'inflight_spec_draft_tokens_total');
  const acc = metric(ms, 'inflight_spec_accepted_tokens_total');
  const dDrafts = prev ? drafts - metric(prev.ms, 'inflight_spec_draft_tokens_total') : 0;
  const dAcc = prev ? acc - metric(prev.ms, 'inflight_spec_accepted_tokens_total') : 0;
  push('spec', [dDrafts > 0 ? (100 * dAcc) / dDrafts : drafts > 0 ? (100 * acc) / drafts : NaN]);
  $('f-spec').hidden = !(drafts > 0);
  for (const c of Object.values(charts)) drawChart(c);
  const dash = $('dash');
  dash.dataset.samples = String(Number(dash.dataset.samples || 0) + 1);
  status.textContent = `${model} · ${new Date().toLocaleTimeString()} · every ${POLL_MS / 1000} s`;
}

const POLL_MS = 1000;

function startDashboard() {
  let busy = false;
  const tick = async () => {
    if (busy || document.hidden) return;
    busy = true;
    try { await scrape(); } finally { busy = false; }
  };
  tick();
  setInterval(tick, POLL_MS);
  window.addEventListener('resize', () => { for (const c of Object.values(charts)) drawChart(c); });
}

/* ---- start ---- */

function start() {
  loadSettings();
  const dash = /\/dashboard\/?$/.test(location.pathname);
  $(dash ? 'dash' : 'play').hidden = false;
  $(dash ? 'tab-dash' : 'tab-play').setAttribute('aria-current', 'page');
  for (const f of FIELDS) $(f).addEventListener('change', saveSettings);
  if (dash) { startDashboard(); return; }
  const last = store.get('completion', null);
  if (last) { $('out-prompt').textContent = last.prompt; $('gen').textContent = last.output; }
  /* at phone width the settings start folded, the conversation in view */
  if (window.matchMedia('(max-width: 759px)').matches) $('settings').open = false;
  setMode();
  renderLog();
  $('mode').addEventListener('change', setMode);
  $('send').addEventListener('click', send);
  $('stop').addEventListener('click', stop);
  $('clear').addEventListener('click', () => {
    if ($('mode').value === 'completion') {
      $('out-prompt').textContent = $('gen').textContent = '';
      store.set('completion', null);
    } else {
      chat = [];
      store.set('chat', chat);
      renderLog();
    }
  });
  $('prompt').addEventListener('keydown', (e) => {
    const completion = $('mode').value === 'completion';
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey || (!completion && !e.shiftKey))) {
      e.preventDefault();
      send();
    }
  });
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && running) { e.preventDefault(); stop(); }
  });
  api('/v1/models', { noAsk: true }).then((r) => (r.ok ? r.json() : null)).then((j) => {
    if (j && j.data && j.data[0]) $('model').textContent = j.data[0].id;
  }).catch(() => {});
  $('prompt').focus();
}

start();
