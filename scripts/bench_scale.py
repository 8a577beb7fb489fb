"""Throughput of episodes against workers: a thread pool in this process against Ray workers, in two modes.

`--mode latency` (the default): the expert's cost is latency, not CPU. An OpenAI-compatible chat server on loopback
(started here) answers every request after `--delay-ms`, behind an `openai` card, as a vLLM server or a hosted model
would. Threads and Ray actors on a local cluster both hide that wait, so both grow with the workers until the CPU is
the limit: this mode shows latency hiding, not what a cluster adds.

    nice -n 5 .venv/bin/python scripts/bench_scale.py --workers 1 2 4 8 --out bench-scale.json

`--mode cpu`: the bundled CPU experts (real OCR) on the real items of tests/data/real (tables, documents, charts)
with the neural policy, a cold expert cache in every run (a warm one would make the second run free). Threads in
this process against Ray workers on a two-node loopback cluster whose nodes share no task folder: the head has no
CPUs and the worker node starts in a directory of its own with the task folder hidden (tests/services.py, the
nodes tests/test_cluster.py starts), so the images travel with the work. Every run's records are checked equal.

    nice -n 5 .venv/bin/python scripts/bench_scale.py --mode cpu --workers 1 2 --out bench-scale-cpu.json

Wall-clock throughput is noisy on a shared machine, so each run also reports what the workers' processes spent:
CPU seconds per episode (from each worker process's own CPU time, /proc, so Linux only), resident memory per worker,
and the load average beside it. Before measuring, every worker runs warm-up items (one per task file) so its models
are loaded: start-up is paid once per worker, not per episode. The cpu mode adds one Ray run over the same items with
the expert cache the first Ray run filled: its CPU per episode is everything but the expert calls (policy, graph,
skill code, cache reads). Prints a Markdown table; `--out` writes the figures as JSON and the table beside it (.md).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import shlex
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import zip_longest
from pathlib import Path
from types import ModuleType

from maestro_graph.batch.executors import Executor, RayExecutor, RegistrySource, ThreadExecutor
from maestro_graph.core.tasks import Task, load_tasks
from maestro_graph.episode.context import MaestroContext
from maestro_graph.episode.runner import EpisodeResult, run_tasks
from maestro_graph.registry import Registry

ROOT = Path(__file__).resolve().parents[1]
PAIR = "slow-llm@@general-qa"
REAL_TASKS = [ROOT / "tests" / "data" / "real" / area / "tasks.jsonl" for area in ("tables", "documents", "charts")]
WARM_UP_ROUNDS = 5
"""How often the warm-up items are sent again until every Ray worker has run them (Ray hands items to whichever
worker is idle, so one that started late may have had none)."""


class _SlowChat(BaseHTTPRequestHandler):
    """/v1/chat/completions answering "4" after `delay_s` (a class attribute set by `serve`)."""

    delay_s = 0.2

    def do_POST(self) -> None:
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


@dataclass
class Run:
    """One measured run: `workers` threads or Ray actors over `episodes` items, after the warm-up."""

    executor: str
    """"threads" (in this process) or "ray" (actors on the cluster); "ray, cache warm" for the cpu mode's rerun."""
    workers: int
    episodes: int
    wall_s: float
    worker_cpu_s: float
    """CPU time the worker processes spent during the run (user + system), summed over them."""
    driver_cpu_s: float | None
    """CPU time of this process during a Ray run (None for threads: there the driver is the worker)."""
    rss_mb: list[float]
    """Resident memory of each worker process after the run."""
    warm_rss_mb: list[float]
    """... and after the warm-up, before the run."""
    load_avg: list[float]
    """The machine's load average (1, 5, 15 min) at the end of the run."""
    steps_per_episode: float
    expert_calls_per_episode: float
    same_records: bool | None = None
    """Whether every episode's answer and steps equal the first run's (None: this is the first run)."""


def _usage(pid: int) -> tuple[float, float] | None:
    """(CPU seconds, RSS in MB) of a process on this machine, from the kernel's own accounting; None once it ended
    (a worker Ray restarted)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except FileNotFoundError:
        return None
    cpu_s = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    rss_kb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return cpu_s, rss_kb / 1024


def _processes(executor: Executor) -> Counter[int]:
    """Items done so far by each worker process: this one for threads, each actor's (named `node IP:pid`) on Ray."""
    if isinstance(executor, ThreadExecutor):
        return Counter({os.getpid(): sum(executor.done_by_worker.values())})
    return Counter({int(name.rsplit(":", 1)[1]): n for name, n in executor.done_by_worker.items()})


