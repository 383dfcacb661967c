"""What the tool-call server scripts' Python checks share
(tests/test_server_tools_llama.sh, tests/test_server_tools_mistral.sh):
requests to the chat route whole and streamed, a stream folded back into
content, reasoning and calls, prompt token counts against Jinja2's render
(tests/data/chat/gen.py), the ok/FAIL lines the scripts count, and the
tools they ask with.
setup() first."""
import copy
import datetime
import json
import subprocess
import sys
import urllib.error
import urllib.request

sys.path.insert(0, 'tests/data/chat')
import gen  # noqa: E402  Jinja2 set up as Hugging Face transformers does

# the tools of the scripts' requests, their arguments' schemas, a question
WEATHER = {'type': 'object', 'properties': {
    'city': {'type': 'string', 'enum': ['Paris', 'Rome', 'São Paulo']},
    'days': {'type': 'integer', 'minimum': 1, 'maximum': 7},
    'hourly': {'type': 'boolean'}}, 'required': ['city', 'days']}
TIME = {'type': 'object', 'properties': {
    'zone': {'type': 'string', 'maxLength': 6},
    'fmt': {'type': 'array', 'items': {'type': 'string', 'enum': ['h', 'm', 's']}, 'maxItems': 3}},
    'required': ['zone']}
TOOLS = [{'type': 'function', 'function': {'name': 'get_weather', 'description': 'Weather.',
                                           'parameters': WEATHER}},
         {'type': 'function', 'function': {'name': 'get_time', 'description': 'Time.',
                                           'parameters': TIME}},
         {'type': 'function', 'function': {'name': 'ping', 'description': 'No arguments.'}}]
SCHEMA = {'get_weather': WEATHER, 'get_time': TIME, 'ping': {'type': 'object', 'maxProperties': 0}}
ASK = [{'role': 'system', 'content': 'Be brief.'},
       {'role': 'user', 'content': 'What is the weather in Paris?'}]

U = BIN = MODEL = SRC = CTX = None
PREFIX = ''
n_ok = n_bad = 0


def setup(url, binary, model, template, ctx, prefix=''):
    """The server's URL, the inflight binary and model (for tokenize), the
    template file, its bos_token and eos_token, a prefix for every line."""
    global U, BIN, MODEL, SRC, CTX, PREFIX
    U, BIN, MODEL, CTX, PREFIX = url, binary, model, ctx, prefix
    SRC = open(template, encoding='utf-8').read()


def check(name, cond, detail=None):
    global n_ok, n_bad
    if cond:
        n_ok += 1
        print('ok   ' + PREFIX + name)
    else:
        n_bad += 1
        print('FAIL %s%s%s' % (PREFIX, name,
                               ': ' + json.dumps(detail)[:800] if detail is not None else ''))


def done():
    print('%d passed, %d failed' % (n_ok, n_bad))


def post(body, stream=False, status=False):
    """The chat route's answer: the JSON body, (status, body), or for a
    stream (its chunks, whether it ended with [DONE])."""
    req = urllib.request.Request(U + '/v1/chat/completions', json.dumps(body).encode(),
                                 {'Content-Type': 'application/json'})
    try:
        with urllib.request.urlopen(req, timeout=180) as r:
            code, data = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        code, data = e.code, e.read().decode()
    if status:
        return code, json.loads(data)
    if not stream:
        return json.loads(data)
    chunks = [json.loads(line[6:]) for line in data.split('\n') if line.startswith('data: {')]
    return chunks, data.rstrip().endswith('data: [DONE]')


def fold(chunks):
    """A stream's deltas put together: content (and how many deltas gave
    it), reasoning, calls by index, the finish reason."""
    r = {'content': '', 'reasoning': '', 'calls': {}, 'finish': None, 'n_content': 0}
    for ch in chunks:
        for c in ch['choices']:
            d = c.get('delta') or {}
            if d.get('content'):
                r['content'] += d['content']
                r['n_content'] += 1
            r['reasoning'] += d.get('reasoning_content') or ''
            for tc in d.get('tool_calls') or []:
                at = r['calls'].setdefault(tc['index'], {'id': '', 'name': '', 'arguments': ''})
                at['id'] += tc.get('id') or ''
                f = tc.get('function') or {}
                at['name'] += f.get('name') or ''
                at['arguments'] += f.get('arguments') or ''
            if c.get('finish_reason'):
                r['finish'] = c['finish_reason']
    return r


def same_stream(body, m, fin, what, good_id):
    """body streamed gives message m's content, reasoning and calls (ids
    good_id), finish fin, then [DONE]."""
    chunks, ended = post(dict(body, stream=True), stream=True)
    s = fold(chunks)
    calls = m.get('tool_calls') or []
    check(what + ', streamed: the same content and calls, then [DONE]',
          ended and s['finish'] == fin and s['content'] == (m['content'] or '') and
          s['reasoning'] == (m.get('reasoning_content') or '') and
          [(s['calls'][k]['name'], s['calls'][k]['arguments']) for k in sorted(s['calls'])] ==
          [(t['function']['name'], t['function']['arguments']) for t in calls] and
          all(good_id(v['id']) for v in s['calls'].values()), [s, m])
    return s


def n_tokens(text):
    out = subprocess.run([BIN, 'tokenize', '-m', MODEL, '--parse-special'], input=text.encode(),
                         capture_output=True, check=True).stdout.split()
    return len(out)


def jinja_tokens(msgs, tools):
    """Jinja2's render of what a client sends, as the server gives it to the template."""
    case = {'messages': copy.deepcopy(msgs), 'tools': tools, 'add_generation_prompt': True}
    for m in case['messages']:
        m.pop('refusal', None)
        if m.get('content') is None:
            m['content'] = ''
        for tc in m.get('tool_calls') or []:
            if isinstance(tc['function']['arguments'], str):
                tc['function']['arguments'] = json.loads(tc['function']['arguments'])
    return n_tokens(gen.render(SRC, case, datetime.datetime.now(), CTX))
