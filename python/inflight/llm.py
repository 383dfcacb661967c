"""LLM: TensorRT-LLM's high-level API (LLM(model).generate(...)) over
GenerationExecutor, taking prompts as text or token ids."""

from __future__ import annotations

import json
import os

from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

from .executor import (GenerationExecutor, GenerationRequest, GenerationResult, LoRARequest,
                       LoRASpec, RequestOutput, _per_prompt, _wait_all)
from .sampling_params import SamplingParams

__all__ = ["LLM", "Tokenizer"]

Prompt = Union[str, Sequence[int]]


class Tokenizer:
    """The model's own tokenizer (from its GGUF metadata)."""

    def __init__(self, executor: GenerationExecutor):
        self._core = executor._core
        info = executor.model_info
        self.vocab_size: int = info["n_vocab"]
        self.bos_token_id: Optional[int] = info["bos_id"] if info["bos_id"] >= 0 else None
        self.eos_token_id: int = info["eos_id"]

    def encode(self, text: str, add_special_tokens: bool = True,
               parse_special: bool = False) -> List[int]:
        """Token ids of text; add_special_tokens adds BOS (and EOS) as the
        model's metadata asks; parse_special turns special-token text such
        as "<|im_start|>" into those tokens."""
        if not isinstance(text, str):
            raise TypeError(f"text: expected a str, got {type(text).__name__}")
        return self._core.tokenize(text, add_special_tokens, parse_special)

    def apply_chat_template(self, conversation: Sequence[Dict[str, Any]],
                            add_generation_prompt: bool = False, tokenize: bool = False,
                            chat_template: Optional[str] = None, tools: Optional[list] = None,
                            documents: Optional[list] = None, **kwargs: Any):
        """A conversation rendered as transformers' apply_chat_template
        renders it: with the model's tokenizer.chat_template (ChatML when
        it has none), or chat_template's text. Extra keyword arguments are
        template variables; bos_token and eos_token default to the
        model's. tokenize=True returns the token ids (special-token text
        parsed, BOS added unless the text begins with it). A template that
        refuses the conversation raises ValueError with its message."""
        ctx = dict(kwargs)
        ctx["messages"] = list(conversation)
        ctx["add_generation_prompt"] = bool(add_generation_prompt)
        ctx["tools"] = tools
        ctx["documents"] = documents
        text = self._core.apply_chat_template(json.dumps(ctx), chat_template)
        return self._chat_ids(text) if tokenize else text

    def _chat_ids(self, text: str) -> List[int]:
        bos = self.decode([self.bos_token_id], skip_special_tokens=False) \
            if self.bos_token_id is not None else ""
        add = not (bos and text.startswith(bos))
        return self._core.tokenize(text, add, True)

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """The text of token ids (control tokens left out when
        skip_special_tokens). A SentencePiece vocabulary's word-start
        marker is a space, so a text that began with a word decodes with a
        space in front, as llama.cpp's detokenizer gives it."""
        return self._core.detokenize(list(token_ids), not skip_special_tokens)


def _is_ids(p: Any) -> bool:
    return isinstance(p, (list, tuple)) and all(isinstance(t, int) and not isinstance(t, bool)
                                                for t in p)


def _per_prompt_lora(spec, n: int) -> List[LoRASpec]:
    if spec is None or isinstance(spec, LoRARequest):
        return [spec] * n
    specs = list(spec)
    if len(specs) != n:
        raise ValueError(f"lora_request: one LoRARequest for all, or a list of {n} (one per "
                         "prompt)")
    return specs


def _image_bytes(x: Any, i: int) -> bytes:
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    if isinstance(x, (str, os.PathLike)):
        with open(x, "rb") as f:
            return f.read()
    raise ValueError(f"multi_modal_data['image'][{i}]: expected PNG/JPEG bytes or a file path")


