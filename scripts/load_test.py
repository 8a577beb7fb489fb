"""Bounded load test of `maestro serve` on loopback: single-request latency first, then N concurrent requests.

Starts its own server (a free port, the default registry, no expert cache) unless --url names a running one, and
prints p50/p99 latency and throughput of the concurrent burst next to the sequential single-request figures.
Exits non-zero if any request fails.

    python scripts/load_test.py                       # 50 concurrent requests, 2 workers
    python scripts/load_test.py --requests 50 --workers 2 --image examples/circles.png \
        --question "How many circles are in the image?"
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


async def _one(client: httpx.AsyncClient, body: dict) -> tuple[float, str | None, str | None]:
    start = time.perf_counter()
    try:
        response = await client.post("/v1/chat/completions", json=body)
    except httpx.HTTPError as exc:
        return time.perf_counter() - start, None, f"{exc.__class__.__name__}: {exc}"
    elapsed = time.perf_counter() - start
    if response.status_code != 200:
        return elapsed, None, f"HTTP {response.status_code}: {response.text[:200]}"
    return elapsed, response.json()["choices"][0]["message"]["content"], None


async def _measure(url: str, body: dict, singles: int, burst: int, key: str | None) -> dict:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    limits = httpx.Limits(max_connections=burst + 4)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=600, limits=limits) as client:
        await _one(client, body)  # warm-up: experts load on first use
        single = [await _one(client, body) for _ in range(singles)]
        start = time.perf_counter()
        results = await asyncio.gather(*(_one(client, body) for _ in range(burst)))
        wall = time.perf_counter() - start
    errors = [e for _, _, e in single + results if e]
    latencies = [t for t, _, e in results if not e]
    single_s = statistics.median(t for t, _, _ in single)
    return {
        "requests": burst,
        "errors": len(errors),
        "first_errors": errors[:3],
        "answers": sorted({a for _, a, _ in results if a is not None}),
        "single_latency_s": round(single_s, 3),
        "p50_s": round(_percentile(latencies, 50), 3) if latencies else None,
        "p99_s": round(_percentile(latencies, 99), 3) if latencies else None,
        "wall_s": round(wall, 3),
        "throughput_rps": round(len(latencies) / wall, 2),
        "sequential_rps": round(1 / single_s, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running server (default: start `maestro serve` on a free port)")
    parser.add_argument("--requests", type=int, default=50, help="concurrent requests in the burst")
    parser.add_argument("--singles", type=int, default=5, help="sequential requests for the single latency")
    parser.add_argument("--workers", type=int, default=2, help="episode worker threads of the started server")
    parser.add_argument("--image", type=Path, default=ROOT / "examples" / "qrcode.png")
    parser.add_argument("--question", default="What text does the QR code encode?")
    parser.add_argument("--api-key-env", default="MAESTRO_API_KEY", help="variable holding the key, if any")
    args = parser.parse_args()

    image = f"data:image/png;base64,{base64.b64encode(args.image.read_bytes()).decode()}"
    body = {"model": "maestro", "messages": [{"role": "user", "content": [
        {"type": "text", "text": args.question}, {"type": "image_url", "image_url": {"url": image}}]}]}
    key = os.environ.get(args.api_key_env) or None
    proc = None
    url = args.url
    if url is None:
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "maestro"), "serve", "--port", str(port), "--log-level", "warning",
             "--workers", str(args.workers), "--max-episodes", str(max(64, args.requests))], env=env)
        deadline = time.time() + 120
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                if proc.poll() is not None or time.time() > deadline:
                    print("the server did not start", file=sys.stderr)
                    return 2
                time.sleep(0.3)
    try:
        report = asyncio.run(_measure(url, body, args.singles, args.requests, key))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
    report["workers"] = args.workers if proc is not None else None
    print(json.dumps(report, indent=2))
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
