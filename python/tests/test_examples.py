"""The two examples in python/README.md run as documented."""

import http.client
import json
import os
import signal
import subprocess
import sys
import threading

from conftest import INFLIGHT_BIN, ROOT, STORIES

EXAMPLES = os.path.join(ROOT, "python", "examples")


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.environ.get("INFLIGHT_PYTHONPATH", os.path.join(ROOT, "python"))
    return env


def _greedy_text(prompt, n):
    return subprocess.run([INFLIGHT_BIN, "run", "-m", STORIES, "-p", prompt, "-n", str(n),
                           "--temp", "0", "-t", "1"], capture_output=True, text=True,
                          check=True).stdout.rstrip("\n")


def test_generate_example():
    out = subprocess.run([sys.executable, os.path.join(EXAMPLES, "generate.py"), STORIES],
                         capture_output=True, text=True, env=_env(), timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 4
    assert lines[0].startswith("'Once upon a time' -> ")
    assert lines[3] == _greedy_text("Once upon a time", 40)


def _post(port, body, read_all=True):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", "/", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if not read_all:
        return c, r
    data = r.read().decode()
    c.close()
    return r.status, data


def test_stream_server_example():
    p = subprocess.Popen([sys.executable, os.path.join(EXAMPLES, "stream_server.py"), STORIES,
                          "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=_env())
    try:
        line = p.stdout.readline()
        assert line.startswith("listening on "), line + p.stderr.read()
        port = int(line.split()[-1])
        want = _greedy_text("Once upon a time", 50)
        got = [None] * 6

        def client(i):
            got[i] = _post(port, {"prompt": "Once upon a time", "max_tokens": 50})

        ts = [threading.Thread(target=client, args=(i,)) for i in range(6)]
        # a client that leaves early, among them
        c, r = _post(port, {"prompt": "Once upon a time", "max_tokens": 100}, read_all=False)
        first = r.read1(16)
        for t in ts:
            t.start()
        c.close()
        for t in ts:
            t.join(120)
        assert first
        assert all(g == (200, want) for g in got), got
        assert _post(port, {"prompt": "x", "max_tokens": "many"})[0] == 400
        assert _post(port, {"prompt": "Once upon a time", "max_tokens": 5})[0] == 200
    finally:
        p.send_signal(signal.SIGINT)
        p.wait(30)
    assert p.returncode == 0, p.stderr.read()
