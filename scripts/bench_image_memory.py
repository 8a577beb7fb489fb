"""What small files declaring huge images cost a real `maestro serve`: its RSS (sampled from /proc while it
answers, and a few seconds after) above what it held idle, and the time to answer.

    .venv/bin/python scripts/bench_image_memory.py                 # 8 images of 6300x6300 (40 MP, ~10 KB each)
    .venv/bin/python scripts/bench_image_memory.py --images 1
    .venv/bin/python scripts/bench_image_memory.py --concurrent 16   # one request, then 16 at once (below)
    .venv/bin/python scripts/bench_image_memory.py --steps "WebP busy"   # where one episode's memory goes
    .venv/bin/python scripts/bench_image_memory.py --source /tmp/old   # the server's package from another tree
    # (e.g. git archive HEAD maestro_graph | tar -x -C /tmp/old)

The server runs the packaged registry (or `--registry`) with one worker; the images are those of the trust suite's
`image_memory` check (`maestro_graph.operations.reliability.image_checks.bomb_urls`). Prints one JSON object.

With `--concurrent N`, each of four images of 6300x6300 pixels (a flat one, seven circles and a small noise patch,
and a busy one, a noise-textured tile repeated, each as a lossy WebP and as a PNG) goes to a fresh server with its
default settings (two workers): first one request of it alone, then N at once, each "How many circles are in the
image?"; one JSON line per image with the RSS peak above idle, the statuses and answers, and the wall time.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
from PIL import Image, ImageDraw

from maestro_graph.doors.serve.loopback import free_port, wait_until_up
from maestro_graph.images.load import image_to_data_url, load_image
from maestro_graph.operations.reliability.image_checks import (
    BOMB_SIDE,
    COUNT_QUESTION,
    SETTLE_S,
    bomb_request,
    bomb_urls,
)
from maestro_graph.operations.reliability.target import peak_rss_growth_mb
from maestro_graph.operations.reliability.traffic import webp_bomb_url

ROOT = Path(__file__).resolve().parents[1]
TILE, GRAIN = 150, 5
"""The busy image's texture: noise of TILE/GRAIN cells a side, enlarged to a TILE-pixel tile that repeats, so its
PNG (1.5 MB) and WebP (2.1 MB) stay under the server's 8 MB cap."""


def _flat() -> str:
    """Seven circles on white with a 200x200 noise patch (a PNG data URL)."""
    image = Image.new("RGB", (BOMB_SIDE, BOMB_SIDE), "white")
    draw = ImageDraw.Draw(image)
    for i in range(7):
        draw.ellipse((300 + 800 * i, 2900, 1000 + 800 * i, 3600), outline="black", width=14)
    rng = np.random.default_rng(0)
    image.paste(Image.fromarray(rng.integers(0, 256, (200, 200, 3), dtype=np.uint8)), (100, 100))
    return _png_url(image)


