"""Images in the Python binding: multi_modal_data in LLM.generate (text
prompts with <__media__> markers, or token ids with image_positions), PNG
bytes or paths, embedding rows, the same image giving the same result as
its encoder rows, and bad images raising ValueError."""

import array
import os
import struct
import subprocess
import zlib

import pytest

import inflight
from conftest import BUILD, ROOT, STORIES

MKMODEL = os.path.join(ROOT, BUILD, "tools", "mkmodel")


def png(w, h, salt):
    raw = b"".join(b"\0" + bytes((x * 7 + y * 13 + c * 29 + salt * 71) % 256
                                 for x in range(w) for c in range(3)) for y in range(h))

    def chunk(t, b):
        return struct.pack(">I", len(b)) + t + b + struct.pack(">I", zlib.crc32(t + b) & 0xffffffff)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


@pytest.fixture(scope="module")
def mmproj(tmp_path_factory):
    p = str(tmp_path_factory.mktemp("mm") / "p64.gguf")
    subprocess.run([MKMODEL, "-o", p, "--mmproj", "--proj-dim", "64", "--seed", "5"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return p


@pytest.fixture(scope="module")
def vllm(mmproj):
    with inflight.LLM(STORIES, n_threads=2, kv_type="f32", mmproj_path=mmproj) as m:
        yield m


GREEDY = inflight.SamplingParams(max_tokens=10, temperature=0, ignore_eos=True, logprobs=0)


def test_image_prompt(vllm, tmp_path):
    a, b = png(40, 30, 1), png(40, 30, 2)
    assert vllm.executor.image_tokens == 16
    text = "Once upon a time <__media__>"
    ra = vllm.generate({"prompt": text, "multi_modal_data": {"image": a}}, GREEDY)[0]
    path = tmp_path / "a.png"
    path.write_bytes(a)
    ra2 = vllm.generate({"prompt": text, "multi_modal_data": {"image": str(path)}}, GREEDY)[0]
    rb = vllm.generate({"prompt": text, "multi_modal_data": {"image": [b]}}, GREEDY)[0]
    assert len(ra.outputs[0].token_ids) == 10
    assert ra.outputs[0].token_ids == ra2.outputs[0].token_ids
    assert ra.outputs[0].token_ids != rb.outputs[0].token_ids
    # the prompt's ids: BOS, the text, 16 placeholders
    ids, pos = vllm.executor.tokenize_images(text, 1)
    assert len(ids) == len(vllm.tokenizer.encode("Once upon a time ")) + 16
    assert pos == [len(ids) - 16]
    # the same through token ids and positions
    rt = vllm.generate({"prompt_token_ids": ids, "image_positions": pos,
                        "multi_modal_data": {"image": a}}, GREEDY)[0]
    assert rt.outputs[0].token_ids == ra.outputs[0].token_ids


def test_embedding_rows(vllm):
    """Rows given as they are: the same rows give the same result, other
    rows another; a wrong size or an image without an encoder raise."""
    ids, pos = vllm.executor.tokenize_images("A story <__media__> about", 1)
    sp = inflight.SamplingParams(max_tokens=8, temperature=0, ignore_eos=True, logprobs=0)
    e1 = array.array("f", [((i * 37) % 101) / 50.0 - 1 for i in range(16 * 64)])
    e2 = array.array("f", [((i * 41) % 103) / 50.0 - 1 for i in range(16 * 64)])
    with inflight.LLM(STORIES, n_threads=1, kv_type="f32") as plain:
        outs = [plain.generate({"prompt_token_ids": ids, "image_positions": pos,
                                "multi_modal_data": {"image": {"embd": e, "n_rows": 16}}},
                               sp)[0].outputs[0] for e in (e1, e2, e1.tobytes())]
        assert outs[0].token_ids == outs[2].token_ids
        assert outs[0].cumulative_logprob == outs[2].cumulative_logprob
        assert outs[0].cumulative_logprob != outs[1].cumulative_logprob
        with pytest.raises(ValueError, match="n_rows"):
            plain.generate({"prompt_token_ids": ids, "image_positions": pos,
                            "multi_modal_data": {"image": {"embd": e1, "n_rows": 15}}}, sp)
        with pytest.raises(ValueError, match="no vision encoder"):
            plain.generate({"prompt_token_ids": ids, "image_positions": pos,
                            "multi_modal_data": {"image": png(8, 8, 1)}}, sp)


def test_bad_images(vllm):
    sp = inflight.SamplingParams(max_tokens=4, temperature=0)
    with pytest.raises(ValueError, match=r"images\[0\]"):
        vllm.generate({"prompt": "x <__media__>", "multi_modal_data": {"image": b"not an image"}},
                      sp)
    with pytest.raises(ValueError, match="marks 2 image places"):
        vllm.generate({"prompt": "<__media__> <__media__>",
                       "multi_modal_data": {"image": png(8, 8, 1)}}, sp)
    with pytest.raises(ValueError, match="image_positions"):
        vllm.generate({"prompt_token_ids": [1, 2, 3], "multi_modal_data": {"image": png(8, 8, 1)}},
                      sp)
    # still serving
    r = vllm.generate({"prompt": "Once <__media__>", "multi_modal_data": {"image": png(9, 9, 3)}},
                      sp)[0]
    assert len(r.outputs[0].token_ids) >= 1


def test_internvl_tiles(tmp_path):
    """An InternVL mmproj with a qwen2 text model: an image's placeholder
    count follows its size (tiles), the text prompt gets them and the
    <img> markers, and the same through token ids and positions."""
    q = str(tmp_path / "qwen2.gguf")
    p = str(tmp_path / "ivl.gguf")
    vocab = os.path.join(os.path.dirname(STORIES), "vocab", "ggml-vocab-qwen2.gguf")
    subprocess.run([MKMODEL, "-o", q, "--vocab", vocab, "--arch", "qwen2", "--n-embd", "64",
                    "--n-layer", "1", "--n-head", "2", "--n-head-kv", "1", "--n-ff", "128",
                    "--type", "f32", "--seed", "1"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run([MKMODEL, "-o", p, "--mmproj", "--projector", "internvl", "--proj-dim", "64",
                    "--seed", "5"], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    with inflight.LLM(q, n_threads=2, kv_type="f32", mmproj_path=p) as m:
        ex = m.executor
        big, small = png(70, 40, 1), png(20, 20, 2)
        assert ex.image_tokens == 4
        assert ex.image_rows(big) == 28 and ex.image_rows(small) == 4
        with pytest.raises(ValueError, match="give n_rows"):
            ex.tokenize_images("a <__media__>", 1)
        text = "Look <__media__> here"
        ids, pos = ex.tokenize_images(text, 1, rows=[28])
        img = m.tokenizer.encode("<img>", add_special_tokens=False, parse_special=True)
        assert ids[pos[0] - len(img):pos[0]] == img
        r = m.generate({"prompt": text, "multi_modal_data": {"image": big}}, GREEDY)[0]
        rt = m.generate({"prompt_token_ids": ids, "image_positions": pos,
                         "multi_modal_data": {"image": big}}, GREEDY)[0]
        assert len(r.outputs[0].token_ids) == 10
        assert r.outputs[0].token_ids == rt.outputs[0].token_ids
        with pytest.raises(ValueError, match="its 28 rows at position"):
            ids4, pos4 = ex.tokenize_images(text, 1, rows=[4])
            m.generate({"prompt_token_ids": ids4, "image_positions": pos4,
                        "multi_modal_data": {"image": big}}, GREEDY)


def test_vision_precision(tmp_path):
    """vision_precision by name: "bf16" rounds an F16 encoder's products to
    BF16 where the CPU has AVX-512 BF16 (another embedding, so other
    log-probs), changes nothing elsewhere; an unknown name raises."""
    p = str(tmp_path / "f16.gguf")
    subprocess.run([MKMODEL, "-o", p, "--mmproj", "--proj-dim", "64", "--seed", "6", "--type",
                    "f16"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with pytest.raises(ValueError, match="vision_precision"):
        inflight.LLM(STORIES, n_threads=1, mmproj_path=p, vision_precision="fp8")
    req = {"prompt": "Once upon a time <__media__>", "multi_modal_data": {"image": png(40, 30, 3)}}
    got = {}
    for prec in ("f32", "bf16"):
        with inflight.LLM(STORIES, n_threads=1, kv_type="f32", mmproj_path=p,
                          vision_precision=prec) as m:
            got[prec] = m.generate(req, GREEDY)[0].outputs[0]
            assert len(got[prec].token_ids) == 10
    with open("/proc/cpuinfo") as f:
        bf16_cpu = " avx512_bf16" in f.read()
    if bf16_cpu and not os.environ.get("IFL_KERNELS"):
        assert got["f32"].cumulative_logprob != got["bf16"].cumulative_logprob
    elif not bf16_cpu:
        assert got["f32"].cumulative_logprob == got["bf16"].cumulative_logprob
