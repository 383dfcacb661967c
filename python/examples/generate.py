"""The synchronous LLM API: several prompts in one batch, then one
streamed.

    make python
    PYTHONPATH=python python3 python/examples/generate.py ../shared/models/stories260K.gguf
"""

import sys

from inflight import LLM, SamplingParams


def main(model: str) -> None:
    with LLM(model, max_batch_size=8) as llm:
        prompts = ["Once upon a time", "The little dog", "Tom and Sue went"]
        params = SamplingParams(max_tokens=40, temperature=0.8, top_p=0.95, seed=1)
        for out in llm.generate(prompts, params):
            c = out.outputs[0]
            print(f"{out.prompt!r} -> {c.text!r} ({len(c.token_ids)} tokens, {c.finish_reason})")

        # streamed: each step carries what it added
        result = llm.generate_async("Once upon a time", SamplingParams(max_tokens=40,
                                                                       temperature=0),
                                    streaming=True)
        for step in result:
            print(step.outputs[0].text_diff, end="", flush=True)
        print()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "../shared/models/stories260K.gguf")
