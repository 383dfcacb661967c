"""LoRA adapters from Python: loaded at start or at run time, chosen per
request (TensorRT-LLM's LoRARequest), mixed in one batch."""

import os
import subprocess

import pytest

import inflight
from inflight import LoRARequest, SamplingParams
from conftest import BUILD, INFLIGHT_BIN, ROOT, STORIES

MKMODEL = os.path.join(ROOT, BUILD, "tools", "mkmodel")
GREEDY = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True, logprobs=0)


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    d = tmp_path_factory.mktemp("lora")
    out = []
    for seed in (1, 2):
        p = str(d / f"a{seed}.gguf")
        subprocess.run([MKMODEL, "-o", p, "--lora-of", STORIES, "--rank", "4", "--alpha", "8",
                        "--seed", str(seed)], check=True, capture_output=True)
        out.append(p)
    merged = str(d / "merged.gguf")
    subprocess.run([INFLIGHT_BIN, "lora", "merge", "-m", STORIES, "--lora", out[0] + ":1",
                    "-o", merged], check=True, capture_output=True)
    return out + [merged]


def _toks(r):
    return r.outputs[0].token_ids


def test_adapter_equals_the_merged_model(adapters):
    a1, a2, merged = adapters
    with inflight.LLM(merged, n_threads=1) as m:
        want = _toks(m.generate("Once upon a time", GREEDY)[0])
    with inflight.LLM(STORIES, n_threads=1, lora_modules={"one": a1}) as llm:
        [info] = llm.list_loras()
        assert info["name"] == "one" and info["scale"] == 0.0 and info["rank"] == 4
        base = _toks(llm.generate("Once upon a time", GREEDY)[0])
        r = llm.generate("Once upon a time", GREEDY, lora_request=LoRARequest("one"))[0]
        assert _toks(r) == want
        b = llm.generate("Once upon a time", GREEDY)[0]
        assert r.outputs[0].logprobs != b.outputs[0].logprobs


def test_mixed_batch_equals_each_alone(adapters):
    a1, a2, _ = adapters
    with inflight.LLM(STORIES, n_threads=2, kv_type="f32") as llm:
        one = llm.load_lora(a1, "one")
        two = LoRARequest("two", lora_path=a2, scale=0.7)  # loaded at first use
        specs = [one, two, [one, two], [], None, LoRARequest("two", scale=0.0)]
        prompts = ["Once upon a time"] * len(specs)
        alone = [llm.generate(p, GREEDY, lora_request=s)[0] for p, s in zip(prompts, specs)]
        together = llm.generate(prompts, GREEDY, lora_request=specs)
        for a, t in zip(alone, together):
            assert _toks(a) == _toks(t) and a.outputs[0].logprobs == t.outputs[0].logprobs
        base = _toks(alone[3])
        lp = [a.outputs[0].logprobs for a in alone]
        assert lp[4] == lp[3]  # no global scale set: None is the base
        assert lp[5] == lp[3]  # scale 0 is the base
        # (a small random adapter may keep the greedy tokens; it moves the log-probs)
        assert lp[0] != lp[3] and lp[1] != lp[3] and lp[2] not in (lp[0], lp[1], lp[3])
        assert {i["name"] for i in llm.list_loras()} == {"one", "two"}
        # a global scale applies to requests that name no adapter
        llm.set_lora_scale(one, 1.0)
        assert llm.generate("Once upon a time", GREEDY)[0].outputs[0].logprobs == lp[0]
        assert llm.generate("Once upon a time", GREEDY, lora_request=[])[0].outputs[0].logprobs \
            == lp[3]
        # streaming with an adapter
        r = llm.generate_async("Once upon a time", GREEDY, streaming=True, lora_request=one)
        assert "".join(s.outputs[0].text_diff for s in r) == alone[0].outputs[0].text
        llm.unload_lora(one)
        with pytest.raises(ValueError, match="one"):
            llm.generate("Once", GREEDY, lora_request=LoRARequest("one"))


def test_bad_adapters(adapters):
    with inflight.LLM(STORIES, n_threads=1) as llm:
        with pytest.raises((ValueError, OSError), match="no-such"):
            llm.load_lora("/nonexistent/no-such.gguf")
        with pytest.raises(ValueError):
            llm.load_lora(STORIES)  # a model, not an adapter
        with pytest.raises(ValueError, match="lora_request"):
            llm.generate("Once", GREEDY, lora_request=LoRARequest("nobody"))
        with pytest.raises(ValueError, match="lora_request"):
            llm.generate(["a", "b"], GREEDY, lora_request=[None])
        assert llm.generate("Once", GREEDY)[0].outputs[0].token_ids  # still serving


def test_lora_type_holds_smaller(adapters):
    a1 = adapters[0]
    held = {}
    for t in ("f32", "f16", "q8_0"):
        with inflight.LLM(STORIES, n_threads=1, lora_type=t, lora_modules={"one": a1}) as llm:
            [info] = llm.list_loras()
            base = llm.generate("Once upon a time", GREEDY)[0].outputs[0].logprobs
            r = llm.generate("Once upon a time", GREEDY, lora_request=LoRARequest("one"))[0]
            assert r.outputs[0].logprobs != base
            held[t] = info["bytes"]
    # stories260K's attention rows are whole blocks of 32 (Q8_0), its FFN's
    # (n_ff 172) are not and stay F16
    assert held["f32"] > held["f16"] > held["q8_0"]
    with pytest.raises(ValueError, match="q8_0"):
        inflight.LLM(STORIES, n_threads=1, lora_type="f8")
