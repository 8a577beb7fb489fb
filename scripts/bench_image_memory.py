"""What a request of small files declaring huge images costs a real `maestro serve`: its RSS (sampled from /proc
while it answers, and a few seconds after) above what it held idle, and the time to answer.

    .venv/bin/python scripts/bench_image_memory.py                 # 8 images of 6300x6300 (40 MP, ~10 KB each)
    .venv/bin/python scripts/bench_image_memory.py --images 1
    .venv/bin/python scripts/bench_image_memory.py --source /tmp/old   # the server's package from another tree
    # (e.g. git archive HEAD maestro_graph | tar -x -C /tmp/old)

The server runs the packaged registry (or `--registry`) with one worker; the images are those of the trust suite's
`image_memory` check (`maestro_graph.reliability.image_checks.bomb_urls`). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from maestro_graph.images.load import image_to_data_url, load_image
from maestro_graph.reliability.image_checks import COUNT_QUESTION, SETTLE_S, bomb_request, bomb_urls
from maestro_graph.reliability.target import peak_rss_growth_mb
from maestro_graph.serve.loopback import free_port, wait_until_up

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=8, help="images in the request (the server's cap is 8)")
    parser.add_argument("--registry", default=None, help="registry YAML the server loads (default: the packaged one)")
    parser.add_argument("--source", default=str(ROOT), help="the tree whose maestro_graph/ the server runs (its "
                        "working directory, first on its import path)")
    parser.add_argument("--timeout-s", type=float, default=600.0, help="the server's request timeout")
    args = parser.parse_args()

    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "maestro_graph.cli", "serve", "--port", str(port), "--workers", "1",
               "--timeout-s", str(args.timeout_s), "--log-level", "warning"]
    if args.registry:
        command += ["--registry", args.registry]
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:
        server = subprocess.Popen(command, cwd=args.source, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until_up(f"{url}/healthz", timeout_s=300)
            images = bomb_urls(args.images)
            warm = image_to_data_url(load_image(str(ROOT / "examples" / "circles.png")))
            with httpx.Client(timeout=args.timeout_s + 30) as client:
                send = lambda refs: client.post(f"{url}/v1/chat/completions", json=bomb_request(refs))  # noqa: E731
                send([warm])  # the experts loaded: the baseline
                start = time.perf_counter()
                idle, grown, reply = peak_rss_growth_mb(server.pid, lambda: send(images), settle_s=SETTLE_S)
                took = time.perf_counter() - start - SETTLE_S
            body = reply.json()
            answer = body["choices"][0]["message"]["content"] if reply.status_code == 200 else body.get("error")
            print(json.dumps({
                "images": args.images, "question": COUNT_QUESTION, "status": reply.status_code, "answer": answer,
                "idle_rss_mb": round(idle), "peak_growth_mb": round(grown),
                "latency_s": round(took, 1), "server": args.source,
            }))
        finally:
            server.terminate()
            server.wait(timeout=60)


if __name__ == "__main__":
    main()
