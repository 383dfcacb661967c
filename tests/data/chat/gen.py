#!/usr/bin/env python3
"""Renders gpt-oss.jinja over cases.json with Jinja2 the way Hugging Face
transformers sets it up (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loopcontrols, tojson as json.dumps without ASCII escaping
and with a generator written as a list (as the server's engine does),
raise_exception, strftime_now frozen at fixed_now) and writes
expected/<case>.txt, or expected/<case>.error with "<Class>: <message>"
when Jinja2 raises. Run from this folder: python3 gen.py
(Debian: apt-get install python3-jinja2)."""
import datetime
import json
import os
import types

import jinja2
import jinja2.ext
import jinja2.sandbox


# Templates that write tool calls as Hermes' <tool_call> blocks (from the
# shared set, ../shared/chat/templates), rendered over the tool cases as the
# server gives them: reasoning as reasoning_content (Qwen3's name for
# gpt-oss's thinking), arguments as the object they hold, and the Qwen
# vocabulary's special tokens. tests/test_server_tools.sh compares.
HERMES = {'qwen2.5': 'Qwen-Qwen2.5-7B-Instruct.jinja', 'qwen3': 'Qwen-Qwen3-0.6B.jinja',
          'hermes3': 'NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja'}
HERMES_CASES = ['f_tools', 'h_tool_call_result', 'i_tool_call_then_final', 'j_string_arguments']
HERMES_CTX = {'bos_token': '<|endoftext|>', 'eos_token': '<|im_end|>'}


def as_server_gives(case):
    for m in case['messages']:
        if 'thinking' in m:
            m['reasoning_content'] = m.pop('thinking')
        for tc in m.get('tool_calls', []):
            if isinstance(tc['function']['arguments'], str):
                tc['function']['arguments'] = json.loads(tc['function']['arguments'])
    return case


def as_list(x):
    if isinstance(x, types.GeneratorType):
        return list(x)
    raise TypeError('Object of type %s is not JSON serializable' % type(x).__name__)


def render(src, case, now, ctx=None):
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # a generator (map, select, ...) as the list it yields, as the server's
        # engine writes it (src/chat/print.c) where Jinja2's json.dumps raises
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys, default=as_list)

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env.filters['tojson'] = tojson
    env.globals['raise_exception'] = raise_exception
    env.globals['strftime_now'] = lambda fmt: now.strftime(fmt)
    t = env.from_string(src)
    ctx = dict(ctx or {'bos_token': '<|startoftext|>', 'eos_token': '<|return|>'})
    ctx.update(case.get('vars', {}))
    return t.render(messages=case['messages'], tools=case['tools'], documents=None,
                    add_generation_prompt=case['add_generation_prompt'], **ctx)


def main():
    with open('cases.json', encoding='utf-8') as f:
        cases = json.load(f)
    with open('gpt-oss.jinja', encoding='utf-8') as f:
        src = f.read()
    now = datetime.datetime.fromisoformat(cases['fixed_now'])
    os.makedirs('expected', exist_ok=True)
    for case in cases['cases']:
        base = os.path.join('expected', 'gpt-oss__' + case['name'])
        for ext in ('.txt', '.error'):
            if os.path.exists(base + ext):
                os.remove(base + ext)
        try:
            out, ext = render(src, json.loads(json.dumps(case)), now), '.txt'
        except Exception as e:  # the reference raised: keep its class and message
            out, ext = '%s: %s' % (type(e).__name__, e), '.error'
        with open(base + ext, 'w', encoding='utf-8', newline='') as f:
            f.write(out)
        print(base + ext)
    shared = os.environ.get('IFL_SHARED', '../../../../shared')
    for short, name in HERMES.items():
        with open(os.path.join(shared, 'chat', 'templates', name), encoding='utf-8') as f:
            src = f.read()
        for case in cases['cases']:
            if case['name'] not in HERMES_CASES:
                continue
            out = render(src, as_server_gives(json.loads(json.dumps(case))), now, HERMES_CTX)
            path = os.path.join('expected', '%s__%s.txt' % (short, case['name']))
            with open(path, 'w', encoding='utf-8', newline='') as f:
                f.write(out)
            print(path)


if __name__ == '__main__':
    main()