@dataclass(frozen=True)
class Workload:
    """What every run of one mode does: `warm` on each worker first, then `tasks`, routed by `policy`."""

    policy: str
    context: MaestroContext
    warm: list[Task]
    tasks: list[Task]

    def episodes(self, registry: Registry, executor: Executor, tasks: list[Task]) -> dict[str, EpisodeResult]:
        return {task.id: result for task, result in run_tasks(registry, tasks, self.policy, context=self.context,
                                                              executor=executor, ordered=False)}

    def warm_up(self, registry: Registry, executor: Executor, workers: int) -> None:
        """Run `warm` on every worker process (one process for threads), so each has loaded its models."""
        expected = 1 if isinstance(executor, ThreadExecutor) else workers
        for _ in range(WARM_UP_ROUNDS):
            self.episodes(registry, executor, self.warm * expected)
            done = _processes(executor)
            if len(done) >= expected and min(done.values()) >= len(self.warm):
                return
        print(f"warning: after {WARM_UP_ROUNDS} warm-up rounds the workers ran {dict(done)} warm-up items; a "
              "worker that had none loads its models during the run", file=sys.stderr)


def _signature(result: EpisodeResult) -> tuple:
    """What must not depend on where an episode ran: its answer, stop and each step's pair, answer and error."""
    return (result.answer, result.stop_reason, [(s.model, s.skill, s.answer, s.error_kind) for s in result.steps])


def _same(results: dict[str, EpisodeResult], first: dict[str, EpisodeResult]) -> bool:
    shared = results.keys() & first.keys()
    return bool(shared) and all(_signature(results[k]) == _signature(first[k]) for k in shared)


def measure(label: str, registry: Registry, executor: Executor, workers: int, work: Workload,
            first: dict[str, EpisodeResult] | None) -> tuple[Run, dict[str, EpisodeResult]]:
    """Warm every worker up, then run `work.tasks` once, reading the workers' CPU time and memory around it."""
    work.warm_up(registry, executor, workers)
    before = {pid: usage for pid in _processes(executor) if (usage := _usage(pid)) is not None}
    pids = list(before)
    driver0, start = time.process_time(), time.perf_counter()
    results = work.episodes(registry, executor, work.tasks)
    wall = time.perf_counter() - start
    driver_cpu = time.process_time() - driver0
    after = {pid: usage for pid in pids if (usage := _usage(pid)) is not None}
    broken = {task_id: r.error for task_id, r in results.items() if r.error}
    if broken:
        raise SystemExit(f"{label}, {workers} workers: episodes could not run: {broken}")
    if after.keys() != set(pids):
        print(f"warning: {label} x{workers}: worker processes {sorted(set(pids) - after.keys())} ended during the "
              "run (Ray restarted them); their CPU time is not counted", file=sys.stderr)
    n = len(results)
    run = Run(label, workers, n, wall, sum(after[p][0] - before[p][0] for p in after),
              None if isinstance(executor, ThreadExecutor) else driver_cpu,
              [round(after[p][1]) for p in after], [round(before[p][1]) for p in pids], list(os.getloadavg()),
              sum(len(r.steps) for r in results.values()) / n,
              sum(len(s.calls) for r in results.values() for s in r.steps) / n,
              None if first is None else _same(results, first))
    print(f"{label} x{workers}: {n / wall:.2f} episodes/s, {run.worker_cpu_s / n:.3f} CPU s/episode, "
          f"load {run.load_avg[0]:.1f}", file=sys.stderr)
    return run, results


