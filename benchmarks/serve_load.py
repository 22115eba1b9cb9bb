"""Load on `gpuwise serve` (issue 21), loopback only: 2,000 API requests over 8 threads while slow clients hold
connections open, then the server's memory after many distinct posted configs. Prints p50/p99 latency, errors and
resident memory before and after; a benchmark that prints figures, not a timed test.

    python benchmarks/serve_load.py [--requests 2000] [--threads 8] [--slow 16] [--configs 60]
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import statistics
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from gpuwise.serve.server import make_server

QUERIES = ["/api/fit?model=llama-3.1-8b&gpu=rtx-4090", "/api/infer?model=qwen3-8b&gpu=h100&batch=8",
           "/api/gpus?query=nvidia", "/api/models?query=qwen", "/api/fit?model=nope&gpu=h100",
           "/api/train?model=llama-3.2-1b&gpu=h100&seq=2048", "/api/explain?term=mfu", "/static/app.js", "/"]


def rss_mib() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return float("nan")


def one(base: str, path: str, body: bytes | None = None) -> tuple[float, int]:
    t0 = time.perf_counter()
    req = urllib.request.Request(base + path, data=body, headers={"Content-Type": "application/json"} if body else {})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        status = e.code
    return time.perf_counter() - t0, status


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--slow", type=int, default=16, help="connections opened and left silent during the load")
    ap.add_argument("--configs", type=int, default=60, help="distinct posted configs for the memory check")
    a = ap.parse_args()
    srv = make_server("127.0.0.1", 0, quiet=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    host, port = srv.server_address[:2]
    base = f"http://{host}:{port}"
    slow = [socket.create_connection((host, port)) for _ in range(a.slow)]
    for s in slow:
        s.sendall(b"GET /api/gpus HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finished: the server's 30 s timeout
    rng = random.Random(1)
    before = rss_mib()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(a.threads) as pool:
        results = list(pool.map(lambda p: one(base, p), (rng.choice(QUERIES) for _ in range(a.requests))))
    wall = time.perf_counter() - t0
    times = sorted(t for t, _ in results)
    errors = sum(1 for _, s in results if s >= 500)
    print(f"{a.requests} requests over {a.threads} threads with {a.slow} silent connections open: {wall:.1f} s, "
          f"p50 {statistics.median(times) * 1e3:.0f} ms, p99 {times[int(0.99 * len(times))] * 1e3:.0f} ms, "
          f"5xx {errors}; RSS {before:.0f} -> {rss_mib():.0f} MiB")
    marks = []
    for i in range(a.configs):
        cfg = {"model_type": "llama", "num_hidden_layers": 64 + i, "hidden_size": 8192, "intermediate_size": 28672,
               "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 128256}
        one(base, "/api/fit?gpu=h100&num_gpus=8", json.dumps({"config": cfg}).encode())
        one(base, "/api/infer?gpu=h100&num_gpus=8", json.dumps({"config": cfg}).encode())
        if (i + 1) % (a.configs // 4 or 1) == 0:
            marks.append(f"{i + 1}: {rss_mib():.0f}")
    print(f"RSS (MiB) after n distinct posted configs: {', '.join(marks)}")
    for s in slow:
        s.close()
    srv.shutdown()


if __name__ == "__main__":
    main()
