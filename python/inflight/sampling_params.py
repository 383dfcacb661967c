"""Sampling parameters: every per-request field of the C API, named as
TensorRT-LLM's SamplingParams names them where it has the field.

A bad value raises ValueError naming the field when the object is made,
and again when it is submitted (fields may be changed in between), before
anything is enqueued.
"""

from __future__ import annotations

import json as _json
import math
import os
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Optional, Sequence, Union

from . import _core

__all__ = ["SamplingParams", "GuidedDecodingParams", "SpeculativeParams"]


def _bad(name: str, msg: str) -> ValueError:
    return ValueError(f"{name}: {msg}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_int(name: str, v: Any, lo: Optional[int] = None, hi: Optional[int] = None,
               allow_bool: bool = False) -> None:
    if not (_is_int(v) or (allow_bool and isinstance(v, bool))):
        raise _bad(name, f"expected an integer, got {type(v).__name__}")
    if lo is not None and v < lo:
        raise _bad(name, f"{v} is below {lo}")
    if hi is not None and v > hi:
        raise _bad(name, f"{v} is above {hi}")


def _check_float(name: str, v: Any, lo: float, hi: float, lo_open: bool = False,
                 hi_open: bool = False) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _bad(name, f"expected a number, got {type(v).__name__}")
    x = float(v)
    if math.isnan(x) or (lo_open and x <= lo) or (not lo_open and x < lo) or \
            (hi_open and x >= hi) or (not hi_open and x > hi):
        lb = "(" if lo_open else "["
        rb = ")" if hi_open else "]"
        raise _bad(name, f"{v} is not in {lb}{lo}, {hi}{rb}")


def _check_ids(name: str, v: Any, max_len: Optional[int] = None) -> None:
    if isinstance(v, (str, bytes)) or not isinstance(v, Sequence):
        raise _bad(name, "expected a list of token ids")
    if max_len is not None and len(v) > max_len:
        raise _bad(name, f"{len(v)} entries ({max_len} at most)")
    for i, t in enumerate(v):
        if not _is_int(t) or t < 0 or t >= 2**31:
            raise _bad(f"{name}[{i}]", f"{t!r} is not a token id")


@dataclass
class GuidedDecodingParams:
    """Holds the output to a JSON Schema (a dict or its text), any JSON
    object, a regular expression, or a GBNF grammar: exactly one.
    """

    json: Optional[Union[str, Dict[str, Any]]] = None
    regex: Optional[str] = None
    grammar: Optional[str] = None
    json_object: bool = False

    def _validate(self, name: str = "guided_decoding") -> None:
        given = [k for k in ("json", "regex", "grammar") if getattr(self, k) is not None]
        if self.json_object:
            given.append("json_object")
        if len(given) != 1:
            raise _bad(name, "give exactly one of json, json_object, regex and grammar"
                       + (f" (got {', '.join(given)})" if given else ""))
        if self.json is not None and not isinstance(self.json, (str, dict)):
            raise _bad(f"{name}.json", "expected a JSON Schema as a dict or a str")
        for k in ("regex", "grammar"):
            v = getattr(self, k)
            if v is not None and (not isinstance(v, str) or not v):
                raise _bad(f"{name}.{k}", "expected a non-empty str")

    def _c_fields(self) -> Dict[str, Any]:
        if self.json_object:
            return {"guide_type": _core.GUIDE_JSON, "guide_text": ""}
        if self.json is not None:
            text = self.json if isinstance(self.json, str) else _json.dumps(self.json)
            return {"guide_type": _core.GUIDE_JSON_SCHEMA, "guide_text": text}
        if self.regex is not None:
            return {"guide_type": _core.GUIDE_REGEX, "guide_text": self.regex}
        return {"guide_type": _core.GUIDE_EBNF, "guide_text": self.grammar}


@dataclass
class SpeculativeParams:
    """A request's part in speculative decoding (the executor's
    `speculative` option sets the proposer). None keeps the executor's
    value. draft_tokens are drafts the client brings (OpenAI's prediction):
    token ids, or a str tokenized without special tokens."""

    disable: bool = False
    n_max: Optional[int] = None
    n_min: Optional[int] = None
    p_min: Optional[float] = None
    draft_tokens: Optional[Union[str, List[int]]] = None

    def _validate(self, name: str = "speculative") -> None:
        if not isinstance(self.disable, bool):
            raise _bad(f"{name}.disable", "expected a bool")
        for k in ("n_max", "n_min"):
            v = getattr(self, k)
            if v is not None:
                _check_int(f"{name}.{k}", v, 0, 32)
        if self.p_min is not None:
            _check_float(f"{name}.p_min", self.p_min, 0.0, 1.0)
        d = self.draft_tokens
        if d is not None and not isinstance(d, str):
            _check_ids(f"{name}.draft_tokens", d, 65536)