class LLM:
    """A model served by an in-flight batching executor.

    LLM(model, **executor_config): model is a GGUF file; the options are
    GenerationExecutor's (n_threads, max_batch_size, n_ctx, kv_type,
    mmproj_path for images, ...). A prompt may be a dict with
    multi_modal_data={"image": ...} (see _mm_request).
    Use it as a context manager, or call shutdown().
    """

    def __init__(self, model: str, **executor_config: Any):
        self._executor = GenerationExecutor(model, **executor_config)
        self.tokenizer = Tokenizer(self._executor)

    @property
    def executor(self) -> GenerationExecutor:
        return self._executor

    def _mm_request(self, prompt: Dict[str, Any], sp: SamplingParams, streaming: bool,
                    lora: LoRASpec) -> GenerationRequest:
        """A prompt dict with multi_modal_data={"image": one or a list}: each
        image PNG/JPEG bytes or a file path, or {"embd": float32 rows,
        "n_rows": n} (embedding rows given as they are). With "prompt" text,
        each <__media__> marks the next image's place (none: the images go
        before the text); with "prompt_token_ids", "image_positions" gives
        each image's first placeholder index."""
        imgs = prompt["multi_modal_data"].get("image")
        if imgs is None:
            raise ValueError("multi_modal_data: only 'image' is supported")
        if not isinstance(imgs, (list, tuple)):
            imgs = [imgs]
        ins = [dict(x) if isinstance(x, dict) else {"data": _image_bytes(x, i)}
               for i, x in enumerate(imgs)]
        if "prompt_token_ids" in prompt:
            pos = list(prompt.get("image_positions") or [])
            if len(pos) != len(ins):
                raise ValueError(f"image_positions: {len(pos)} positions for {len(ins)} images")
            ids, text = list(prompt["prompt_token_ids"]), None
        elif isinstance(prompt.get("prompt"), str):
            if any("embd" in x for x in ins):
                raise ValueError("multi_modal_data: embedding rows need prompt_token_ids and "
                                 "image_positions")
            text = prompt["prompt"]
            ex = self._executor
            rows = []
            for x in ins:  # from each header; one that does not read fails at submit
                try:
                    rows.append(ex.image_rows(x["data"]))
                except ValueError:
                    rows.append(max(1, ex.image_tokens))
            ids, pos = ex.tokenize_images(text, len(ins), sp.add_special_tokens, rows=rows)
        else:
            raise ValueError("prompt: with multi_modal_data, give 'prompt' (text) or "
                             "'prompt_token_ids' and 'image_positions'")
        for x, p in zip(ins, pos):
            x["pos"] = int(p)
        return GenerationRequest(ids, sp, streaming, prompt=text, lora_request=lora, images=ins)

    def _request(self, prompt: Prompt, sp: SamplingParams, streaming: bool,
                 lora: LoRASpec = None) -> GenerationRequest:
        if isinstance(prompt, dict) and prompt.get("multi_modal_data"):
            return self._mm_request(prompt, sp, streaming, lora)
        if isinstance(prompt, str):
            ids = self.tokenizer.encode(prompt, add_special_tokens=sp.add_special_tokens)
            return GenerationRequest(ids, sp, streaming, prompt=prompt, lora_request=lora)
        if isinstance(prompt, dict):
            if "prompt_token_ids" in prompt:
                return GenerationRequest(list(prompt["prompt_token_ids"]), sp, streaming,
                                         lora_request=lora)
            if "prompt" in prompt:
                return self._request(prompt["prompt"], sp, streaming, lora)
        if _is_ids(prompt):
            return GenerationRequest(list(prompt), sp, streaming, lora_request=lora)
        raise ValueError("prompt: expected a str, a list of token ids, or a dict with 'prompt' "
                         "or 'prompt_token_ids'")

    def generate(self, inputs: Union[Prompt, Sequence[Prompt]],
                 sampling_params: Optional[Union[SamplingParams, Sequence[SamplingParams]]] = None,
                 lora_request: Optional[Union[LoRARequest, Sequence[LoRASpec]]] = None
                 ) -> List[RequestOutput]:
        """Generates for one prompt or many (text or token ids) in one
        batch and waits: a list of RequestOutput in the prompts' order.
        sampling_params: one for all, or one per prompt. lora_request: for
        one prompt, a LoRARequest, a list of them applied together, [] for
        the base alone, or None (the global scales); for several, one
        LoRARequest for all, or a list with one such entry per prompt.
        Ctrl-C aborts the requests still running."""
        if isinstance(inputs, (list, tuple)) and not inputs:
            return []
        single = isinstance(inputs, (str, dict)) or _is_ids(inputs)
        prompts = [inputs] if single else list(inputs)
        if not prompts:
            return []
        params = _per_prompt(sampling_params, len(prompts))
        # one prompt: lora_request is its own (a list is applied together);
        # several: one for all, or a list with an entry per prompt
        loras = [lora_request] if single else _per_prompt_lora(lora_request, len(prompts))
        reqs = [self._request(p, sp, False, lr) for p, sp, lr in zip(prompts, params, loras)]
        results = self._executor.submit_many(reqs)
        _wait_all(results)
        return list(results)

    def generate_async(self, inputs: Prompt, sampling_params: Optional[SamplingParams] = None,
                       streaming: bool = False,
                       lora_request: LoRASpec = None) -> GenerationResult:
        """Submits one prompt and returns at once: wait with result(),
        `await` it, or iterate it for streamed updates."""
        sp = sampling_params or SamplingParams()
        if not isinstance(sp, SamplingParams):
            raise ValueError("sampling_params: expected a SamplingParams")
        return self._executor.submit(self._request(inputs, sp, streaming, lora_request))

    def load_lora(self, path: str, name: Optional[str] = None, scale: float = 0.0) -> LoRARequest:
        """See GenerationExecutor.load_lora."""
        return self._executor.load_lora(path, name, scale)

    def unload_lora(self, lora) -> None:
        self._executor.unload_lora(lora)

    def set_lora_scale(self, lora, scale: float) -> None:
        self._executor.set_lora_scale(lora, scale)

    def list_loras(self) -> List[Dict[str, Any]]:
        return self._executor.list_loras()

    def chat(self, messages, sampling_params: Optional[Union[SamplingParams,
                                                             Sequence[SamplingParams]]] = None,
             chat_template: Optional[str] = None, add_generation_prompt: bool = True,
             **template_kwargs: Any) -> List[RequestOutput]:
        """Generates replies to one conversation (a list of {"role",
        "content"} messages) or a list of them: each rendered with the chat
        template (tokenizer.apply_chat_template), then generated as
        generate() does."""
        convs = [messages] if messages and isinstance(messages[0], dict) else list(messages)
        prompts = [{"prompt_token_ids": self.tokenizer.apply_chat_template(
            c, add_generation_prompt=add_generation_prompt, tokenize=True,
            chat_template=chat_template, **template_kwargs)} for c in convs]
        outs = self.generate(prompts, sampling_params)
        for o, c in zip(outs, convs):
            o.prompt = self.tokenizer.apply_chat_template(
                c, add_generation_prompt=add_generation_prompt, chat_template=chat_template,
                **template_kwargs)
        return outs

    def abort_request(self, request_id: int) -> bool:
        return self._executor.abort_request(request_id)

    def get_stats(self) -> Iterator[Dict[str, Any]]:
        """Yields each engine step's statistics since the previous call
        (see GenerationExecutor.get_stats)."""
        return self._executor.get_stats()

    def get_latest_stats(self) -> Dict[str, Any]:
        """The figures as of the engine's last step, KV memory and RSS
        measured now."""
        return self._executor.get_latest_stats()

    def shutdown(self) -> None:
        self._executor.shutdown()

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
