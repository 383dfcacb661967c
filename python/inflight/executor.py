"""GenerationExecutor and GenerationResult: TensorRT-LLM's executor layer
over the C executor (include/inflight.h).

One background thread per executor waits in the C executor with the GIL
released and hands each response to its request's GenerationResult: to a
queue that result(), iteration and `await` read, waking any thread or
asyncio task waiting on it (asyncio through loop.call_soon_threadsafe).
Nothing polls.
"""

from __future__ import annotations

import array
import asyncio
import atexit
import collections
import collections.abc
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from . import _core
from .sampling_params import _FINISH, SamplingParams, _py_message

__all__ = [
    "CompletionOutput", "RequestOutput", "FloatRows", "GenerationRequest", "GenerationResult",
    "GenerationExecutor", "RequestError", "QueueFullError", "LoRARequest",
]

QueueFullError = _core.QueueFullError


class RequestError(RuntimeError):
    """A request the executor accepted but could not finish (the message
    says why), or one whose executor shut down before its end."""


class FloatRows(collections.abc.Sequence):
    """Rows of float32 values (logits, hidden states) without a copy:
    rows[i] is a 1-D memoryview of row i, len(rows) the row count, shape
    (rows, cols); tolist() gives nested lists, and numpy.asarray(rows)
    a [rows][cols] float32 array on the same memory."""

    def __init__(self, data: bytes, cols: int):
        self._mv = memoryview(data).cast("B").cast("f")
        self.cols = cols
        self.shape = (len(self._mv) // cols if cols else 0, cols)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("row index out of range")
        return self._mv[i * self.cols:(i + 1) * self.cols]

    def tolist(self) -> List[List[float]]:
        return [self[i].tolist() for i in range(len(self))]

    @property
    def memoryview(self) -> memoryview:
        """A 2-D memoryview (index it as m[i, j])."""
        return self._mv.cast("B").cast("f", self.shape)

    @property
    def __array_interface__(self) -> Dict[str, Any]:
        return {"shape": self.shape, "typestr": "<f4", "data": self._mv, "version": 3}

    def __repr__(self) -> str:
        return f"FloatRows(shape={self.shape})"


def _floats(b: Optional[bytes], cols: int) -> Optional[FloatRows]:
    return None if b is None else FloatRows(b, cols)


@dataclass
class CompletionOutput:
    """One sequence of a request: a sample (of n) or a beam hypothesis.

    text and token_ids hold everything generated so far; text_diff,
    token_ids_diff and logprobs_diff what the latest update added (what a
    streaming consumer prints). logprobs: each generated token's
    log-probability (SamplingParams.logprobs not None); top_logprobs: per
    token, the k most likely (token id, log-prob) pairs (logprobs=k).
    finish_reason: None while running, then "stop", "length", "timeout" or
    "cancelled"; stop_reason: the end token id, the stop string, or the
    stop token sequence that ended it.
    """

    index: int
    text: str = ""
    token_ids: List[int] = field(default_factory=list)
    cumulative_logprob: Optional[float] = None
    logprobs: Optional[List[float]] = None
    top_logprobs: Optional[List[List[Tuple[int, float]]]] = None
    finish_reason: Optional[str] = None
    stop_reason: Optional[Union[int, str, Tuple[int, ...]]] = None
    score: Optional[float] = None
    generation_logits: Optional["FloatRows"] = None
    hidden_states: Optional["FloatRows"] = None
    _last_text_len: int = field(default=0, repr=False)
    _last_token_ids_len: int = field(default=0, repr=False)
    _last_logprobs_len: int = field(default=0, repr=False)
    _gen_logits: Optional[bytearray] = field(default=None, repr=False)
    _hidden: Optional[bytearray] = field(default=None, repr=False)

    @property
    def length(self) -> int:
        return len(self.token_ids)

    @property
    def text_diff(self) -> str:
        return self.text[self._last_text_len:]

    @property
    def token_ids_diff(self) -> List[int]:
        return self.token_ids[self._last_token_ids_len:]

    @property
    def logprobs_diff(self) -> List[float]:
        return (self.logprobs or [])[self._last_logprobs_len:]

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def _mark(self) -> None:
        self._last_text_len = len(self.text)
        self._last_token_ids_len = len(self.token_ids)
        self._last_logprobs_len = len(self.logprobs or [])


class RequestOutput:
    """What a request produced: outputs (one CompletionOutput per sample or
    beam), the prompt, and the outputs asked for with it."""

    def __init__(self, request_id: int, prompt: Optional[str], prompt_token_ids: List[int]):
        self.request_id = request_id
        self.prompt = prompt
        self.prompt_token_ids = prompt_token_ids
        self.outputs: List[CompletionOutput] = []
        self.finished = False
        self.context_logits: Optional[FloatRows] = None
        self.context_hidden_states: Optional[FloatRows] = None
        self.prompt_logprobs: Optional[List[Any]] = None
        self.metrics: Optional[Dict[str, int]] = None

    def __repr__(self) -> str:
        return (f"RequestOutput(request_id={self.request_id}, prompt={self.prompt!r}, "
                f"outputs={self.outputs!r}, finished={self.finished})")


@dataclass
class LoRARequest:
    """A LoRA adapter for a request (TensorRT-LLM's LoRARequest): by
    lora_int_id when it is registered, else by lora_name, else loaded from
    lora_path (registered as lora_name) at its first use. scale is the
    user scale s of W x + s * alpha / rank * B (A x)."""

    lora_name: str = ""
    lora_int_id: int = 0
    lora_path: str = ""
    scale: float = 1.0

    @property
    def adapter_id(self) -> int:
        return self.lora_int_id


LoRASpec = Union[None, LoRARequest, Sequence[LoRARequest]]


@dataclass
class GenerationRequest:
    """A prompt (token ids; prompt keeps its text for the output when it
    came as text), its sampling parameters, whether to stream, and its
    LoRA adapters: None for the executor's global scales (none unless an
    adapter was loaded with one), a LoRARequest, a list of them (applied
    together), or an empty list for the base model alone."""

    prompt_token_ids: List[int]
    sampling_params: SamplingParams = field(default_factory=SamplingParams)
    streaming: bool = False
    prompt: Optional[str] = None
    id: Optional[int] = None  # set by submit
    lora_request: LoRASpec = None
    # images: [{"data": PNG/JPEG bytes, "pos": i} or {"embd": float32 bytes
    # of n_rows x n_embd, "n_rows": n, "pos": i}], each standing for the
    # placeholder tokens prompt_token_ids[pos : pos + rows] (the C API's
    # struct ifl_image_input; LLM.generate builds them from
    # multi_modal_data)
    images: Optional[List[Dict[str, Any]]] = None


def _wake(fut: "asyncio.Future[None]") -> None:
    if not fut.done():
        fut.set_result(None)


class GenerationResult(RequestOutput):
    """A request in flight. Wait for it with result(timeout), `await` it
    (or aresult()), or iterate it (for / async for) to get each streamed
    update: every step yields this object with outputs[i].text_diff and
    token_ids_diff holding what that update added. abort() cancels it: it
    then ends with finish_reason "cancelled". Thread-safe."""

    def __init__(self, executor: "GenerationExecutor", request: GenerationRequest):
        super().__init__(request.id or 0, request.prompt, list(request.prompt_token_ids))
        self._executor = executor
        self._params = request.sampling_params
        self.streaming = request.streaming
        self._cond = threading.Condition()
        self._queue: Deque[Optional[Dict[str, Any]]] = collections.deque()
        self._waiters: List[Tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]] = []
        self._final_received = False
        self._consume = threading.Lock()
        self._error: Optional[BaseException] = None
        n = self._params._n_samples() if self._params._beam_width() == 1 else 0
        self.outputs = [CompletionOutput(index=i) for i in range(n)]

    @property
    def sampling_params(self) -> SamplingParams:
        return self._params

    # ------------------------------------------------ the response thread
    def _push(self, resp: Optional[Dict[str, Any]]) -> None:
        """Called on the executor's response thread (None: the executor
        ended before this request's final response)."""
        with self._cond:
            self._queue.append(resp)
            if resp is None or resp["is_final"]:
                self._final_received = True
            self._cond.notify_all()
            waiters, self._waiters = self._waiters, []
        for loop, fut in waiters:
            try:
                loop.call_soon_threadsafe(_wake, fut)
            except RuntimeError:
                pass  # that loop is closed: nobody waits there any more

    # ------------------------------------------------------ the consumer
    def done(self) -> bool:
        """True once the final response has arrived (result() then returns
        without waiting)."""
        return self._final_received

    def abort(self) -> None:
        """Cancels the request; it ends soon with finish_reason "cancelled"
        (already finished: nothing happens)."""
        self._executor.abort_request(self.request_id)

    @property
    def cancelled(self) -> bool:
        return bool(self.outputs) and all(o.finish_reason == "cancelled" for o in self.outputs)

    def _take(self, timeout: Optional[float]) -> Optional[Dict[str, Any]]:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._queue:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"request {self.request_id}: no response within "
                                       f"{timeout} s (it goes on)")
                self._cond.wait(left)
            return self._queue.popleft()

    def _step(self, timeout: Optional[float]) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._consume.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            raise TimeoutError(f"request {self.request_id}: busy consumer")
        try:
            if self.finished:
                return
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._apply(self._take(left))
        finally:
            self._consume.release()

    def result(self, timeout: Optional[float] = None) -> "GenerationResult":
        """Waits until the request is over and returns this object.
        TimeoutError after timeout seconds (the request goes on);
        RequestError if the executor failed it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.finished:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"request {self.request_id}: not finished within {timeout} s "
                                   "(it goes on)")
            self._step(left)
        if self._error is not None:
            raise self._error
        return self

    async def _atake(self) -> Optional[Dict[str, Any]]:
        loop = asyncio.get_running_loop()
        while True:
            with self._cond:
                if self._queue:
                    return self._queue.popleft()
                fut = loop.create_future()
                self._waiters.append((loop, fut))
            try:
                await fut
            finally:
                if not fut.done():
                    with self._cond:
                        if (loop, fut) in self._waiters:
                            self._waiters.remove((loop, fut))

    async def _astep(self) -> None:
        resp = await self._atake()
        self._apply(resp)

    async def aresult(self) -> "GenerationResult":
        """result() for asyncio: waits without blocking the event loop."""
        while not self.finished:
            await self._astep()
        if self._error is not None:
            raise self._error
        return self

    def __await__(self):
        return self.aresult().__await__()

    def __iter__(self):
        return self

    def __next__(self) -> "GenerationResult":
        if self.finished:
            if self._error is not None:
                raise self._error
            raise StopIteration
        self._step(None)
        if self._error is not None:
            raise self._error
        return self

    def __aiter__(self):
        return self

    async def __anext__(self) -> "GenerationResult":
        if self.finished:
            if self._error is not None:
                raise self._error
            raise StopAsyncIteration
        await self._astep()
        if self._error is not None:
            raise self._error
        return self

    # ------------------------------------------------ applying a response
    def _apply(self, resp: Optional[Dict[str, Any]]) -> None:
        for o in self.outputs:
            o._mark()
        if resp is None:
            self._error = RequestError(f"request {self.request_id}: the executor shut down "
                                       "before it finished")
            self.finished = True
            return
        if resp["status"] != 0:
            self._error = RequestError(f"request {self.request_id}: {resp['error']}")
        p = self._params
        if p.return_perf_metrics:
            self.metrics = resp["perf"]
        if "context_logits" in resp:
            n_vocab = resp["n_vocab"]
            if p.return_context_logits:
                self.context_logits = _floats(resp["context_logits"], n_vocab)
            if p.prompt_logprobs is not None:
                self.prompt_logprobs = _core.prompt_logprobs(
                    resp["context_logits"], n_vocab, self.prompt_token_ids, p.prompt_logprobs)
        if resp.get("context_hidden_states") is not None and p.return_hidden_states:
            self.context_hidden_states = _floats(resp["context_hidden_states"], resp["n_embd"])
        results = resp["results"]
        if p._beam_width() > 1:
            # one final response with every hypothesis, best first
            self.outputs = [CompletionOutput(index=i) for i in range(len(results))]
            for i, r in enumerate(results):
                self._merge(self.outputs[i], r, resp, replace=True)
        elif results:
            idx = resp["sequence_index"]
            while len(self.outputs) <= idx:
                self.outputs.append(CompletionOutput(index=len(self.outputs)))
            replace = (self.streaming and p.return_all_generated_tokens)
            self._merge(self.outputs[idx], results[0], resp, replace=replace)
        if resp["is_final"]:
            if not self.outputs and resp["status"] == 0:
                self._error = RequestError(f"request {self.request_id}: ended with no output")
            if len(self.outputs) > p.n:
                # best_of: the n most likely samples, renumbered
                best = sorted(self.outputs, key=lambda o: -(o.cumulative_logprob or 0.0))[:p.n]
                for i, o in enumerate(best):
                    o.index = i
                self.outputs = best
            self.finished = True

    def _merge(self, o: CompletionOutput, r: Dict[str, Any], resp: Dict[str, Any],
               replace: bool) -> None:
        p = self._params
        toks = r["tokens"]
        text = r["text"] if p.detokenize else ""
        if replace:
            o.token_ids = list(toks)
            o.logprobs = list(r["log_probs"]) if "log_probs" in r else o.logprobs
            o.top_logprobs = list(r["top_log_probs"]) if "top_log_probs" in r else o.top_logprobs
        else:
            o.token_ids.extend(toks)
            if "log_probs" in r:
                o.logprobs = (o.logprobs or []) + r["log_probs"]
            if "top_log_probs" in r:
                o.top_logprobs = (o.top_logprobs or []) + r["top_log_probs"]
        # a beam hypothesis comes whole; otherwise the text is always what
        # this response added (return_all_generated_tokens repeats tokens only)
        o.text = text if p._beam_width() > 1 else o.text + text
        if "generation_logits" in r:
            if replace or o._gen_logits is None:
                o._gen_logits = bytearray()
            o._gen_logits += r["generation_logits"]
            o.generation_logits = _floats(bytes(o._gen_logits), resp["n_vocab"])
        if "hidden_states" in r:
            if replace or o._hidden is None:
                o._hidden = bytearray()
            o._hidden += r["hidden_states"]
            o.hidden_states = _floats(bytes(o._hidden), resp["n_embd"])
        o.cumulative_logprob = r["cum_log_prob"]
        if p._beam_width() > 1:
            o.score = r["score"]
        fr = r["finish_reason"]
        if fr and (resp["is_sequence_final"] or resp["is_final"]):
            o.finish_reason = _FINISH.get(fr, "stop")
            o.stop_reason = self._stop_reason(o, fr, r)
            if p.include_stop_str_in_output and isinstance(o.stop_reason, str):
                o.text += o.stop_reason
            if not p.exclude_input_from_output and o.index >= 0:
                # the prompt in front, as TensorRT-LLM returns it
                o.token_ids = self.prompt_token_ids + o.token_ids
                if p.detokenize:
                    o.text = (self.prompt if self.prompt is not None else
                              self._executor._detok(self.prompt_token_ids)) + o.text
                o._mark()

    def _stop_reason(self, o: CompletionOutput, fr: int, r: Dict[str, Any]):
        p = self._params
        if fr == _core.FINISH_END_ID:
            return r["end_token"] if r["end_token"] >= 0 else None
        if fr != _core.FINISH_STOP_WORDS:
            return None
        seqs = [[t] for t in (p.stop_token_ids or [])] + [list(w) for w in (p.stop_words or [])]
        for s in seqs:
            if len(s) <= len(o.token_ids) and o.token_ids[-len(s):] == s:
                return s[0] if len(s) == 1 else tuple(s)
        stops = [p.stop] if isinstance(p.stop, str) else list(p.stop or [])
        if stops:
            # generation stops at the first stop string: the earliest found
            full = self._executor._detok(o.token_ids)
            found = [(full.find(s), i) for i, s in enumerate(stops) if full.find(s) >= 0]
            if found:
                return stops[min(found)[1]]
        return None


_live: "weakref.WeakSet[GenerationExecutor]" = weakref.WeakSet()


@atexit.register
def _shutdown_all() -> None:
    for ex in list(_live):
        try:
            ex.shutdown()
        except Exception:  # noqa: BLE001 - at exit, each executor on its own
            pass


_KV_TYPES = {"f16": _core.KV_F16, "f32": _core.KV_F32, "q8_0": _core.KV_Q8_0}
_POLICIES = {"guaranteed_no_evict": _core.SCHED_GUARANTEED_NO_EVICT,
             "max_utilization": _core.SCHED_MAX_UTILIZATION}
_SPEC_TYPES = {"none": _core.SPEC_NONE, "draft": _core.SPEC_DRAFT, "ngram": _core.SPEC_NGRAM,
               "eagle3": _core.SPEC_EAGLE3}
_SPEC_ACCEPT = {"exact": _core.SPEC_ACCEPT_EXACT, "rejection": _core.SPEC_ACCEPT_REJECTION}
_VISION_PREC = {"f32": _core.VISION_PREC_F32, "bf16": _core.VISION_PREC_BF16}


def _named(field_name: str, v: Any, table: Dict[str, int]) -> int:
    if isinstance(v, str):
        if v.lower() not in table:
            raise ValueError(f"{field_name}: {v!r} is not one of {', '.join(table)}")
        return table[v.lower()]
    if isinstance(v, int) and not isinstance(v, bool) and v in table.values():
        return v
    raise ValueError(f"{field_name}: {v!r} is not one of {', '.join(table)}")


def _c_config(config: Dict[str, Any]) -> Dict[str, Any]:
    """Executor options (the C config's field names; kv_type, sched_policy,
    vision_precision and speculative's type/accept also by name) as inflight._core takes them."""
    c = dict(config)
    if "kv_type" in c:
        c["kv_type"] = _named("kv_type", c["kv_type"], _KV_TYPES)
    if "sched_policy" in c:
        c["sched_policy"] = _named("sched_policy", c["sched_policy"], _POLICIES)
    if "vision_precision" in c:
        c["vision_precision"] = _named("vision_precision", c["vision_precision"], _VISION_PREC)
    for k in ("enable_prefix_caching", "kv_prefault"):
        if k in c and isinstance(c[k], bool):
            c[k] = int(c[k])
    if "speculative" in c and c["speculative"] is not None:
        s = dict(c["speculative"])
        if "type" in s:
            s["type"] = _named("speculative.type", s["type"], _SPEC_TYPES)
        if "accept" in s:
            s["accept"] = _named("speculative.accept", s["accept"], _SPEC_ACCEPT)
        if "adaptive" in s and isinstance(s["adaptive"], bool):
            s["adaptive"] = int(s["adaptive"])
        c["speculative"] = s
    elif "speculative" in c:
        del c["speculative"]
    return c


class GenerationExecutor:
    """The C executor: in-flight batching of every submitted request in
    each forward pass.

    GenerationExecutor(model_path, **config): config takes the C
    executor's options by their names (n_threads, max_batch_size,
    max_num_tokens, max_queue_size, n_ctx, kv_cache_tokens, kv_cache_bytes,
    kv_block_size, kv_type, sched_policy, enable_prefix_caching,
    kv_cache_memory_share, kv_cache_memory_limit, kv_release_ms,
    kv_prefault, repack_cache_dir, repack_cache_max_bytes, speculative={type, draft_model, n_max,
    ...}, lora_cache_bytes, lora_type "f32" | "f16" | "q8_0", tp_emulate N:
    sum as a tensor parallel job of N ranks does, mmproj_path (a vision
    encoder: requests may carry images), vision_images_per_step,
    image_cache_bytes, vision_precision "f32" | "bf16"), plus
    lora=[path or (path, scale), ...]
    (adapters loaded at start, global scale 1 unless given),
    lora_modules={name: path} (loaded at start, applied only when named), logits_processors={name: fn(request_id, logits, token_ids,
    client_id)}, batched_logits_processor=fn(request_ids, logits [rows][vocab],
    token_id lists, client_ids) and load_progress=fn(done, total, stage, notice).
    """

    def __init__(self, model: str, **config: Any):
        lora = config.pop("lora", None) or []
        lora_modules = config.pop("lora_modules", None) or {}
        if isinstance(config.get("lora_type"), str):
            types = {"f32": 0, "f16": 1, "q8_0": 2}
            if config["lora_type"] not in types:
                raise ValueError(
                    "lora_type %r: want 'f32', 'f16' or 'q8_0'" % config["lora_type"])
            config["lora_type"] = types[config["lora_type"]]
        self._core = _core.Executor(str(model), _c_config(config))
        self.model_path = str(model)
        self._info = self._core.model_info()
        self._lock = threading.Lock()
        self._results: Dict[int, GenerationResult] = {}
        self._early: Dict[int, List[Dict[str, Any]]] = {}
        self._shut = False
        self._stats_after = 0
        self._thread = threading.Thread(target=self._loop, name="inflight-responses", daemon=True)
        self._thread.start()
        _live.add(self)
        try:
            for item in ([lora] if isinstance(lora, str) else lora):
                path, scale = (item, 1.0) if isinstance(item, str) else item
                self.load_lora(path, None, scale)
            for name, path in dict(lora_modules).items():
                self.load_lora(path, name, 0.0)
        except BaseException:
            self.shutdown()
            raise

    # -------------------------------------------------- the response thread
    def _loop(self) -> None:
        core = self._core
        while True:
            try:
                batch = core.await_responses(256)
            except Exception:  # noqa: BLE001 - a conversion failure must not end the thread
                continue
            if batch is None:
                break
            with self._lock:
                for resp in batch:
                    rid = resp["request_id"]
                    res = self._results.get(rid)
                    if res is None:
                        # submit has not registered it yet
                        self._early.setdefault(rid, []).append(resp)
                        continue
                    if resp["is_final"]:
                        del self._results[rid]
                    res._push(resp)
        # nothing more can come: whoever still waits hears so
        with self._lock:
            left, self._results = list(self._results.values()), {}
        for res in left:
            res._push(None)

    # ------------------------------------------------------------ requests
    def _tokenize(self, text: str, add_special: bool = False) -> List[int]:
        return self._core.tokenize(text, add_special, False)

    def _detok(self, ids: Sequence[int]) -> str:
        return self._core.detokenize(list(ids), False)

    def _images(self, images: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
        out = []
        n_embd = self._info["n_embd"]
        for i, im in enumerate(images):
            if not isinstance(im, dict):
                raise ValueError(f"images[{i}]: expected a dict with data or embd, and pos")
            im = dict(im)
            if "embd" in im:
                e = im["embd"]
                if not isinstance(e, (bytes, bytearray, memoryview)):
                    e = array.array("f", e).tobytes()  # a sequence of floats
                rows = int(im.get("n_rows", 0))
                if rows < 1 or len(e) != rows * n_embd * 4:
                    raise ValueError(f"images[{i}].embd: {len(e)} bytes, but n_rows {rows} x "
                                     f"n_embd {n_embd} float32 values are "
                                     f"{max(rows, 0) * n_embd * 4}")
                im["embd"] = bytes(e)
            out.append(im)
        return out

    @property
    def image_tokens(self) -> int:
        """Placeholder tokens each image stands for (the vision encoder's
        rows per image); 0 without an mmproj."""
        return self._info.get("image_tokens", 0)

    def image_rows(self, data: bytes) -> int:
        """Placeholder tokens a PNG/JPEG image takes, from its header: the
        vision encoder's rows per image, or for InternVL per tile, times
        its tiles."""
        try:
            return int(self._core.image_rows(bytes(data)))
        except ValueError as e:
            raise ValueError(_py_message(str(e))) from None

    def tokenize_images(self, text: str, n_images: int, add_special: bool = True,
                        marker: Optional[str] = None,
                        rows: Optional[Sequence[int]] = None) -> Tuple[List[int], List[int]]:
        """A prompt's token ids with each image's placeholders, and each
        image's first position: every <__media__> (or marker) in text is
        the next image's place; with none, the images go before the text.
        rows: each image's placeholder count (None: image_tokens each; an
        InternVL encoder needs them, see image_rows)."""
        try:
            ids, pos = self._core.tokenize_images(text, int(n_images), bool(add_special), marker,
                                                  None if rows is None else [int(r) for r in rows])
        except ValueError as e:
            raise ValueError(_py_message(str(e))) from None
        return list(ids), list(pos)

    def submit_many(self, requests: Sequence[GenerationRequest]) -> List[GenerationResult]:
        """Queues every request or, on any error, none (ValueError naming
        the field, QueueFullError when the queue is full)."""
        dicts = []
        for r in requests:
            if not isinstance(r.sampling_params, SamplingParams):
                raise ValueError("sampling_params: expected a SamplingParams")
            if isinstance(r.prompt_token_ids, (str, bytes)):
                raise ValueError("prompt_token_ids: expected token ids (LLM.generate takes text)")
            d = r.sampling_params._to_c(list(r.prompt_token_ids), bool(r.streaming),
                                        self._tokenize)
            if r.lora_request is not None:
                d["lora"] = self._lora_refs(r.lora_request)
            if r.images:
                d["images"] = self._images(r.images)
            dicts.append(d)
        try:
            ids = self._core.enqueue(dicts)
        except ValueError as e:
            raise ValueError(_py_message(str(e))) from None
        except RuntimeError as e:
            if isinstance(e, QueueFullError):
                raise
            raise RuntimeError(f"the executor is shut down: {e}") from None
        out = []
        with self._lock:
            for r, rid in zip(requests, ids):
                r.id = rid
                res = GenerationResult(self, r)
                for resp in self._early.pop(rid, []):
                    res._push(resp)
                if not res._final_received:
                    self._results[rid] = res
                out.append(res)
        return out

    def submit(self, request: GenerationRequest) -> GenerationResult:
        return self.submit_many([request])[0]

    # ---------------------------------------------------------- LoRA
    def load_lora(self, path: str, name: Optional[str] = None, scale: float = 0.0) -> LoRARequest:
        """Loads a llama.cpp GGUF LoRA adapter for this model and registers
        it as name (default: the file's name); scale is its global scale,
        applied to requests that name no adapters (0: only when named).
        Returns a LoRARequest for it (scale 1)."""
        aid = self._core.load_lora(str(path), name, float(scale))
        info = next(i for i in self._core.list_loras() if i["id"] == aid)
        return LoRARequest(info["name"], aid, info["path"])

    def unload_lora(self, lora: Union[int, LoRARequest]) -> None:
        """Unregisters an adapter; requests already using it finish with it."""
        self._core.unload_lora(lora.lora_int_id if isinstance(lora, LoRARequest) else int(lora))

    def set_lora_scale(self, lora: Union[int, LoRARequest], scale: float) -> None:
        """Sets an adapter's global scale (requests already queued keep theirs)."""
        aid = lora.lora_int_id if isinstance(lora, LoRARequest) else int(lora)
        self._core.set_lora_scale(aid, float(scale))

    def list_loras(self) -> List[Dict[str, Any]]:
        """The registered adapters: id, name, path, scale (global), rank,
        n_adapted, bytes, in_use, loaded."""
        return self._core.list_loras()

    def _lora_refs(self, spec: LoRASpec) -> List[Tuple[int, float]]:
        reqs = [spec] if isinstance(spec, LoRARequest) else list(spec or [])
        if not reqs:
            return [(0, 0.0)]  # the base model alone, whatever the global scales
        if len(reqs) > 8:
            raise ValueError(f"lora_request: {len(reqs)} adapters (8 at most)")
        refs = []
        for i, lr in enumerate(reqs):
            if not isinstance(lr, LoRARequest):
                raise ValueError(f"lora_request[{i}]: expected a LoRARequest")
            aid = lr.lora_int_id
            if aid <= 0 and lr.lora_name:
                aid = self._core.find_lora(lr.lora_name) or 0
            if aid <= 0 and lr.lora_path:
                aid = self.load_lora(lr.lora_path, lr.lora_name or None).lora_int_id
            if aid <= 0:
                raise ValueError(f"lora_request[{i}]: no adapter named {lr.lora_name!r} is "
                                 "loaded, and no lora_path to load it from")
            refs.append((aid, float(lr.scale)))
        return refs

    def generate_async(self, prompt_token_ids: Sequence[int],
                       sampling_params: Optional[SamplingParams] = None,
                       streaming: bool = False,
                       lora_request: LoRASpec = None) -> GenerationResult:
        return self.submit(GenerationRequest(list(prompt_token_ids),
                                             sampling_params or SamplingParams(), streaming,
                                             lora_request=lora_request))

    def generate(self, prompt_token_ids, sampling_params=None):
        """Token ids of one prompt (-> one GenerationResult) or a list of
        them (-> a list), waited for. Ctrl-C aborts them."""
        single = len(prompt_token_ids) == 0 or not isinstance(prompt_token_ids[0], (list, tuple))
        prompts = [prompt_token_ids] if single else list(prompt_token_ids)
        params = _per_prompt(sampling_params, len(prompts))
        results = self.submit_many([GenerationRequest(list(p), sp)
                                    for p, sp in zip(prompts, params)])
        _wait_all(results)
        return results[0] if single else results

    def abort_request(self, request_id: int) -> bool:
        """Cancels a request: True if it will end as cancelled, False if it
        was already over (or unknown)."""
        try:
            return self._core.cancel(int(request_id))
        except RuntimeError:
            return False

    # ---------------------------------------------------------- the rest
    def get_stats(self) -> Iterator[Dict[str, Any]]:
        """Yields the statistics of each engine step since the previous
        call (of the last 1024 steps, which the executor keeps), oldest
        first, as dicts of struct ifl_iteration_stats' fields: requests
        active, queued and completed; prompt and generation tokens in the
        step; its latency; KV blocks and bytes; speculative drafts."""
        with self._lock:
            after = self._stats_after
        hist = self._core.iteration_stats_since(after)
        with self._lock:
            if hist and hist[-1]["iteration"] > self._stats_after:
                self._stats_after = hist[-1]["iteration"]
        return iter(hist)

    def get_latest_stats(self) -> Dict[str, Any]:
        """The figures as of the engine's last step (or its creation), with
        kv_bytes_resident and process_rss_bytes measured now."""
        return self._core.iteration_stats()

    def get_request_stats(self, request_id: int) -> Optional[Dict[str, Any]]:
        return self._core.request_stats(int(request_id))

    def wait_idle(self, timeout: Optional[float] = None) -> bool:
        """Waits until every request submitted so far is over and the
        engine's stats show it; False on timeout."""
        return self._core.wait_idle(-1 if timeout is None else int(timeout * 1000))

    @property
    def model_info(self) -> Dict[str, Any]:
        return dict(self._info)

    def shutdown(self, cancel: bool = True) -> None:
        """Stops the executor: running requests are cancelled (cancel=True,
        each result ends as cancelled) or finished first (False), the
        response thread delivers every final response and ends, and the
        C executor is freed. Idempotent."""
        with self._lock:
            if self._shut:
                return
            self._shut = True
        self._core.shutdown(cancel)
        if threading.current_thread() is not self._thread:
            self._thread.join()
        self._core.close(cancel)
        _live.discard(self)

    def __enter__(self) -> "GenerationExecutor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()


def _per_prompt(sampling_params, n: int) -> List[SamplingParams]:
    if sampling_params is None:
        return [SamplingParams() for _ in range(n)]
    if isinstance(sampling_params, SamplingParams):
        return [sampling_params] * n
    sps = list(sampling_params)
    if len(sps) != n or not all(isinstance(s, SamplingParams) for s in sps):
        raise ValueError(f"sampling_params: one SamplingParams, or a list of {n} (one per "
                         "prompt)")
    return sps


def _wait_all(results: Sequence[GenerationResult]) -> None:
    """Waits for every result; an interrupt (Ctrl-C) aborts those still
    running, then propagates."""
    try:
        for r in results:
            r.result()
    except BaseException:
        for r in results:
            if not r.done():
                r.abort()
        raise
