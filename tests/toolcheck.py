"""What the server tool-call tests (tests/test_server_tools*.sh) share: the
pass/fail counts, a client of /v1/chat/completions, a stream folded into one
message, the tools they offer with their schemas, and the check that a call
is one a client can run. The scripts import it with tests/ on sys.path."""

import copy
import json
import subprocess
import urllib.error
import urllib.request

import jsonschema

URL = None  # the server, e.g. http://127.0.0.1:PORT (set by the script)
n_ok = n_bad = 0


def check(name, cond, detail=None):
    global n_ok, n_bad
    if cond:
        n_ok += 1
        print('ok   ' + name)
    else:
        n_bad += 1
        print('FAIL %s%s' % (name, ': ' + json.dumps(detail)[:800] if detail is not None else ''))


def summary():
    print('%d passed, %d failed' % (n_ok, n_bad))


def post(body, stream=False, status=False):
    """The reply's JSON; with stream, (chunks, ended with [DONE]); with
    status, (HTTP status, JSON) without raising on an error status."""
    req = urllib.request.Request(URL + '/v1/chat/completions', json.dumps(body).encode(),
                                 {'Content-Type': 'application/json'})
    try:
        with urllib.request.urlopen(req, timeout=180) as r:
            code, data = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        if not status:
            raise
        code, data = e.code, e.read().decode()
    if status:
        return code, json.loads(data)
    if not stream:
        return json.loads(data)
    chunks = [json.loads(l[6:]) for l in data.split('\n') if l.startswith('data: {')]
    return chunks, data.rstrip().endswith('data: [DONE]')


def fold(chunks):
    """A stream's chunks as one message: content (and how many deltas
    carried it), reasoning when any delta had it, calls by index, finish."""
    r = {'content': '', 'calls': {}, 'finish': None, 'n_content': 0}
    for ch in chunks:
        for c in ch['choices']:
            d = c.get('delta') or {}
            if d.get('content'):
                r['content'] += d['content']
                r['n_content'] += 1
            if 'reasoning_content' in d:
                r['reasoning'] = r.get('reasoning', '') + d['reasoning_content']
            for tc in d.get('tool_calls') or []:
                at = r['calls'].setdefault(tc['index'], {'id': '', 'name': '', 'arguments': ''})
                at['id'] += tc.get('id') or ''
                f = tc.get('function') or {}
                at['name'] += f.get('name') or ''
                at['arguments'] += f.get('arguments') or ''
            if c.get('finish_reason'):
                r['finish'] = c['finish_reason']
    return r


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


def valid_call(tc, names, id_ok=lambda i: i.startswith('call_')):
    """A call to one of names whose arguments validate against its schema."""
    try:
        f = tc['function']
        jsonschema.validate(json.loads(f['arguments']), SCHEMA[f['name']])
        return f['name'] in names and tc['type'] == 'function' and id_ok(tc['id'])
    except Exception:
        return False


def n_tokens(bin_, model, text):
    """How many tokens `inflight tokenize` makes of text (special tokens parsed)."""
    out = subprocess.run([bin_, 'tokenize', '-m', model, '--parse-special'], input=text.encode(),
                         capture_output=True, check=True).stdout.split()
    return len(out)


def jinja_messages(msgs):
    """What a client sends, as the server gives it to a template: null
    content as '', call arguments as objects."""
    msgs = copy.deepcopy(msgs)
    for m in msgs:
        if m.get('content') is None:
            m['content'] = ''
        for tc in m.get('tool_calls') or []:
            if isinstance(tc['function']['arguments'], str):
                tc['function']['arguments'] = json.loads(tc['function']['arguments'])
    return msgs
