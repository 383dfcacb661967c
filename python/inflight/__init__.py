"""inflight: an in-flight batching LLM executor for CPUs, from Python.

    from inflight import LLM, SamplingParams
    with LLM("model.gguf") as llm:
        for out in llm.generate(["Once upon a time"], SamplingParams(max_tokens=32)):
            print(out.outputs[0].text)

The API follows TensorRT-LLM's LLM and GenerationExecutor; see
python/README.md.
"""

from . import _core
from .executor import (CompletionOutput, FloatRows, GenerationExecutor, GenerationRequest,
                       GenerationResult, LoRARequest, QueueFullError, RequestError, RequestOutput)
from .llm import LLM, Tokenizer
from .sampling_params import GuidedDecodingParams, SamplingParams, SpeculativeParams

__version__ = _core.version()

__all__ = [
    "LLM", "Tokenizer", "SamplingParams", "GuidedDecodingParams", "SpeculativeParams",
    "GenerationExecutor", "GenerationRequest", "GenerationResult", "RequestOutput",
    "CompletionOutput", "FloatRows", "RequestError", "LoRARequest", "QueueFullError", "__version__",
]
