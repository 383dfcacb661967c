"""Chat templates through the package: Tokenizer.apply_chat_template
renders ../shared/chat's conversations byte for byte as transformers
does, and LLM.chat generates from the rendered prompt."""

import json
import os

import pytest

import inflight
from inflight import SamplingParams
from conftest import MODELS, STORIES

CHAT = os.path.join(MODELS, "..", "chat")


def _cases():
    with open(os.path.join(CHAT, "cases.json"), encoding="utf-8") as f:
        spec = json.load(f)
    out = []
    for name in sorted(os.listdir(os.path.join(CHAT, "templates"))):
        t = name[:-len(".jinja")]
        with open(os.path.join(CHAT, "templates", name), encoding="utf-8") as f:
            src = f.read()
        if "strftime_now" in src:
            continue  # renders today's date; the C suite checks these at a fixed instant
        ctx = dict(spec["default_context"])
        ctx.update(spec["template_context"].get(t, {}))
        for case in spec["cases"]:
            out.append((t, src, ctx, case))
    return out


CASES = _cases()


@pytest.fixture(scope="module")
def tok():
    with inflight.LLM(STORIES, n_threads=1) as m:
        yield m.tokenizer


def test_reference_renders(tok):
    assert len(CASES) > 200
    checked = 0
    for t, src, ctx, case in CASES:
        base = os.path.join(CHAT, "expected", f"{t}__{case['name']}")
        kw = dict(ctx)
        if os.path.exists(base + ".txt"):
            with open(base + ".txt", "rb") as f:
                want = f.read().decode("utf-8")
            got = tok.apply_chat_template(case["messages"], chat_template=src,
                                          tools=case.get("tools"),
                                          add_generation_prompt=case["add_generation_prompt"], **kw)
            assert got == want, f"{t} {case['name']}"
        else:
            with open(base + ".error", encoding="utf-8") as f:
                want = f.read()
            if want == "TypeError: Object of type generator is not JSON serializable":
                # the engine writes a generator as its list, as llama.cpp's does
                got = tok.apply_chat_template(case["messages"], chat_template=src,
                                              tools=case.get("tools"),
                                              add_generation_prompt=case["add_generation_prompt"],
                                              **kw)
                assert case["tools"][0]["function"]["name"] in got, f"{t} {case['name']}"
                checked += 1
                continue
            with pytest.raises(ValueError) as e:
                tok.apply_chat_template(case["messages"], chat_template=src,
                                        tools=case.get("tools"),
                                        add_generation_prompt=case["add_generation_prompt"], **kw)
            assert want.split(":")[-1].strip()[:40] in str(e.value), f"{t} {case['name']}"
        checked += 1
    assert checked == len(CASES)


def test_default_is_chatml_and_errors(tok):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert tok.apply_chat_template(msgs, add_generation_prompt=True) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n")
    assert tok.apply_chat_template(msgs) .endswith("Hi<|im_end|>\n")
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
    assert ids[0] == tok.bos_token_id
    # a template that starts with the BOS text gets no second BOS
    ids = tok.apply_chat_template(msgs, tokenize=True,
                                  chat_template="{{ bos_token }}{{ messages[1].content }}")
    assert ids.count(tok.bos_token_id) == 1
    with pytest.raises(ValueError, match="TemplateSyntaxError"):
        tok.apply_chat_template(msgs, chat_template="{% for %}")
    with pytest.raises(ValueError, match="roles"):
        tok.apply_chat_template(msgs, chat_template="{{ raise_exception('roles must alternate') }}")
    with pytest.raises(TypeError):
        tok.apply_chat_template(msgs, bad=object())  # not JSON


def test_llm_chat_generates_from_the_rendered_prompt():
    with inflight.LLM(STORIES, n_threads=1) as llm:
        msgs = [{"role": "user", "content": "Once upon a time"}]
        sp = SamplingParams(max_tokens=12, temperature=0)
        out = llm.chat(msgs, sp)[0]
        ids = llm.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
        plain = llm.generate({"prompt_token_ids": ids}, sp)[0]
        assert out.outputs[0].token_ids == plain.outputs[0].token_ids
        assert out.prompt_token_ids == ids
        assert out.prompt.endswith("<|im_start|>assistant\n")
        two = llm.chat([msgs, [{"role": "user", "content": "The dog"}]], sp)
        assert len(two) == 2 and two[0].outputs[0].token_ids == out.outputs[0].token_ids