def _busy() -> str:
    """A noise-textured tile repeated over the whole image, with seven circles drawn over it (a PNG data URL): every
    expert finds edges and shapes everywhere."""
    rng = np.random.default_rng(1)
    cells = Image.fromarray(rng.integers(96, 256, (TILE // GRAIN, TILE // GRAIN), dtype=np.uint8))
    tile = np.asarray(cells.resize((TILE, TILE), Image.Resampling.BILINEAR))
    image = Image.fromarray(np.tile(tile, (BOMB_SIDE // TILE, BOMB_SIDE // TILE))).convert("RGB")
    draw = ImageDraw.Draw(image)
    for i in range(7):
        draw.ellipse((300 + 800 * i, 2900, 1000 + 800 * i, 3600), outline="black", width=14)
    return _png_url(image)


def _png_url(image: Image.Image) -> str:
    out = io.BytesIO()
    image.save(out, "PNG", optimize=True)
    return f"data:image/png;base64,{base64.b64encode(out.getvalue()).decode()}"


@contextmanager
def _server(args: argparse.Namespace, workers: int) -> Iterator[tuple[str, int]]:
    """A fresh `maestro serve` of `--source` on a free port: (its URL, its pid)."""
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "maestro_graph.doors.cli", "serve", "--port", str(port), "--workers", str(workers),
               "--timeout-s", str(args.timeout_s), "--log-level", "warning"]
    if args.registry:
        command += ["--registry", args.registry]
    with tempfile.TemporaryFile() as log:
        server = subprocess.Popen(command, cwd=args.source, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until_up(f"http://127.0.0.1:{port}/healthz", timeout_s=300)
            yield f"http://127.0.0.1:{port}", server.pid
        finally:
            server.terminate()
            server.wait(timeout=60)


def concurrent(args: argparse.Namespace) -> None:
    """One request, then `--concurrent` at once, of each image, on a fresh server each."""
    flat, busy = _flat(), _busy()
    images = {"WebP flat": webp_bomb_url(flat), "WebP busy": webp_bomb_url(busy), "PNG flat": flat, "PNG busy": busy}
    warm = image_to_data_url(load_image(str(ROOT / "examples" / "circles.png")))
    for name, image in images.items():
        with _server(args, workers=2) as (url, pid), httpx.Client(timeout=args.timeout_s + 30) as client:
            client.post(f"{url}/v1/chat/completions", json=bomb_request([warm]))  # the experts loaded: the baseline
            row: dict = {"image": name, "bytes": len(image) * 3 // 4, "server": args.source}
            for count in (1, args.concurrent):
                def send(_: int, image: str = image) -> httpx.Response:
                    return client.post(f"{url}/v1/chat/completions", json=bomb_request([image]))

                def all_at_once(count: int = count) -> list[httpx.Response]:
                    with ThreadPoolExecutor(count) as pool:
                        return list(pool.map(send, range(count)))

                start = time.perf_counter()
                idle, grown, replies = peak_rss_growth_mb(pid, all_at_once, settle_s=SETTLE_S)
                answers = Counter(r.json()["choices"][0]["message"]["content"] if r.status_code == 200
                                  else f"{r.status_code} {r.json().get('error', {}).get('code')}" for r in replies)
                row[f"x{count}"] = {"idle_rss_mb": round(idle), "peak_growth_mb": round(grown),
                                    "answers": dict(answers), "wall_s": round(time.perf_counter() - start - SETTLE_S)}
            print(json.dumps(row), flush=True)


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith(field + ":"))


def _peak(name: str, func, *args, **kwargs):
    """`func(*args, **kwargs)`, printing this process's RSS peak above what it held before (VmHWM, reset first:
    what numpy, OpenCV and ONNX allocate counts too, which tracemalloc would not see)."""
    before = _status_mb("VmRSS")
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # resets VmHWM to the current RSS
    start, outcome = time.perf_counter(), "raised"
    try:
        result = func(*args, **kwargs)
        outcome = ""
        return result
    finally:  # a call that timed out is abandoned, not stopped: its peak so far
        print(f"{name:32} peak {_status_mb('VmHWM') - before:+6.0f} MB   held after "
              f"{_status_mb('VmRSS') - before:+5.0f} MB   {time.perf_counter() - start:5.1f} s {outcome}", flush=True)


def steps(args: argparse.Namespace) -> None:
    """One episode of the `--steps` image in this process, as a server's worker runs it (the packaged registry, the
    server's default policy, the glibc threshold `maestro serve` sets), with the RSS peak of each decode and each
    expert call. Steps run one after another, so each peak is that step's own."""
    from maestro_graph.core.allocator import return_large_buffers
    from maestro_graph.doors.serve.settings import ServeSettings
    from maestro_graph.episode.context import MaestroContext
    from maestro_graph.episode.graph import build_graph
    from maestro_graph.episode.runner import run_episode
    from maestro_graph.features import state
    from maestro_graph.registry import context, handles
    from maestro_graph.registry.registry import Registry

    return_large_buffers()
    png = {"flat": _flat, "busy": _busy}[args.steps.split()[1]]()
    image = webp_bomb_url(png) if args.steps.startswith("WebP") else png
    settings = ServeSettings()
    graph = build_graph(Registry.load(args.registry), settings.catalog().get())
    run = lambda refs: run_episode(graph, COUNT_QUESTION, refs,  # noqa: E731
                                   context=MaestroContext(max_turns=settings.max_turns))
    run([image_to_data_url(load_image(str(ROOT / "examples" / "circles.png")))])  # the experts loaded
    _peak("decode (the door's check)", load_image, image)
    call, decode_all, decode_one = handles.ExpertHandle.call, context.load_images, state.load_image
    handles.ExpertHandle.call = lambda self, method, *a: _peak(f"  {self.name}.{method}", call, self, method, *a)
    context.load_images = lambda refs: _peak("  decode (a skill's images)", decode_all, refs)
    state.load_image = lambda ref: _peak("  decode (the router's features)", decode_one, ref)
    result = run([image])
    print(json.dumps({"image": args.steps, "answer": result.answer, "stop_reason": result.stop_reason,
                      "steps": [f"{s.model}@@{s.skill}" for s in result.steps]}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=8, help="images in the request (the server's cap is 8)")
    parser.add_argument("--registry", default=None, help="registry YAML the server loads (default: the packaged one)")
    parser.add_argument("--source", default=str(ROOT), help="the tree whose maestro_graph/ the server runs (its "
                        "working directory, first on its import path)")
    parser.add_argument("--timeout-s", type=float, default=600.0, help="the server's request timeout")
    parser.add_argument("--concurrent", type=int, default=0, help="one request of each large "
                        "image, then this many at once, on a fresh server each (0: the one request of --images)")
    parser.add_argument("--steps", choices=["WebP flat", "WebP busy", "PNG flat", "PNG busy"], default=None,
                        help="run one episode of this image in this process and print each step's RSS peak")
    args = parser.parse_args()
    if args.steps:
        steps(args)
        return
    if args.concurrent:
        concurrent(args)
        return

    images = bomb_urls(args.images)
    warm = image_to_data_url(load_image(str(ROOT / "examples" / "circles.png")))
    with _server(args, workers=1) as (url, pid), httpx.Client(timeout=args.timeout_s + 30) as client:
        send = lambda refs: client.post(f"{url}/v1/chat/completions", json=bomb_request(refs))  # noqa: E731
        send([warm])  # the experts loaded: the baseline
        start = time.perf_counter()
        idle, grown, reply = peak_rss_growth_mb(pid, lambda: send(images), settle_s=SETTLE_S)
        took = time.perf_counter() - start - SETTLE_S
    body = reply.json()
    answer = body["choices"][0]["message"]["content"] if reply.status_code == 200 else body.get("error")
    print(json.dumps({
        "images": args.images, "question": COUNT_QUESTION, "status": reply.status_code, "answer": answer,
        "idle_rss_mb": round(idle), "peak_growth_mb": round(grown),
        "latency_s": round(took, 1), "server": args.source,
    }))

if __name__ == "__main__":
    main()