def table(runs: list[Run]) -> str:
    header = ("| executor | workers | episodes | wall (s) | episodes/s | worker CPU s/episode | driver CPU s/episode | "
              "RSS per worker (MB) | load avg (1 min) | records equal |")
    lines = [header,
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in runs:
        driver = "-" if r.driver_cpu_s is None else f"{r.driver_cpu_s / r.episodes:.3f}"
        same = "(first)" if r.same_records is None else ("yes" if r.same_records else "**no**")
        lines.append(f"| {r.executor} | {r.workers} | {r.episodes} | {r.wall_s:.2f} | {r.episodes / r.wall_s:.2f} | "
                     f"{r.worker_cpu_s / r.episodes:.3f} | {driver} | {', '.join(f'{m:.0f}' for m in r.rss_mb)} | "
                     f"{r.load_avg[0]:.2f} | {same} |")
    return "\n".join(lines)


def latency_mode(args: argparse.Namespace) -> tuple[list[Run], dict]:
    import ray

    folder = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    url = serve(args.delay_ms / 1000)
    config, task_file = write_inputs(folder, url, args.items_per_worker * max(args.workers) + 1)
    source = RegistrySource(config)
    registry = source.load()
    tasks, _ = load_tasks(task_file)
    work = Workload(f"fixed:{PAIR}", MaestroContext(max_turns=1), tasks[:1], tasks[1:])
    runs: list[Run] = []
    first = None
    for workers in args.workers:
        run, results = measure("threads", registry, ThreadExecutor(registry, workers), workers,
                               replace(work, tasks=work.tasks[:args.items_per_worker * workers]), first)
        runs.append(run)
        first = first or results
    ray.init(num_cpus=max(args.workers), include_dashboard=False, log_to_driver=False)
    try:
        for workers in args.workers:
            executor = RayExecutor(source, workers=workers)
            runs.append(measure("ray", registry, executor, workers,
                                replace(work, tasks=work.tasks[:args.items_per_worker * workers]), first)[0])
            executor.close()
    finally:
        ray.shutdown()
        shutil.rmtree(folder, ignore_errors=True)
    if not all(r.answer == "4" for r in first.values()):
        raise SystemExit("the stub expert did not answer")
    return runs, {"delay_ms": args.delay_ms}


def _services() -> ModuleType:
    """tests/services.py, which starts the loopback Ray nodes of tests/test_cluster.py. The tests folder is not a
    package: it goes on the end of the import path, as pytest puts it there, so services.py finds its neighbours."""
    sys.path.append(str(ROOT / "tests"))
    return importlib.import_module("services")


def _real_items(folder: Path, files: list[Path], items: int | None) -> tuple[list[Task], list[Task]]:
    """Copies of the task files' folders under `folder` (the task folder the worker node cannot see); returns the
    warm-up items (the first of each file) and the measured ones (the rest, taken from the files in turn)."""
    per_file = []
    for i, file in enumerate(files):
        copy = folder / f"{i}-{file.parent.name}"
        shutil.copytree(file.parent, copy)
        tasks, problems = load_tasks(copy / file.name)
        if problems or len(tasks) < 2:
            raise SystemExit(f"{file}: needs at least two valid items (problems: {problems})")
        per_file.append(tasks)
    rest = [task for group in zip_longest(*(t[1:] for t in per_file)) for task in group if task is not None]
    return [t[0] for t in per_file], rest[:items]


def cpu_mode(args: argparse.Namespace) -> tuple[list[Run], dict]:
    services = _services()
    os.environ.update(services.ray_env())  # the cluster's token, before Ray is imported
    import ray

    folder = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    hidden, elsewhere = folder / "tasks", folder / "worker-node"
    hidden.mkdir()
    elsewhere.mkdir()
    warm, tasks = _real_items(hidden, args.task_files, args.items)
    work = Workload(args.policy, MaestroContext(), warm, tasks)

    def source(name: str) -> RegistrySource:  # a cold cache of the run's own
        return RegistrySource(args.registry, cache_dir=folder / f"cache-{name}")

    runs: list[Run] = []
    first = None
    for workers in args.workers:
        registry = source(f"threads-{workers}").load()
        run, results = measure("threads", registry, ThreadExecutor(registry, workers), workers, work, first)
        runs.append(run)
        first = first or results

    def on_ray(label: str, workers: int, cache: str, address: str) -> Run:
        executor = RayExecutor(source(cache), workers=workers, address=address)
        try:
            return measure(label, registry, executor, workers, work, first)[0]
        finally:
            executor.close()

    try:
        with services.ray_two_nodes(hidden=hidden, workdir=elsewhere, worker_cpus=max(args.workers)) as address:
            try:
                runs += [on_ray("ray", workers, f"ray-{workers}", address) for workers in args.workers]
                # the first Ray run's cache, full now: what an episode costs besides its expert calls
                runs.append(on_ray("ray, cache warm", 1, f"ray-{args.workers[0]}", address))
            finally:
                ray.shutdown()
    except services.pytest.skip.Exception as exc:  # this machine cannot hide a folder from a second node
        raise SystemExit(f"no two-node cluster here: {exc}") from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return runs, {"policy": args.policy, "registry": str(args.registry or "packaged"),
                  "task_files": [str(f) for f in args.task_files], "warm_up_items": len(warm)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["latency", "cpu"], default="latency",
                        help="latency: an expert server that waits; cpu: the bundled CPU experts on real items.")
    parser.add_argument("--workers", type=int, nargs="+", default=None,
                        help="Worker counts to measure (default: 1 2 4 8 for latency, 1 2 for cpu).")
    parser.add_argument("--delay-ms", type=float, default=200.0, help="latency: the expert server's latency per call.")
    parser.add_argument("--items-per-worker", type=int, default=12, help="latency: items per worker.")
    parser.add_argument("--task-files", type=Path, nargs="+", default=REAL_TASKS,
                        help="cpu: the task files (their folders are copied; the first item of each warms up).")
    parser.add_argument("--items", type=int, default=None, help="cpu: measure at most this many items.")
    parser.add_argument("--policy", default="neural", help="cpu: the policy that routes.")
    parser.add_argument("--registry", type=Path, default=None, help="cpu: registry config (default: the packaged one).")
    parser.add_argument("--out", type=Path, help="Also write the figures as JSON here, and the table beside it (.md).")
    args = parser.parse_args()
    args.workers = args.workers or ([1, 2, 4, 8] if args.mode == "latency" else [1, 2])
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    runs, settings = (latency_mode if args.mode == "latency" else cpu_mode)(args)
    markdown = table(runs)
    print(markdown)
    if args.out:
        args.out.write_text(json.dumps({
            "mode": args.mode, "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "command": shlex.join(["scripts/bench_scale.py", *sys.argv[1:]]), "cpus": os.cpu_count(), **settings,
            "runs": [asdict(r) for r in runs]}, indent=2))
        args.out.with_suffix(".md").write_text(markdown + "\n")


if __name__ == "__main__":
    main()
