#!/usr/bin/env python
"""Generalisation benchmark: does a trained policy keep working when the registry or the questions change, without
retraining? For each experiment and seed, train a neural policy on a registry with something held out, then evaluate
the same checkpoint on the registry without it ("before") and with it added back ("after"), beside the oracle.

Experiments (each a held-out part of `--registry` plus, for `zbar`, an expert no run has ever trained with):
  barcode      the barcode readers and the skill that needs them (capability `barcode`)
  second-ocr   Tesseract held out; trained with RapidOCR only
  doc-fields   the `document-fields` skill held out
  zbar         trained on `--registry`, evaluated with `--zbar-registry` (the same plus the ZBar card)
  source:NAME  leave one source out: trained on the training items of every other source, evaluated on NAME's

    .venv/bin/python scripts/generalisation.py --train runs/real-dev/train.jsonl --tasks runs/real-dev/test.jsonl \
        --out runs/generalisation --seeds 0 1 --steps 60 --registry configs/registry-nolm.yaml

With `--router lm` the trained policy is the LM router instead (`maestro train-lm`'s recipe, `--lm-config`): its SFT
warm start imitates a teacher's episodes (`--teacher`, a prediction file on the `--train` items: the README's
recipe uses the neural policy's), re-rendered with the held-out registry and without the items and episodes that
need the held-out part, so the router never reads a held-out card before it is evaluated:

    .venv/bin/python scripts/generalisation.py --router lm --experiments barcode --seeds 0 1 \
        --train runs/val-real/train.jsonl --teacher runs/lm/neural-val-train.jsonl --tasks runs/real-dev/test.jsonl \
        --domains barcode --max-turns 2 --registry configs/registry-nolm.yaml --out runs/generalisation-lm

Writes OUT/table.md, OUT/results.json and OUT/generalisation.png (accuracy before/after per experiment, the oracle's
after as the ceiling). Every run is resumable (rerun the same command).
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import yaml  # noqa: E402

from maestro_graph.cache import ExpertCache  # noqa: E402
from maestro_graph.configs import add_arguments, from_arguments  # noqa: E402
from maestro_graph.graph import MaestroContext  # noqa: E402
from maestro_graph.registry import Registry  # noqa: E402
from maestro_graph.rl.config import GRPOConfig  # noqa: E402
from maestro_graph.rl.experiments import evaluate_into, train_resumable  # noqa: E402
from maestro_graph.rl.export import export_file  # noqa: E402
from maestro_graph.rl.trl_train import load_train_config, train_lm  # noqa: E402
from maestro_graph.tasks import Task, load_task_files  # noqa: E402


@dataclass
class Experiment:
    """What is held out of training, and where the checkpoint is evaluated. `keep` selects the training items (it
    drops those only the held-out part could answer, by the items' domain or source: training data, never a policy
    input); `evaluated` selects the test items."""

    name: str
    before: Registry
    after: Registry
    keep: Callable[[Task], bool]
    evaluated: Callable[[Task], bool] = lambda t: True


def _held(full: Registry, *, capability: str | None = None, models: set[str] = frozenset(),
          skills: set[str] = frozenset()) -> Registry:
    if capability:
        models = models | {n for n, h in full.models.items() if capability in h.card.capabilities}
        skills = skills | {s.name for s in full.skills.values() if capability in s.requires}
    return full.without(models=models, skills=skills)


def experiments(names: list[str], full: Registry, zbar: Registry | None) -> list[Experiment]:
    out = []
    for name in names:
        if name == "barcode":
            out.append(Experiment(name, _held(full, capability="barcode"), full, lambda t: t.domain != "barcode"))
        elif name == "second-ocr":
            out.append(Experiment(name, _held(full, models={"tesseract"}), full, lambda t: True))
        elif name == "doc-fields":
            out.append(Experiment(name, _held(full, skills={"document-fields"}), full, lambda t: True))
        elif name == "zbar":
            if zbar is None:
                raise SystemExit("the zbar experiment needs --zbar-registry (configs/registry-zbar.yaml)")
            out.append(Experiment(name, full, zbar, lambda t: True))
        elif name.startswith("source:"):
            source = name.partition(":")[2]
            out.append(Experiment(name, full, full, lambda t, s=source: t.source != s,
                                  lambda t, s=source: t.source == s))
        else:
            raise SystemExit(f"unknown experiment {name!r}")
    return out


def _train_lm_router(exp: Experiment, args: argparse.Namespace, seed: int, run: Path) -> str:
    """The LM recipe on the experiment's registry; returns the trained router's policy name. The SFT file holds the
    teacher's episodes on the kept items that call only pairs of that registry, rendered from its cards."""
    overrides = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.lm_set)}
    sft = run.parent / "sft.jsonl"
    config = load_train_config(args.lm_config, tasks=[str(args.train)], out_dir=str(run / "train"), seed=seed,
                               registry=args.registry, cache_dir=args.cache_dir, sft_data=str(sft),
                               **overrides)
    if config.sft_steps and not sft.is_file():
        ids = set(exp.before.pair_ids())
        kept, bad = export_file(args.teacher, args.train, sft, "trl", exp.before, config.export_options,
                                keep=lambda t, e: exp.keep(t) and all(s.pair in ids for s in e.steps
                                                                      if s.error_kind != "policy"))
        print(f"{exp.name}: {kept} teacher episodes kept ({len(bad)} unreadable lines) -> {sft}")
    train_lm(config, registry=exp.before)
    return f"lm:transformers:{run / 'train' / 'final'}#choice"


