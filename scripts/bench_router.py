#!/usr/bin/env python
"""Benchmark the router: decision latency of a policy (p50/p95) and the share of episode time spent outside the
experts (graph, policy, skill code), with a cold expert cache (or a warm one with --cache-dir, which isolates the
decisions from the OCR running between them). Prints figures; asserts nothing.

    .venv/bin/python scripts/bench_router.py --tasks TASKS.jsonl --policy neural --n 40
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from maestro_graph.cache.store import ExpertCache  # noqa: E402
from maestro_graph.core.tasks import load_tasks  # noqa: E402
from maestro_graph.episode.graph import build_graph  # noqa: E402
from maestro_graph.episode.runner import run_episode  # noqa: E402
from maestro_graph.policy import make_policy  # noqa: E402
from maestro_graph.registry import Registry  # noqa: E402


class Timed:
    """Wraps a policy and records how long each decision takes."""

    def __init__(self, policy):
        self.policy = policy
        self.name = policy.name
        self.stochastic = policy.stochastic
        self.seconds: list[float] = []

    def distribution(self, view, space):
        start = time.perf_counter()
        dist = self.policy.distribution(view, space)
        self.seconds.append(time.perf_counter() - start)
        return dist


def pause_penalty(repeats: int = 15) -> tuple[float, float]:
    """Median ms of a fixed toy decision (six 400x128 layers) back to back, and right after a 100 ms pause. On a
    shared VM the second is many times the first: the cost a decision pays for following an expert call, whatever
    the policy does. Printed beside the figures so that a cold-cache p50 can be read against the machine."""
    layers = [torch.randn(128, 400) for _ in range(6)]

    def decision() -> float:
        start = time.perf_counter()
        x = torch.randn(400)
        for w in layers:
            x = torch.cat([torch.tanh(w @ x), torch.zeros(272)])
        return (time.perf_counter() - start) * 1000

    back_to_back, after_pause = [], []
    for _ in range(repeats):
        back_to_back.append(decision())
        time.sleep(0.1)
        after_pause.append(decision())
    return float(np.median(back_to_back)), float(np.median(after_pause))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", required=True)
    parser.add_argument("--policy", default="neural")
    parser.add_argument("--registry", default=None)
    parser.add_argument("--n", type=int, default=40, help="episodes")
    parser.add_argument("--cache-dir", default=None, help="use this expert cache (default: none, every call cold)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    registry = Registry.load(args.registry, cache=ExpertCache(args.cache_dir) if args.cache_dir else None)
    policy = Timed(make_policy(args.policy))
    graph = build_graph(registry, policy)
    tasks, _ = load_tasks(args.tasks)
    tasks = [t for t in tasks if t.images][: args.n]
    run_episode(graph, tasks[0].question, tasks[0].images, tasks[0].choices)  # load models once, not measured
    policy.seconds.clear()
    episode_s, expert_s, skill_s, first_s = [], [], [], []
    for task in tasks:
        before = len(policy.seconds)
        result = run_episode(graph, task.question, task.images, task.choices)
        episode_s.append(result.latency_s)
        first_s.append(policy.seconds[before])
        # a cached step or call did not run its expert now: its recorded latency is from when it did
        expert_s.append(sum(c["latency_s"] for s in result.steps if not s.cached for c in s.calls
                            if not c.get("cached")))
        skill_s.append(sum(s.latency_s for s in result.steps if not s.cached) - expert_s[-1])
    decisions = np.asarray(policy.seconds) * 1000
    outside = 1 - sum(expert_s) / sum(episode_s)
    per_episode = {"first decision": sum(first_s), "later decisions": sum(policy.seconds) - sum(first_s),
                   "skill code": sum(skill_s)}
    per_episode["graph and the rest"] = sum(episode_s) - sum(expert_s) - sum(per_episode.values())
    print(f"policy {policy.name}: {len(decisions)} decisions, p50 {np.percentile(decisions, 50):.2f} ms, "
          f"p95 {np.percentile(decisions, 95):.2f} ms")
    steady, paused = pause_penalty()
    print(f"this machine: a fixed toy decision takes {steady:.2f} ms back to back, {paused:.2f} ms after a 100 ms "
          f"pause ({paused / steady:.0f}x)")
    print(f"{len(tasks)} episodes, {sum(episode_s):.1f} s in all, {sum(expert_s):.1f} s inside expert calls: "
          f"{outside:.1%} of episode time outside the experts (graph, policy, skill code)")
    print("outside the experts, ms per episode: " + ", ".join(f"{k} {1000 * v / len(tasks):.1f}"
                                                              for k, v in per_episode.items()))


if __name__ == "__main__":
    main()
