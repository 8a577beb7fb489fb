"""Throughput of episodes against the number of Ray workers, with an expert whose cost is latency, not CPU: an
OpenAI-compatible chat server on loopback (started here) that answers every request after `--delay-ms`, behind an
`openai` card, as a vLLM server or a hosted model would be. Each worker is a Ray actor holding its own registry and
running one episode at a time, so throughput should grow with the workers until the CPU is the limit.

    .venv/bin/python scripts/bench_scale.py --workers 1 2 4 8 --out bench-scale.json

Prints a Markdown table (docs/scale.md) and the measured per-episode costs: the episode latency,
the orchestration overhead on top of the expert's latency, and the CPU time a worker spends per episode.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from maestro_graph.batch.executors import RayExecutor, RegistrySource, ThreadExecutor
from maestro_graph.core.tasks import load_tasks
from maestro_graph.episode.graph import MaestroContext
from maestro_graph.episode.runner import run_tasks

ROOT = Path(__file__).resolve().parents[1]
PAIR = "slow-llm@@general-qa"


class _SlowChat(BaseHTTPRequestHandler):
    """/v1/chat/completions answering "4" after `delay_s` (a class attribute set by `serve`)."""

    delay_s = 0.2

    def do_POST(self) -> None:  # noqa: N802 - the http.server naming
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        time.sleep(self.delay_s)
        body = json.dumps({"choices": [{"message": {"role": "assistant", "content": "4"}}],
                           "usage": {"prompt_tokens": 20, "completion_tokens": 1}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


def serve(delay_s: float) -> str:
    """Start the stub server in a daemon thread; returns its base URL."""
    _SlowChat.delay_s = delay_s
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowChat)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/v1"


def write_inputs(folder: Path, url: str, items: int) -> tuple[Path, Path]:
    registry = folder / "registry.yaml"
    registry.write_text(f"""\
skill_dirs: ["{ROOT / 'skills'}"]
skills: [general-qa]
models:
  - name: slow-llm
    description: A chat model behind an OpenAI-compatible server that answers after a fixed delay.
    capabilities: [chat]
    backend: {{type: openai, base_url: "{url}", model: stub}}
    concurrency: 64
    cacheable: false
""")
    tasks = folder / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is {i} + 4 - {i}?", "images": [],
                                         "answer": "4", "answer_type": "number", "source": "bench"}) + "\n"
                             for i in range(items)))
    return registry, tasks


def measure(executor, registry, tasks) -> tuple[float, list]:
    start = time.perf_counter()
    results = [r for _, r in run_tasks(registry, tasks, f"fixed:{PAIR}", context=MaestroContext(max_turns=1),
                                       executor=executor, ordered=False)]
    return time.perf_counter() - start, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--delay-ms", type=float, default=200.0, help="The expert server's latency per call.")
    parser.add_argument("--items-per-worker", type=int, default=12)
    parser.add_argument("--out", type=Path, help="Also write the figures as JSON here.")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import ray

    folder = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    url = serve(args.delay_ms / 1000)
    config, task_file = write_inputs(folder, url, args.items_per_worker * max(args.workers))
    source = RegistrySource(config)
    registry = source.load()
    tasks, _ = load_tasks(task_file)

    # per-episode costs in this process, one episode at a time: latency, and CPU time per episode
    cpu0 = time.process_time()
    wall, results = measure(ThreadExecutor(registry, 1), registry, tasks[:20])
    cpu_per_episode = (time.process_time() - cpu0) / 20
    assert all(r.answer == "4" and len(r.steps) == 1 for r in results), "the stub expert did not answer"
    latency = wall / 20
    rows = []
    ray.init(num_cpus=max(args.workers), include_dashboard=False, log_to_driver=False)
    for workers in args.workers:
        executor = RayExecutor(source, workers=workers)
        measure(executor, registry, tasks[:workers])  # warm-up: every actor has built its registry and graph
        n = args.items_per_worker * workers
        wall, results = measure(executor, registry, tasks[:n])
        assert all(r.answer == "4" for r in results)
        rows.append({"workers": workers, "episodes": n, "wall_s": wall, "episodes_per_s": n / wall})
        executor.close()
    ray.shutdown()
    base = rows[0]["episodes_per_s"]
    print(f"expert latency {args.delay_ms:.0f} ms; one episode in-process: {latency * 1000:.0f} ms wall "
          f"({latency * 1000 - args.delay_ms:.0f} ms orchestration), {cpu_per_episode * 1000:.0f} ms CPU\n")
    print("| Ray workers | episodes | wall (s) | episodes/s | speed-up |")
    print("|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['workers']} | {row['episodes']} | {row['wall_s']:.2f} | {row['episodes_per_s']:.2f} | "
              f"{row['episodes_per_s'] / base:.1f}x |")
    if args.out:
        args.out.write_text(json.dumps({"delay_ms": args.delay_ms, "episode_latency_s": latency,
                                        "episode_cpu_s": cpu_per_episode, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
