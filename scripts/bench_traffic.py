"""A real `maestro serve` under traffic: the trust suite's traffic checks (16 requests at once of
images at the pixel cap, a trickling image host, clients that go away, another key's thread) and 8 valid requests
of a 40-megapixel PNG at once, against a server running the package of any tree.

    .venv/bin/python scripts/bench_traffic.py                     # this tree
    .venv/bin/python scripts/bench_traffic.py --source /tmp/old   # the server's package from another tree
    # (e.g. git archive HEAD~1 maestro_graph | tar -x -C /tmp/old)
    .venv/bin/python scripts/bench_traffic.py --cases disconnect trickle

The server holds two API keys, a SQLite checkpoint database, the trickler on its allow-list and the shapes policy on
the suite's fast experts with a 60 s card timeout (`maestro_graph.operations.reliability.traffic`). Prints one JSON
object per case. A tree without several keys answers every request 401: give it one (`--one-key`) for the other cases.
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

from maestro_graph.core.environment import BENCH_KEYS
from maestro_graph.doors.serve.loopback import free_port, wait_until_up
from maestro_graph.images.load import image_to_data_url, load_image
from maestro_graph.operations.reliability.image_checks import bomb_request, bomb_urls
from maestro_graph.operations.reliability.target import peak_rss_growth_mb
from maestro_graph.operations.reliability.traffic import (
    OWNER_KEYS,
    Trickler,
    disconnect_case,
    image_memory_case,
    ownership_case,
    post_at_once,
    traffic_server_args,
    trickle_case,
)

ROOT = Path(__file__).resolve().parents[1]
CASES = ("memory", "valid", "trickle", "disconnect", "owner")


def _valid(url: str, pid: int, headers: dict[str, str], count: int) -> dict:
    """`count` requests at once, each one valid 6300x6300 PNG (different ones): statuses and the RSS peak above a
    server that has answered one such request (its models loaded)."""
    bodies = [{**bomb_request([image]), "max_turns": 2} for image in bomb_urls(count + 1)]
    post_at_once(url, bodies[:1], headers, 600)
    bodies = bodies[1:]
    start = time.perf_counter()
    idle, grown, statuses = peak_rss_growth_mb(pid, lambda: post_at_once(url, bodies, headers, 600), settle_s=2.0)
    return {"statuses": sorted(statuses), "rss_idle_mb": round(idle), "rss_peak_growth_mb": round(grown),
            "seconds": round(time.perf_counter() - start, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=str(ROOT), help="the tree whose maestro_graph/ the server runs")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--one-key", action="store_true", help="give the server only the first key")
    parser.add_argument("--valid-requests", type=int, default=8, help="requests at once in the `valid` case")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-traffic-"))
    trickler, port = Trickler(), free_port()
    keys = OWNER_KEYS[:1] if args.one_key else OWNER_KEYS
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": args.source,
           BENCH_KEYS.name: ",".join(keys)}
    maestro = Path(sys.executable).parent / "maestro"
    command = [str(maestro), "serve", "--port", str(port),
               *traffic_server_args(folder, trickler, BENCH_KEYS.name)]
    url, headers = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {OWNER_KEYS[0]}"}
    image = image_to_data_url(load_image(str(ROOT / "examples" / "qrcode.png")))
    with (folder / "serve.log").open("w") as log:
        server = subprocess.Popen(command, cwd=args.source, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until_up(f"{url}/healthz", timeout_s=180)
        for name in args.cases:
            if name == "valid":
                print(json.dumps({"case": name, **_valid(url, server.pid, headers, args.valid_requests)}), flush=True)
                continue
            case = {"memory": lambda: image_memory_case(url, server.pid, headers),
                    "trickle": lambda: trickle_case(url, trickler, headers),
                    "disconnect": lambda: disconnect_case(url, server.pid, image, headers),
                    "owner": lambda: ownership_case(url, image)}[name]()
            print(json.dumps({"case": name, "ok": case.ok, "detail": case.detail}), flush=True)
    finally:
        server.terminate()
        server.wait(timeout=150)  # a tree without the fetch deadline may still be reading the trickler
        trickler.close()
    print(json.dumps({"log": str(folder / "serve.log")}))


if __name__ == "__main__":
    main()
