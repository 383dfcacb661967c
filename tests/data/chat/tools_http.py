"""What the tool-call server scripts share (tests/test_server_tools.sh,
tests/test_server_tools_llama.sh, tests/test_server_tools_xml.sh,
tests/test_server_tools_mistral.sh, tests/test_server_tools_deepseek.sh):
checks counted and printed as "ok NAME" or
"FAIL NAME: detail", chat requests to the server whole or streamed, a
stream folded back into a message, the token count of Jinja2's render of a
conversation (gen.py's set-up) by the server's tokenizer, and a streamed
reply compared with the whole one. set_up() first."""
import copy
import datetime
import json
import subprocess
import urllib.error
import urllib.request

import jsonschema

import gen

U = BIN = MODEL = SRC = None
CTX = {}
SCHEMA = {}  # function name -> its parameters schema, for valid_call
PREFIX = ''  # before every check's name
NOW = False  # render with today's date (a template's strftime_now), or gen.py's fixed one
counts = [0, 0]  # ok, failed

# the tools the Llama and Mistral scripts ask with, their schemas, a question
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
TOOL_SCHEMAS = {'get_weather': WEATHER, 'get_time': TIME,
                'ping': {'type': 'object', 'maxProperties': 0}}
ASK = [{'role': 'system', 'content': 'Be brief.'},
       {'role': 'user', 'content': 'What is the weather in Paris?'}]


def set_up(url, binary, model, template, ctx, schema, prefix='', now=False):
    global U, BIN, MODEL, SRC, CTX, SCHEMA, PREFIX, NOW
    U, BIN, MODEL, CTX, SCHEMA, PREFIX, NOW = url, binary, model, ctx, schema, prefix, now
    SRC = open(template, encoding='utf-8').read() if template else None


def check(name, cond, detail=None):
    if cond:
        counts[0] += 1
        print('ok   ' + PREFIX + name)
    else:
        counts[1] += 1
        print('FAIL %s%s%s' % (PREFIX, name,
                               ': ' + json.dumps(detail)[:800] if detail is not None else ''))


def done():
    print('%d passed, %d failed' % tuple(counts))


def post(body, stream=False, status=False):
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
    chunks = [json.loads(l[6:]) for l in data.split('\n') if l.startswith('data: {')]
    return chunks, data.rstrip().endswith('data: [DONE]')


def fold(chunks):
    """A stream's chunks as one message: content, reasoning, calls by index, the
    finish, and how many deltas carried content and a reasoning_content key."""
    r = {'content': '', 'reasoning': '', 'calls': {}, 'finish': None, 'n_content': 0,
         'n_reasoning': 0}
    for ch in chunks:
        for c in ch['choices']:
            d = c.get('delta') or {}
            if d.get('content'):
                r['content'] += d['content']
                r['n_content'] += 1
            if 'reasoning_content' in d:
                r['reasoning'] += d['reasoning_content'] or ''
                r['n_reasoning'] += 1
            for tc in d.get('tool_calls') or []:
                at = r['calls'].setdefault(tc['index'], {'id': '', 'name': '', 'arguments': ''})
                at['id'] += tc.get('id') or ''
                f = tc.get('function') or {}
                at['name'] += f.get('name') or ''
                at['arguments'] += f.get('arguments') or ''
            if c.get('finish_reason'):
                r['finish'] = c['finish_reason']
    return r


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
        if 'reasoning_content' in m and not m['reasoning_content']:
            del m['reasoning_content']
        for tc in m.get('tool_calls') or []:
            if isinstance(tc['function']['arguments'], str):
                tc['function']['arguments'] = json.loads(tc['function']['arguments'])
    return n_tokens(gen.render(SRC, case, datetime.datetime.now() if NOW else None, CTX))


