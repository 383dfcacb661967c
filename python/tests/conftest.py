"""Fixtures: the package from this checkout (make python builds it), the
shared test models, and one executor per module."""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# a sanitized build puts the package elsewhere (INFLIGHT_PYTHONPATH)
sys.path.insert(0, os.environ.get("INFLIGHT_PYTHONPATH", os.path.join(ROOT, "python")))

import inflight  # noqa: E402

MODELS = os.path.join(ROOT, "..", "shared", "models")
STORIES = os.path.join(MODELS, "stories260K.gguf")
LARGER = os.path.join(MODELS, "ref", "llama-f32.gguf")  # about 12x stories260K's work a token
BUILD = os.environ.get("BUILD", "build")
# under a sanitizer (tests/test_python.sh sets this), freed memory sits in
# its quarantine: RSS says nothing about leaks there
SANITIZED = os.environ.get("INFLIGHT_SANITIZED") == "1"
INFLIGHT_BIN = os.path.join(ROOT, BUILD, "inflight")


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


@pytest.fixture(scope="module")
def llm():
    with inflight.LLM(STORIES, n_threads=2, kv_type="f32") as m:
        yield m
