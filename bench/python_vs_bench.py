#!/usr/bin/env python3
"""LLM.generate against `inflight bench` on the same work.

Both run C requests of P random prompt tokens (BOS first, distinct per
request, no prefix cache) generating exactly G tokens greedily, all
enqueued together, on an executor configured as bench configures its own
(max_batch_size C, KV for C * (P + G + 32) positions, n_ctx P + G). The
figure is total tokens/s, C * G / wall time of the wave: `inflight bench
-c C --json`'s total_tps, and LLM.generate's from its call to its return.
Rounds alternate which side runs first; the ratio is of the medians.

    make python
    PYTHONPATH=python python3 bench/python_vs_bench.py MODEL.gguf [-c 64] [-p 128] [-n 64]
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

from inflight import LLM, SamplingParams  # noqa: E402


def bench_round(args):
    out = subprocess.run([args.inflight, "bench", "-m", args.model, "-c", str(args.c), "-p",
                          str(args.p), "-n", str(args.n), "-r", "1", "-t", str(args.t),
                          "--json"], capture_output=True, text=True, check=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return [r for r in rows if r.get("test") == "batched"][-1]["total_tps"]


def python_round(llm, args, rng):
    info = llm.executor.model_info
    prompts = []
    for _ in range(args.c):
        p = [rng.randrange(info["n_vocab"]) for _ in range(args.p)]
        if info["bos_id"] >= 0:
            p[0] = info["bos_id"]
        prompts.append(p)
    sp = SamplingParams(max_tokens=args.n, temperature=0.0, ignore_eos=True)
    t0 = time.perf_counter()
    outs = llm.generate(prompts, sp)
    dt = time.perf_counter() - t0
    assert all(len(o.outputs[0].token_ids) == args.n for o in outs)
    return args.c * args.n / dt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("-c", type=int, default=64)
    ap.add_argument("-p", type=int, default=128)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--inflight", default=os.path.join(ROOT, "build", "inflight"))
    args = ap.parse_args()
    rng = random.Random(1)
    with LLM(args.model, n_threads=args.t, max_batch_size=args.c, n_ctx=args.p + args.n,
             kv_cache_tokens=args.c * (args.p + args.n + 32), enable_prefix_caching=False) as llm:
        python_round(llm, argparse.Namespace(**{**vars(args), "c": 1}), rng)  # warm up
        py, cb = [], []
        for r in range(args.rounds):
            if r % 2 == 0:
                cb.append(bench_round(args))
                py.append(python_round(llm, args, rng))
            else:
                py.append(python_round(llm, args, rng))
                cb.append(bench_round(args))
            print(f"round {r + 1}: inflight bench {cb[-1]:.1f} tok/s, LLM.generate "
                  f"{py[-1]:.1f} tok/s", flush=True)
    mp, mc = statistics.median(py), statistics.median(cb)
    print(f"| {os.path.basename(args.model)} | c={args.c} p={args.p} n={args.n} t={args.t} | "
          f"{mc:.1f} | {mp:.1f} | {mp / mc:.3f} |")


if __name__ == "__main__":
    main()