def render_cases(names, keep_thinking=True):
    """The reference conversations: the prompt has as many tokens as Jinja2's render
    (an assistant's thinking sent as reasoning_content, or left out)."""
    cases = {c['name']: c for c in json.load(open('tests/data/chat/cases.json'))['cases']}
    for name in names:
        c = cases[name]
        msgs = []
        for m in c['messages']:  # as OpenAI clients send them
            m = dict(m)
            if 'thinking' in m and keep_thinking:
                m['reasoning_content'] = m.pop('thinking')
            m.pop('thinking', None)
            for tc in m.get('tool_calls', []):
                if not isinstance(tc['function']['arguments'], str):
                    tc['function']['arguments'] = json.dumps(tc['function']['arguments'])
            msgs.append(m)
        want = jinja_tokens(msgs, c['tools'])
        got = post({'messages': msgs, 'tools': c['tools'], 'max_tokens': 1})
        check('%s: the prompt is Jinja2\'s render (%d tokens)' % (name, want),
              got.get('usage', {}).get('prompt_tokens') == want, [want, got])


def valid_call(tc, names):
    try:
        f = tc['function']
        jsonschema.validate(json.loads(f['arguments']), SCHEMA[f['name']])
        return f['name'] in names and tc['type'] == 'function' and tc['id'].startswith('call_')
    except Exception:
        return False


def same_stream(body, m, fin, what, good_id=lambda i: i.startswith('call_')):
    chunks, ended = post(dict(body, stream=True), stream=True)
    s = fold(chunks)
    calls = m.get('tool_calls') or []
    check(what + ', streamed: the same content, reasoning and calls, then [DONE]',
          ended and s['finish'] == fin and s['content'] == (m['content'] or '') and
          s['reasoning'] == (m.get('reasoning_content') or '') and
          [(s['calls'][k]['name'], s['calls'][k]['arguments']) for k in sorted(s['calls'])] ==
          [(t['function']['name'], t['function']['arguments']) for t in calls] and
          all(good_id(v['id']) for v in s['calls'].values()), [s, m])
    return s


def check_named(ask, tools, names, seeds):
    """A named function forced: one call to it, valid, whole and streamed
    (parallel_tool_calls true for seed 0, false for the others)."""
    for name in names:
        for seed in range(seeds):
            body = {'messages': ask, 'tools': tools, 'max_tokens': 300, 'temperature': 1,
                    'seed': seed, 'tool_choice': {'type': 'function', 'function': {'name': name}},
                    'parallel_tool_calls': seed == 0}
            c = post(body)['choices'][0]
            calls = c['message'].get('tool_calls') or []
            check('named %s, seed %d: one call to it, valid' % (name, seed),
                  len(calls) == 1 and calls[0]['function']['name'] == name and
                  valid_call(calls[0], {name}) and c['finish_reason'] == 'tool_calls', c)
            same_stream(body, c['message'], 'tool_calls', 'named %s, seed %d' % (name, seed))


def check_none(ask, tools, grammar, looks_like, max_tokens=100):
    """tool_choice none: no tools in the prompt, and a reply steered by grammar
    into a call stays content (looks_like(content) says it is the call's text).
    The prompt tokens with tools."""
    plain = post({'messages': ask, 'max_tokens': 1})['usage']['prompt_tokens']
    withtools = post({'messages': ask, 'tools': tools, 'max_tokens': 1})['usage']['prompt_tokens']
    c = post({'messages': ask, 'tools': tools, 'tool_choice': 'none', 'max_tokens': max_tokens,
              'temperature': 0, 'grammar': grammar})
    check('none: the prompt of no tools', c['usage']['prompt_tokens'] == plain < withtools,
          [plain, withtools, c['usage']])
    m = c['choices'][0]['message']
    check('none: a call-like reply stays content',
          'tool_calls' not in m and looks_like(m['content']) and
          c['choices'][0]['finish_reason'] == 'stop', m)
    return withtools


def check_turn_after(conv, tools):
    """conv (ending with tool results), then an answer and a question: rendered
    as Jinja2 renders it."""
    conv2 = conv + [{'role': 'assistant', 'content': 'It is 21 degrees.'},
                    {'role': 'user', 'content': 'And Rome?'}]
    want = jinja_tokens(conv2, tools)
    nxt = post({'messages': conv2, 'tools': tools, 'max_tokens': 1})
    check('a turn after the answer: as Jinja2 renders it (%d tokens)' % want,
          nxt['usage']['prompt_tokens'] == want, [want, nxt['usage']])