def _accuracy(results: dict, policy: str) -> float:
    return results["policies"][policy]["accuracy"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", required=True, type=Path)
    parser.add_argument("--tasks", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--experiments", nargs="+", default=["barcode", "second-ocr", "doc-fields", "zbar"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--registry", default=None)
    parser.add_argument("--zbar-registry", default=None)
    parser.add_argument("--limit", type=int, default=None, help="evaluate on the first N test items only")
    parser.add_argument("--cache-dir", default=".maestro-cache")
    parser.add_argument("--domains", nargs="+", default=None, help="evaluate only the test items of these domains")
    parser.add_argument("--router", choices=("neural", "lm"), default="neural",
                        help="the policy trained on the held-out registry: the neural policy (GRPOConfig flags "
                             "below) or the LM router (--lm-config)")
    parser.add_argument("--lm-config", type=Path, default=Path("configs/train-lm-cpu.yaml"),
                        help="--router lm: the `maestro train-lm` recipe (its tasks, registry and out_dir are the "
                             "experiment's)")
    parser.add_argument("--teacher", type=Path, default=None,
                        help="--router lm: prediction file on the --train items whose episodes SFT imitates")
    parser.add_argument("--lm-set", nargs="+", default=[], metavar="KEY=VALUE",
                        help="--router lm: override fields of --lm-config, e.g. sft_steps=100 steps=0")
    add_arguments(parser, GRPOConfig, exclude=("seed",))
    args = parser.parse_args()
    if args.router == "lm" and args.teacher is None:
        parser.error("--router lm needs --teacher (the episodes its SFT warm start imitates)")
    torch.set_num_threads(1)
    cache = ExpertCache(args.cache_dir)
    full = Registry.load(args.registry, cache=cache)
    zbar = Registry.load(args.zbar_registry, cache=cache) if args.zbar_registry else None
    train, _ = load_task_files([args.train])
    test, _ = load_task_files([args.tasks])
    rows = []
    # --max-turns (a GRPOConfig flag) is also the evaluated episodes' budget; the LM recipe trains with 2
    context = MaestroContext(max_turns=args.max_turns) if args.max_turns else None
    for exp in experiments(args.experiments, full, zbar):
        def select(t: Task, exp: Experiment = exp) -> bool:
            return exp.evaluated(t) and (not args.domains or t.domain in args.domains)

        items = [t for t in test if select(t)][: args.limit]
        for seed in args.seeds:
            run = args.out / exp.name / f"seed{seed}"
            if args.router == "lm":
                policy = _train_lm_router(exp, args, seed, run)
            else:
                policy = train_resumable(exp.before, [t for t in train if exp.keep(t)],
                                         from_arguments(GRPOConfig, args, seed=seed), run / "train")
            row = {"experiment": exp.name, "router": args.router, "seed": seed, "items": len(items)}
            for label, registry in (("before", exp.before), ("after", exp.after)):
                done = run / label / "results.json"
                results = (json.loads(done.read_text()) if done.is_file() else
                           evaluate_into(run / label, registry, [args.tasks], [policy, "oracle"],
                                         select=select, limit=args.limit, context=context))
                row[label] = _accuracy(results, policy)
                row[f"oracle_{label}"] = _accuracy(results, "oracle")
            rows.append(row)
            print(json.dumps(row))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(rows, indent=2))
    lines = ["| experiment | router | seed | items | before | after | oracle after | after / oracle |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        share = r["after"] / r["oracle_after"] if r["oracle_after"] else float("nan")
        lines.append(f"| {r['experiment']} | {r['router']} | {r['seed']} | {r['items']} | {r['before']:.3f} | "
                     f"{r['after']:.3f} | {r['oracle_after']:.3f} | {share:.2f} |")
    (args.out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    _plot(rows, args.out / "generalisation.png")


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["experiment"] for r in rows))
    fig, ax = plt.subplots(figsize=(1.8 * len(names) + 2, 3.2))
    for i, name in enumerate(names):
        mine = [r for r in rows if r["experiment"] == name]
        ax.scatter([i - 0.15] * len(mine), [r["before"] for r in mine], color="tab:gray", label="before" if not i else None)
        ax.scatter([i + 0.15] * len(mine), [r["after"] for r in mine], color="tab:blue", label="after" if not i else None)
        ax.hlines(max(r["oracle_after"] for r in mine), i - 0.3, i + 0.3, color="tab:green",
                  label="oracle (after)" if not i else None)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("accuracy")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()