_FINISH = {
    _core.FINISH_END_ID: "stop",
    _core.FINISH_STOP_WORDS: "stop",
    _core.FINISH_LENGTH: "length",
    _core.FINISH_TIMED_OUT: "timeout",
    _core.FINISH_CANCELLED: "cancelled",
}


@dataclass
class SamplingParams:
    """How one request samples, stops and what it returns.

    Sampling (TensorRT-LLM names): temperature (0: greedy), top_k (0: off),
    top_p, top_p_min, top_p_decay, top_p_reset_ids, min_p, typical_p,
    seed (None: a fresh random seed per request), repetition_penalty,
    presence_penalty, frequency_penalty, no_repeat_ngram_size.
    n: independent samples (best_of: run that many and return the n with
    the highest cumulative log-probability); beam_width > 1, or
    use_beam_search with best_of (else n) beams: beam search (n of the
    best hypotheses; length_penalty, early_stopping).
    Stopping: max_tokens, min_tokens, ignore_eos, end_id, pad_id, stop
    (strings), stop_token_ids, stop_words (token sequences),
    include_stop_str_in_output. Bans and bias: bad (strings), bad_token_ids,
    bad_words (token sequences), logit_bias {token id: bias}.
    Outputs: logprobs (None: off; 0: each chosen token's; k: and the k
    most likely), prompt_logprobs (None, or k as for logprobs),
    return_context_logits, return_generation_logits, return_hidden_states,
    return_perf_metrics, exclude_input_from_output, detokenize,
    add_special_tokens (for text prompts), return_all_generated_tokens.
    Guided decoding: guided_decoding=GuidedDecodingParams(...).
    Scheduling: priority (0..1), allotted_time_ms (0: none), client_id.
    Others: logits_processor (a name registered with the executor's
    logits_processors), apply_batched_logits_processor (its
    batched_logits_processor), speculative=SpeculativeParams(...).
    """

    max_tokens: int = 32
    n: int = 1
    best_of: Optional[int] = None
    use_beam_search: bool = False
    beam_width: int = 1
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    top_p_min: float = 1e-6
    top_p_decay: float = 1.0
    top_p_reset_ids: Optional[int] = None
    min_p: float = 0.0
    typical_p: float = 1.0
    seed: Optional[int] = None
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    no_repeat_ngram_size: int = 0
    length_penalty: float = 1.0
    early_stopping: int = 1
    min_tokens: int = 0
    ignore_eos: bool = False
    end_id: Optional[int] = None
    pad_id: Optional[int] = None
    stop: Optional[Union[str, List[str]]] = None
    stop_token_ids: Optional[List[int]] = None
    stop_words: Optional[List[List[int]]] = None
    include_stop_str_in_output: bool = False
    bad: Optional[Union[str, List[str]]] = None
    bad_token_ids: Optional[List[int]] = None
    bad_words: Optional[List[List[int]]] = None
    logit_bias: Optional[Dict[int, float]] = None
    logprobs: Optional[int] = None
    prompt_logprobs: Optional[int] = None
    return_context_logits: bool = False
    return_generation_logits: bool = False
    return_hidden_states: bool = False
    return_perf_metrics: bool = False
    exclude_input_from_output: bool = True
    return_all_generated_tokens: bool = False
    detokenize: bool = True
    add_special_tokens: bool = True
    guided_decoding: Optional[GuidedDecodingParams] = None
    logits_processor: Optional[str] = None
    apply_batched_logits_processor: bool = False
    priority: float = 0.5
    allotted_time_ms: int = 0
    client_id: int = 0
    speculative: Optional[SpeculativeParams] = None

    def __post_init__(self) -> None:
        self._validate()

    def _beam_width(self) -> int:
        """beam_width, or with use_beam_search best_of (else n) beams, as
        TensorRT-LLM takes best_of for the beam width."""
        if self.beam_width > 1 or not self.use_beam_search:
            return self.beam_width
        return self.best_of or self.n

    def _n_samples(self) -> int:
        """Sequences the executor runs: best_of samples, of which the n
        with the highest cumulative log-probability are returned."""
        if self._beam_width() > 1:
            return self.n
        return self.best_of or self.n

    def _validate(self) -> None:
        """Every check that needs no model; the executor checks the rest
        (token ids against the vocabulary, lengths against the context)
        and its errors are raised as ValueError naming the field too."""
        p = "SamplingParams."
        _check_int(p + "max_tokens", self.max_tokens, 1, 2**31 - 1)
        _check_int(p + "n", self.n, 1, 64)
        _check_int(p + "beam_width", self.beam_width, 1, 16)
        if not isinstance(self.use_beam_search, bool):
            raise _bad(p + "use_beam_search", "expected a bool")
        if self.best_of is not None:
            _check_int(p + "best_of", self.best_of, 1, 64)
            if self.best_of < self.n:
                raise _bad(p + "best_of", f"{self.best_of} is below n ({self.n})")
        bw = self._beam_width()
        if bw > 16:
            raise _bad(p + "best_of", f"{bw} beams (16 at most)")
        if bw > 1 and self.n > bw:
            raise _bad(p + "n", f"{self.n} exceeds beam_width {bw} (beam search "
                       "returns its n best hypotheses)")
        _check_float(p + "temperature", self.temperature, 0.0, math.inf, hi_open=True)
        _check_int(p + "top_k", self.top_k, 0, 2**31 - 1)
        _check_float(p + "top_p", self.top_p, 0.0, 1.0, lo_open=True)
        _check_float(p + "top_p_min", self.top_p_min, 0.0, 1.0, lo_open=True)
        _check_float(p + "top_p_decay", self.top_p_decay, 0.0, 1.0, lo_open=True)
        if self.top_p_reset_ids is not None:
            _check_int(p + "top_p_reset_ids", self.top_p_reset_ids, 0, 2**31 - 1)
        _check_float(p + "min_p", self.min_p, 0.0, 1.0)
        _check_float(p + "typical_p", self.typical_p, 0.0, 1.0, lo_open=True)
        if self.seed is not None:
            _check_int(p + "seed", self.seed, 0, 2**64 - 1)
        _check_float(p + "repetition_penalty", self.repetition_penalty, 0.0, math.inf,
                     lo_open=True, hi_open=True)
        _check_float(p + "presence_penalty", self.presence_penalty, -math.inf, math.inf,
                     lo_open=True, hi_open=True)
        _check_float(p + "frequency_penalty", self.frequency_penalty, -math.inf, math.inf,
                     lo_open=True, hi_open=True)
        _check_int(p + "no_repeat_ngram_size", self.no_repeat_ngram_size, 0, 2**31 - 1)
        _check_float(p + "length_penalty", self.length_penalty, -math.inf, math.inf,
                     lo_open=True, hi_open=True)
        _check_int(p + "early_stopping", self.early_stopping, 0, 2, allow_bool=True)
        _check_int(p + "min_tokens", self.min_tokens, 0, 2**31 - 1)
        for k in ("ignore_eos", "include_stop_str_in_output", "return_context_logits",
                  "return_generation_logits", "return_hidden_states", "return_perf_metrics",
                  "exclude_input_from_output", "return_all_generated_tokens", "detokenize",
                  "add_special_tokens"):
            if not isinstance(getattr(self, k), bool):
                raise _bad(p + k, f"expected a bool, got {type(getattr(self, k)).__name__}")
        for k in ("end_id", "pad_id"):
            v = getattr(self, k)
            if v is not None:
                _check_int(p + k, v, 0, 2**31 - 1)
        for k in ("stop", "bad"):
            v = getattr(self, k)
            if v is None:
                continue
            items = [v] if isinstance(v, str) else v
            if not isinstance(items, Sequence) or isinstance(items, bytes):
                raise _bad(p + k, "expected a str or a list of str")
            if len(items) > 64:
                raise _bad(p + k, f"{len(items)} strings (64 at most)")
            for i, s in enumerate(items):
                if not isinstance(s, str) or not s:
                    raise _bad(f"{p}{k}[{i}]", "expected a non-empty str")
                if len(s.encode()) > 256:
                    raise _bad(f"{p}{k}[{i}]", "longer than 256 bytes")
        for k in ("stop_token_ids", "bad_token_ids"):
            v = getattr(self, k)
            if v is not None:
                _check_ids(p + k, v, 1024)
        for k in ("stop_words", "bad_words"):
            v = getattr(self, k)
            if v is None:
                continue
            if not isinstance(v, Sequence) or len(v) > 1024:
                raise _bad(p + k, "expected a list of at most 1024 token-id lists")
            for i, w in enumerate(v):
                _check_ids(f"{p}{k}[{i}]", w, 64)
                if not w:
                    raise _bad(f"{p}{k}[{i}]", "an empty sequence")
        if bw > 1 and (self.stop or self.stop_token_ids or self.stop_words):
            raise _bad(p + "stop", "stop strings and stop words are not supported with beam "
                       "search (beam_width > 1); beams end on the end token or max_tokens")
        if self.logit_bias is not None:
            if not isinstance(self.logit_bias, dict):
                raise _bad(p + "logit_bias", "expected a dict {token id: bias}")
            for t, b in self.logit_bias.items():
                if not _is_int(t) or t < 0 or t >= 2**31:
                    raise _bad(p + "logit_bias", f"key {t!r} is not a token id")
                if isinstance(b, bool) or not isinstance(b, (int, float)) or \
                        not math.isfinite(b):
                    raise _bad(f"{p}logit_bias[{t}]", f"{b!r} is not a finite number")
        for k in ("logprobs", "prompt_logprobs"):
            v = getattr(self, k)
            if v is not None:
                _check_int(p + k, v, 0, 20)
        if bw > 1 and self.logprobs:
            raise _bad(p + "logprobs", "top alternatives are not supported with beam search; "
                       "logprobs=0 (each chosen token's) is")
        if self.guided_decoding is not None:
            if not isinstance(self.guided_decoding, GuidedDecodingParams):
                raise _bad(p + "guided_decoding", "expected a GuidedDecodingParams")
            self.guided_decoding._validate(p + "guided_decoding")
            if self.ignore_eos:
                raise _bad(p + "ignore_eos", "not supported with guided decoding (a guided "
                           "sequence ends where its grammar does)")
        if self.logits_processor is not None and (not isinstance(self.logits_processor, str)
                                                  or not self.logits_processor):
            raise _bad(p + "logits_processor", "expected the name of a registered processor")
        if not isinstance(self.apply_batched_logits_processor, bool):
            raise _bad(p + "apply_batched_logits_processor", "expected a bool")
        if self.apply_batched_logits_processor and self.logits_processor:
            raise _bad(p + "apply_batched_logits_processor", "a request runs one processor: "
                       "not with logits_processor")
        _check_float(p + "priority", self.priority, 0.0, 1.0)
        _check_int(p + "allotted_time_ms", self.allotted_time_ms, 0, 2**63 - 1)
        _check_int(p + "client_id", self.client_id, 0, 2**64 - 1)
        if self.speculative is not None:
            if isinstance(self.speculative, dict):
                try:
                    self.speculative = SpeculativeParams(**self.speculative)
                except TypeError as e:
                    raise _bad(p + "speculative", str(e)) from None
            if not isinstance(self.speculative, SpeculativeParams):
                raise _bad(p + "speculative", "expected a SpeculativeParams or a dict")
            self.speculative._validate(p + "speculative")

    def _to_c(self, input_ids: List[int], streaming: bool, tokenize) -> Dict[str, Any]:
        """The request dict inflight._core takes (the C struct's names).
        tokenize(text) turns stop/bad strings and drafts into ids."""
        self._validate()
        seed = self.seed if self.seed is not None else int.from_bytes(os.urandom(8), "little")
        if streaming and self._n_samples() > self.n:
            raise _bad("SamplingParams.best_of", "best_of above n needs the whole outputs to "
                       "choose from: not with streaming")
        sampling = {
            "beam_width": self._beam_width(), "top_k": self.top_k, "top_p": self.top_p,
            "top_p_min": self.top_p_min, "top_p_decay": self.top_p_decay,
            "top_p_reset_ids": -1 if self.top_p_reset_ids is None else self.top_p_reset_ids,
            "min_p": self.min_p, "typical_p": self.typical_p, "temperature": self.temperature,
            "seed": seed, "min_tokens": self.min_tokens,
            "repetition_penalty": self.repetition_penalty,
            "presence_penalty": self.presence_penalty,
            "frequency_penalty": self.frequency_penalty,
            "no_repeat_ngram_size": self.no_repeat_ngram_size,
            "length_penalty": self.length_penalty, "early_stopping": int(self.early_stopping),
            "ignore_eos": int(self.ignore_eos),
        }
        output = {
            "return_log_probs": int(self.logprobs is not None),
            "top_log_probs": self.logprobs or 0,
            "return_context_logits": int(self.return_context_logits
                                         or self.prompt_logprobs is not None),
            "return_generation_logits": int(self.return_generation_logits),
            "return_perf_metrics": int(self.return_perf_metrics),
            "return_hidden_states": int(self.return_hidden_states),
        }
        r: Dict[str, Any] = {
            "input_ids": input_ids,
            "max_tokens": self.max_tokens,
            "streaming": int(streaming),
            "sampling": sampling,
            "output": output,
            "end_id": -1 if self.end_id is None else self.end_id,
            "pad_id": -1 if self.pad_id is None else self.pad_id,
            "num_return_sequences": self._n_samples(),
            "priority": self.priority,
            "allotted_time_ms": self.allotted_time_ms,
            "client_id": self.client_id,
            "return_all_generated_tokens": int(self.return_all_generated_tokens),
        }
        if self.stop:
            r["stop_strings"] = [self.stop] if isinstance(self.stop, str) else list(self.stop)
        stop_words = [[t] for t in (self.stop_token_ids or [])] + \
            [list(w) for w in (self.stop_words or [])]
        if stop_words:
            r["stop_words"] = stop_words
        bad_words = [[t] for t in (self.bad_token_ids or [])] + \
            [list(w) for w in (self.bad_words or [])]
        if self.bad:
            for s in [self.bad] if isinstance(self.bad, str) else self.bad:
                ids = tokenize(s)
                if not 1 <= len(ids) <= 64:
                    raise _bad("SamplingParams.bad", f"{s!r} is {len(ids)} tokens (1..64)")
                bad_words.append(ids)
        if bad_words:
            r["bad_words"] = bad_words
        if self.logit_bias:
            r["logit_bias"] = {int(k): float(v) for k, v in self.logit_bias.items()}
        if self.guided_decoding is not None:
            r.update(self.guided_decoding._c_fields())
        if self.logits_processor:
            r["logits_post_processor"] = self.logits_processor
        elif self.apply_batched_logits_processor:
            r["logits_post_processor"] = "batched"
        sp = self.speculative
        if sp is not None:
            r["speculative"] = {
                "disable": int(sp.disable),
                "n_max": -1 if sp.n_max is None else sp.n_max,
                "n_min": -1 if sp.n_min is None else sp.n_min,
                "p_min": -1.0 if sp.p_min is None else sp.p_min,
            }
            if sp.draft_tokens is not None:
                d = tokenize(sp.draft_tokens) if isinstance(sp.draft_tokens, str) \
                    else list(sp.draft_tokens)
                r["draft_tokens"] = d
        return r


# C field names in the executor's messages, as SamplingParams names them
_C_TO_PY = {
    "num_return_sequences": "n",
    "sampling.beam_width": "beam_width",
    "stop_strings": "stop",
    "output.top_log_probs": "logprobs",
    "logits_post_processor": "logits_processor",
    "logit_bias_ids": "logit_bias",
    "guide_type": "guided_decoding",
    "guide_text": "guided_decoding",
    "speculative.draft_tokens": "speculative.draft_tokens",
}


def _py_message(msg: str) -> str:
    """Rewrites an executor message "sampling.top_k: ..." as
    "SamplingParams.top_k: ...", so the field has the name the user set."""
    head, sep, rest = msg.partition(":")
    if not sep:
        return msg
    base = head.split("[")[0]
    tail = head[len(base):]
    if base in ("input_ids",):
        return f"prompt{tail}:{rest}"
    name = _C_TO_PY.get(base)
    if name is None:
        for pre in ("sampling.", "output."):
            if base.startswith(pre):
                name = base[len(pre):]
                break
        else:
            name = base
    return f"SamplingParams.{name}{tail}:{rest}"


def _field_names() -> List[str]:
    return [f.name for f in fields(SamplingParams)]
