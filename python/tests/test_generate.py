"""The LLM API: generation from text and ids, streaming, the outputs asked
for, stops, guided decoding, logits processors, the tokenizer."""

import json
import subprocess

import pytest

import inflight
from inflight import GuidedDecodingParams, SamplingParams
from conftest import INFLIGHT_BIN, STORIES

# llama.cpp's 64 greedy ids for "Once upon a time" (../shared/models/ref/stories260K.json)
GREEDY = [432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337, 410,
          408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358, 394, 261, 370,
          432, 352, 266, 268, 388, 426, 338, 391, 266, 267, 337, 335, 312, 432, 398, 312, 286,
          267, 414, 270, 333, 415, 426, 13, 438, 310, 439, 419, 357, 336]
GREEDY_PARAMS = dict(temperature=0.0, ignore_eos=True)


def test_greedy_matches_the_command_line_and_llamacpp(llm):
    out = llm.generate("Once upon a time", SamplingParams(max_tokens=40, **GREEDY_PARAMS))
    assert len(out) == 1
    o = out[0].outputs[0]
    assert o.token_ids == GREEDY[:40]
    assert o.finish_reason == "length"
    cli = subprocess.run([INFLIGHT_BIN, "run", "-m", STORIES, "-p", "Once upon a time", "-n",
                          "40", "--temp", "0", "--ignore-eos", "-t", "1"],
                         capture_output=True, text=True, check=True).stdout
    assert o.text == cli.rstrip("\n")
    ids = subprocess.run([INFLIGHT_BIN, "run", "-m", STORIES, "-p", "Once upon a time", "-n",
                          "40", "--temp", "0", "--ignore-eos", "--ids", "-t", "1"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert [int(t) for t in ids] == o.token_ids


def test_text_and_ids_prompts_many_at_once(llm):
    ids = llm.tokenizer.encode("Once upon a time")
    assert ids == [1, 403, 407, 261, 378]
    sp = SamplingParams(max_tokens=12, **GREEDY_PARAMS)
    outs = llm.generate(["Once upon a time", ids, {"prompt_token_ids": ids}], sp)
    assert [o.outputs[0].token_ids for o in outs] == [GREEDY[:12]] * 3
    assert outs[0].prompt == "Once upon a time" and outs[1].prompt is None
    assert outs[0].prompt_token_ids == ids
    one = llm.generate(ids, sp)
    assert len(one) == 1 and one[0].outputs[0].token_ids == GREEDY[:12]
    assert llm.generate([], sp) == []


def test_streaming_joined_equals_whole(llm):
    for sp in (SamplingParams(max_tokens=48, **GREEDY_PARAMS),
               SamplingParams(max_tokens=48, temperature=0.9, top_p=0.95, seed=7, logprobs=3)):
        whole = llm.generate("The little dog", sp)[0].outputs[0]
        r = llm.generate_async("The little dog", sp, streaming=True)
        text, toks, lps, steps = "", [], [], 0
        for step in r:
            o = step.outputs[0]
            text += o.text_diff
            toks += o.token_ids_diff
            lps += o.logprobs_diff
            steps += 1
        assert steps > 10  # it streamed
        assert r.finished and r.done()
        assert text == whole.text and toks == whole.token_ids
        assert r.outputs[0].text == whole.text
        if sp.logprobs is not None:
            assert lps == whole.logprobs and len(lps) == len(toks)
            assert r.outputs[0].top_logprobs == whole.top_logprobs
            assert all(len(row) == 3 for row in whole.top_logprobs)
            assert abs(sum(whole.logprobs) - whole.cumulative_logprob) < 1e-3


def test_n_and_beams(llm):
    sp = SamplingParams(max_tokens=16, n=3, temperature=1.0, seed=11)
    o = llm.generate("Once upon a time", sp)[0]
    assert [c.index for c in o.outputs] == [0, 1, 2]
    assert len({tuple(c.token_ids) for c in o.outputs}) >= 2
    b = llm.generate("Once upon a time", SamplingParams(max_tokens=16, beam_width=4, n=2,
                                                        logprobs=0))[0]
    assert len(b.outputs) == 2
    assert b.outputs[0].score >= b.outputs[1].score
    assert all(c.finish_reason in ("stop", "length") for c in b.outputs)
    u = llm.generate("Once upon a time", SamplingParams(max_tokens=16, use_beam_search=True,
                                                        best_of=4, n=2, logprobs=0))[0]
    assert [c.token_ids for c in u.outputs] == [c.token_ids for c in b.outputs]
    # best_of: the n most likely of best_of samples
    four = llm.generate("Once upon a time", SamplingParams(max_tokens=16, n=4, seed=5))[0]
    two = llm.generate("Once upon a time", SamplingParams(max_tokens=16, n=2, best_of=4,
                                                          seed=5))[0]
    ranked = sorted(four.outputs, key=lambda c: -c.cumulative_logprob)[:2]
    assert [c.token_ids for c in two.outputs] == [c.token_ids for c in ranked]
    assert [c.index for c in two.outputs] == [0, 1]
    with pytest.raises(ValueError, match="best_of"):
        llm.generate_async("Once", SamplingParams(n=1, best_of=3), streaming=True)


def test_stop_strings_and_reasons(llm):
    whole = llm.generate("Once upon a time", SamplingParams(max_tokens=40, **GREEDY_PARAMS))
    text = whole[0].outputs[0].text
    assert " Lily" in text
    sp = SamplingParams(max_tokens=40, temperature=0.0, stop=["Lily", "zzz"])
    o = llm.generate("Once upon a time", sp)[0].outputs[0]
    assert o.finish_reason == "stop" and o.stop_reason == "Lily"
    assert o.text == text[:text.index("Lily")]
    sp.include_stop_str_in_output = True
    o = llm.generate("Once upon a time", sp)[0].outputs[0]
    assert o.text == text[:text.index("Lily") + 4]
    o = llm.generate("Once upon a time", SamplingParams(max_tokens=40, temperature=0.0,
                                                       stop_token_ids=[GREEDY[5]]))[0].outputs[0]
    assert o.finish_reason == "stop" and o.stop_reason == GREEDY[5]
    assert o.token_ids == GREEDY[:6]


def test_outputs_asked_for(llm):
    n_vocab = llm.tokenizer.vocab_size
    sp = SamplingParams(max_tokens=6, temperature=0.0, return_context_logits=True,
                        return_generation_logits=True, return_hidden_states=True,
                        prompt_logprobs=2, return_perf_metrics=True, logprobs=0)
    r = llm.generate("Once upon a time", sp)[0]
    o = r.outputs[0]
    assert r.context_logits.shape == (5, n_vocab)
    assert o.generation_logits.shape == (6, n_vocab)
    assert o.hidden_states.shape[0] == 6 and len(o.hidden_states[5]) == o.hidden_states.shape[1]
    assert r.context_logits.memoryview[4, 7] == r.context_logits[4][7]
    # the first generated token is the argmax of the prompt's last row
    last = r.context_logits[4].tolist()
    assert last.index(max(last)) == o.token_ids[0]
    row0 = o.generation_logits[0].tolist()
    assert row0 == last
    assert r.prompt_logprobs[0] is None and len(r.prompt_logprobs) == 5
    lp, alts = r.prompt_logprobs[1]
    assert lp <= 0 and len(alts) == 2 and alts[0][1] >= alts[1][1]
    assert r.metrics["first_token_us"] >= r.metrics["arrival_us"] > 0
    keep = llm.generate("Once upon a time", SamplingParams(max_tokens=4, temperature=0.0,
                                                          exclude_input_from_output=False))
    k = keep[0].outputs[0]
    assert k.token_ids == [1, 403, 407, 261, 378] + GREEDY[:4]
    assert k.text.startswith("Once upon a time")


def test_guided_json_schema_50_samples(llm):
    jsonschema = pytest.importorskip("jsonschema")
    schema = {"type": "object",
              "properties": {"name": {"type": "string", "maxLength": 12},
                             "age": {"type": "integer", "minimum": 0, "maximum": 120},
                             "pet": {"enum": ["cat", "dog", "bird"]}},
              "required": ["name", "age", "pet"], "additionalProperties": False}
    sps = [SamplingParams(max_tokens=80, temperature=1.0, seed=1000 + i,
                          guided_decoding=GuidedDecodingParams(json=schema)) for i in range(50)]
    outs = llm.generate(["Once upon a time"] * 50, sps)
    for o in outs:
        c = o.outputs[0]
        assert c.finish_reason == "stop", c
        jsonschema.validate(json.loads(c.text), schema)
    texts = {o.outputs[0].text for o in outs}
    assert len(texts) > 10  # sampled, not one answer
    r = llm.generate("x", SamplingParams(max_tokens=20, temperature=1.0, seed=3,
                                         guided_decoding=GuidedDecodingParams(regex="[ab]{3}c")))
    assert r[0].outputs[0].text in {a + b + c + "c" for a in "ab" for b in "ab" for c in "ab"}


def test_bad_guide_is_an_error_not_unconstrained(llm):
    with pytest.raises(ValueError, match="guided_decoding"):
        llm.generate("x", SamplingParams(guided_decoding=GuidedDecodingParams(regex="[a-")))
    with pytest.raises(ValueError, match="guided_decoding"):
        llm.generate("x", SamplingParams(guided_decoding=GuidedDecodingParams(
            grammar="root ::= missing")))


def test_tokenizer(llm):
    t = llm.tokenizer
    ids = t.encode("Hello world", add_special_tokens=False)
    assert ids and ids[0] != t.bos_token_id
    assert t.decode(ids) == " Hello world"  # SentencePiece's word-start marker
    assert t.encode("Hi")[0] == t.bos_token_id == 1
    with pytest.raises(ValueError, match=r"ids\[0\]"):
        t.decode([t.vocab_size])


def test_logits_processor_from_python():
    calls = []

    def force(request_id, logits, token_ids, client_id):
        calls.append((request_id, len(token_ids), client_id))
        for i in range(len(logits)):
            logits[i] = -1e30
        logits[300] = 0.0

    with inflight.LLM(STORIES, n_threads=1, logits_processors={"force": force}) as m:
        r = m.generate("Once", SamplingParams(max_tokens=5, temperature=0.8, seed=1,
                                              logits_processor="force", client_id=77))[0]
        assert r.outputs[0].token_ids == [300] * 5
        assert len(calls) == 5 and calls[0][2] == 77 and calls[1][1] == calls[0][1] + 1
        with pytest.raises(ValueError, match="logits_processor"):
            m.generate("Once", SamplingParams(logits_processor="nope"))


def test_get_stats_yields_each_step():
    with inflight.LLM(STORIES, n_threads=1) as m:
        list(m.get_stats())  # whatever creation published
        outs = m.generate(["Once upon a time"] * 3, SamplingParams(max_tokens=20,
                                                                 **GREEDY_PARAMS))
        assert m.executor.wait_idle(30)
        steps = list(m.get_stats())
        its = [s["iteration"] for s in steps]
        assert its == list(range(its[0], its[0] + len(its)))
        assert sum(s["context_tokens"] for s in steps) == 15
        assert sum(s["generation_tokens"] for s in steps) == 3 * 19
        assert steps[-1]["completed_requests"] == 3
        assert all(len(o.outputs[0].token_ids) == 20 for o in outs)
        assert list(m.get_stats()) == []  # nothing new since
        latest = m.get_latest_stats()
        assert latest["iteration"] == its[-1] and latest["process_rss_bytes"] > 0
        # no speculation, no tensor parallelism, no images: their fields at rest
        assert latest["draft_kv_bytes_reserved"] == latest["draft_kv_bytes_resident"] == 0
        assert latest["tp_ranks"] == 1 and latest["images_encoded"] == 0


def test_draft_pool_in_stats():
    """A draft model's KV pool is in the stats: reserved, and resident
    once a request drafted."""
    with inflight.LLM(STORIES, n_threads=1, speculative={"type": "draft", "draft_model": STORIES,
                                                         "p_min": 0.0, "adaptive": False}) as m:
        before = m.get_latest_stats()
        assert before["draft_kv_bytes_reserved"] > 0
        m.generate(["Once upon a time"], SamplingParams(max_tokens=40, **GREEDY_PARAMS))
        after = m.get_latest_stats()
        assert after["draft_tokens"] > 0
        assert 0 < after["draft_kv_bytes_resident"] <= after["draft_kv_bytes_reserved"]


def test_batched_logits_processor():
    seen_rows = []

    def batched(request_ids, logits, token_ids, client_ids):
        seen_rows.append(len(request_ids))
        assert logits.shape == (len(request_ids), 512) and len(token_ids) == len(request_ids)
        for r in range(len(request_ids)):
            for t in range(logits.shape[1]):
                logits[r, t] = -1e30
            logits[r, 200 + (client_ids[r] % 10)] = 0.0

    with inflight.LLM(STORIES, n_threads=1, batched_logits_processor=batched) as m:
        sps = [SamplingParams(max_tokens=6, temperature=0.7, seed=i, client_id=i,
                              apply_batched_logits_processor=True) for i in range(3)]
        outs = m.generate(["Once upon a time"] * 3, sps)
        assert [o.outputs[0].token_ids for o in outs] == [[200 + i] * 6 for i in range(3)]
        assert max(seen_rows) >= 2  # rows of several requests in one call
        with pytest.raises(ValueError, match="apply_batched_logits_processor"):
            SamplingParams(apply_batched_logits_processor=True, logits_processor="x")


def _slow(request_id, logits, token_ids, client_id):
    import time
    time.sleep(0.02)


def test_time_limit_ends_as_timeout():
    with inflight.LLM(STORIES, n_threads=1, logits_processors={"slow": _slow}) as m:
        o = m.generate("Once", SamplingParams(max_tokens=100, ignore_eos=True, temperature=0,
                                              allotted_time_ms=200,
                                              logits_processor="slow"))[0].outputs[0]
        assert o.finish_reason == "timeout"
        assert 0 < len(o.token_ids) < 100


def test_return_all_generated_tokens_streams_whole_texts(llm):
    whole = llm.generate("Once upon a time", SamplingParams(max_tokens=20, temperature=0))[0]
    r = llm.generate_async("Once upon a time",
                           SamplingParams(max_tokens=20, temperature=0,
                                          return_all_generated_tokens=True), streaming=True)
    lens = []
    for step in r:
        o = step.outputs[0]
        lens.append(len(o.token_ids))
        assert o.token_ids == whole.outputs[0].token_ids[:len(o.token_ids)]
    assert lens == sorted(lens) and lens[-1] == 20
    assert r.outputs[0].text == whole.outputs[0].text


def test_client_drafts_keep_outputs_exact(llm):
    plain = llm.generate("Once upon a time", SamplingParams(max_tokens=40, **GREEDY_PARAMS))[0]
    before = llm.get_latest_stats()
    sp = SamplingParams(max_tokens=40, **GREEDY_PARAMS, logprobs=0,
                        speculative=inflight.SpeculativeParams(draft_tokens=GREEDY[:40]))
    spec = llm.generate("Once upon a time", sp)[0]
    assert spec.outputs[0].token_ids == plain.outputs[0].token_ids
    after = llm.get_latest_stats()
    assert after["accepted_draft_tokens"] - before["accepted_draft_tokens"] > 10
    text = llm.tokenizer.decode(GREEDY[:40])
    sp.speculative = inflight.SpeculativeParams(draft_tokens=text)
    assert llm.generate("Once upon a time", sp)[0].outputs[0].token_ids == GREEDY[:40]
