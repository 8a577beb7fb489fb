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
warm start imitates a teacher's episodes (`--teacher`, a prediction file on the `--train` items: the documented
recipe, docs/lm-router.md, uses the neural policy's), rendered from the held-out registry's cards (families hidden,
cards paraphrased, option numbers shuffled per rendering) and without the items and episodes that need the held-out
part, so the router never reads a held-out card before it is evaluated:

    .venv/bin/python scripts/generalisation.py --router lm --experiments barcode --seeds 0 1 \
        --train runs/val-real/train.jsonl --teacher runs/lm/neural-val-train.jsonl --tasks runs/real-dev/test.jsonl \
        --domains barcode --max-turns 2 --registry configs/registry-nolm.yaml --out runs/generalisation-lm

A recipe whose router ranks its options by a neural policy (`order: neural`) gets one trained on the same held-out
registry with the NeuralGRPOConfig flags, so no part of the router has seen the held-out part.

Writes OUT/table.md, OUT/results.json and OUT/generalisation.png (accuracy before/after per experiment, the oracle's
after as the ceiling). Every run is resumable (rerun the same command).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import yaml  # noqa: E402

from maestro_graph.batch.measure import measure_pairs  # noqa: E402
from maestro_graph.cache.store import ExpertCache  # noqa: E402
from maestro_graph.core.configs import add_arguments, from_arguments  # noqa: E402
from maestro_graph.core.tasks import Task, load_task_files  # noqa: E402
from maestro_graph.episode.context import MaestroContext  # noqa: E402
from maestro_graph.policy.ensemble import ENSEMBLE_SEP  # noqa: E402
from maestro_graph.policy.lm.policy import ROUTER_FILE  # noqa: E402
from maestro_graph.registry import Registry  # noqa: E402
from maestro_graph.registry.reach import REACH_FLOOR, reach_path  # noqa: E402
from maestro_graph.training.rl.config import NeuralGRPOConfig  # noqa: E402
from maestro_graph.training.rl.experiments import evaluate_into, train_resumable  # noqa: E402
from maestro_graph.training.rl.trl_train import load_train_config, train_lm  # noqa: E402


@dataclass
class Experiment:
    """What is held out of training, and where the checkpoint is evaluated. `after` is the registry evaluated last;
    training and the "before" evaluation use it without `models` and `skills`. `keep` selects the training items (it
    drops those only the held-out part could answer, by the items' domain or source: training data, never a policy
    input); `evaluated` selects the test items; `calibrate` the training items a profile is measured on (every one
    for a held-out expert, which is profiled on its own kind of items when it is added; none of a held-out source)."""

    name: str
    after: Registry
    keep: Callable[[Task], bool]
    models: set[str] = frozenset()
    skills: set[str] = frozenset()
    evaluated: Callable[[Task], bool] = lambda t: True
    calibrate: Callable[[Task], bool] = lambda t: True
    routers: tuple[str, ...] = ()
    """Trained routers evaluated beside the policy, fitted on the same training items (leave-one-source-out)."""
    domain: str | None = None
    """The domain the held-out part serves (its items' accuracy is compared with the oracle's; every other domain
    with itself before); None: the part serves every domain."""

    def registries(self, after: Registry) -> tuple[Registry, Registry]:
        """(before, after) from `after` (the experiment's registry, profiled or not)."""
        return after.without(models=self.models, skills=self.skills), after


def _family(full: Registry, capability: str) -> dict:
    return {"models": {n for n, h in full.models.items() if capability in h.card.capabilities},
            "skills": {s.name for s in full.skills.values() if capability in s.requires}}


def experiments(names: list[str], full: Registry, zbar: Registry | None) -> list[Experiment]:
    out = []
    for name in names:
        if name == "barcode":
            out.append(Experiment(name, full, lambda t: t.domain != "barcode", domain="barcode",
                                  **_family(full, "barcode")))
        elif name == "second-ocr":
            out.append(Experiment(name, full, lambda t: True, models={"tesseract"}))
        elif name == "doc-fields":
            out.append(Experiment(name, full, lambda t: True, skills={"document-fields"}, domain="document"))
        elif name == "zbar":
            if zbar is None:
                raise SystemExit("the zbar experiment needs --zbar-registry (configs/registry-zbar.yaml)")
            out.append(Experiment(name, zbar, lambda t: True, models=set(zbar.models) - set(full.models),
                                  domain="barcode"))
        elif name.startswith("source:"):
            source = name.partition(":")[2]
            out.append(Experiment(name, full, lambda t, s=source: t.source != s, evaluated=lambda t, s=source:
                                  t.source == s, calibrate=lambda t, s=source: t.source != s,
                                  routers=("knn", "classifier")))
        else:
            raise SystemExit(f"unknown experiment {name!r}")
    return out


def _profiled(exp: Experiment, train: list[Task], args: argparse.Namespace, folder: Path) -> Registry:
    """The experiment's registry with every pair profiled on its calibration items (`maestro registry profile` on
    them; kept as folder/profile.json, so a rerun reuses it)."""
    path = folder / "profile.json"
    if not path.is_file() or not reach_path(path).is_file():
        items = [t for t in train if exp.calibrate(t)]
        outcomes = measure_pairs(exp.after, items, workers=args.workers)
        outcomes.write_profile(exp.after, f"{args.train} ({exp.name})", path)
    return exp.after.with_profile(path)


def _train_lm_router(exp: Experiment, before: Registry, args: argparse.Namespace, seed: int, run: Path
                     ) -> tuple[str, bool]:
    """The LM recipe on the experiment's registry; returns the trained router's policy name and whether the recipe
    ranks its options by a neural policy (`order: neural`, which must then be trained here too). Its SFT data are the
    teacher's episodes on the kept items, which `maestro train-lm` renders from that registry's cards (each several
    times, with families hidden, cards paraphrased and the option numbers shuffled) and leaves out where they call a
    pair the registry lacks."""
    overrides = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.lm_set)}
    teacher = run.parent / "teacher.jsonl"
    if not teacher.is_file():
        kept = {t.id for t in load_task_files([args.train])[0] if exp.keep(t)}
        lines = [line for line in args.teacher.read_text().splitlines()
                 if line.strip() and json.loads(line).get("id") in kept]
        teacher.parent.mkdir(parents=True, exist_ok=True)
        teacher.write_text("".join(line + "\n" for line in lines))
        print(f"{exp.name}: {len(lines)} teacher episodes on kept items -> {teacher}")
    config = load_train_config(args.lm_config, tasks=[str(args.train)], out_dir=str(run / "train"), seed=seed,
                               registry=args.registry, cache_dir=args.cache_dir, sft_data=str(teacher),
                               **overrides)
    train_lm(config, registry=before)
    return f"lm:transformers:{run / 'train' / 'final'}#choice", config.order.startswith("neural")


def _ranked_by(policy: str, ranker: str, run: Path) -> str:
    """The trained LM router (`lm:transformers:FOLDER#choice`) with its options ranked by `ranker` (`neural:PATH`,
    trained on the same held-out registry): a copy of its folder whose ROUTER_FILE orders by it."""
    folder = Path(policy.removeprefix("lm:transformers:").partition("#")[0])
    ranked = run / "final-ranked-by-neural"
    if not (ranked / ROUTER_FILE).is_file():
        shutil.copytree(folder, ranked, dirs_exist_ok=True)
        settings = yaml.safe_load((folder / ROUTER_FILE).read_text())
        (ranked / ROUTER_FILE).write_text(yaml.safe_dump({**settings, "order": ranker}, sort_keys=False))
    return f"lm:transformers:{ranked}#choice"


def _accuracy(results: dict, policy: str) -> float:
    return results["policies"][policy]["accuracy"]


def _by_domain(results: dict, policy: str) -> dict[str, float]:
    return results["policies"][policy]["accuracy_by_domain"]


def _answering(results: dict, policies: dict[str, str]) -> dict:
    """The after-phase figures of stopping and answering, per router label (`policies`: label -> policy name):
    episodes without an answer (of them, items with choices or a yes/no form), and calls per episode on the items no
    pair answers."""
    metrics, no_pair = results["policies"], results.get("no_pair_items") or {"items": 0, "calls_per_episode": {}}
    return {"closed_items": metrics["oracle"]["closed_items"],
            "no_answer": {k: metrics[p]["no_answer"] for k, p in policies.items()},
            "no_answer_closed": {k: metrics[p]["no_answer_closed"] for k, p in policies.items()},
            "no_pair_items": no_pair["items"],
            "no_pair_calls": {k: no_pair["calls_per_episode"].get(p, 0.0) for k, p in policies.items()}}


def _domain_figures(row: dict, domain: str | None) -> tuple[float, float]:
    """(the held-out domain's accuracy after / the oracle's there, the largest fall of any other domain from before
    to after): the two done-when figures of a held-out family."""
    after, oracle = row["domains_after"], row["oracle_domains_after"]
    if domain is None or domain not in after:
        share = row["after"] / row["oracle_after"] if row["oracle_after"] else float("nan")
    else:
        share = after[domain] / oracle[domain] if oracle[domain] else float("nan")
    falls = [row["domains_before"][d] - after[d] for d in after if d != domain and d in row["domains_before"]]
    return share, max(falls, default=0.0)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", required=True, type=Path)
    parser.add_argument("--tasks", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--experiments", nargs="+", default=["barcode", "second-ocr", "doc-fields", "zbar"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--zbar-registry", default=None)
    parser.add_argument("--limit", type=int, default=None, help="evaluate on the first N test items only")
    parser.add_argument("--cache-dir", default=".maestro-cache")
    parser.add_argument("--domains", nargs="+", default=None, help="evaluate only the test items of these domains")
    parser.add_argument("--profile", action="store_true",
                        help="profile each experiment's registry on its calibration items first (every pair once on "
                             "the --train items, those of a held-out source excepted) so the policy reads each pair's "
                             "measured family accuracy, the held-out part's included once it is added")
    parser.add_argument("--workers", type=int, default=2, help="threads for --profile's measurement")
    parser.add_argument("--reach-floor", type=float, default=REACH_FLOOR,
                        help="the evaluated episodes' MaestroContext.reach_floor: stop before the next call where the "
                             "profile's reach over the pairs not yet called is below it (needs --profile; 0: off)")
    parser.add_argument("--ensemble", action="store_true",
                        help="also evaluate the seeds' neural checkpoints deciding together (the mean of their "
                             "distributions, `neural:A+B+...`) as one more row per experiment, seed 'ensemble'")
    parser.add_argument("--router", choices=("neural", "lm"), default="neural",
                        help="the policy trained on the held-out registry: the neural policy (NeuralGRPOConfig flags "
                             "below) or the LM router (--lm-config)")
    parser.add_argument("--lm-config", type=Path, default=Path("configs/recipes/lm-router-sft.yaml"),
                        help="--router lm: the `maestro train-lm` recipe (its tasks, registry and out_dir are the "
                             "experiment's)")
    parser.add_argument("--teacher", type=Path, default=None,
                        help="--router lm: prediction file on the --train items whose episodes SFT imitates")
    parser.add_argument("--lm-set", nargs="+", default=[], metavar="KEY=VALUE",
                        help="--router lm: override fields of --lm-config, e.g. sft_steps=100 steps=0")
    add_arguments(parser, NeuralGRPOConfig, exclude=("seed",))
    return parser


def main() -> None:
    parser = _parser()
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
    # --max-turns (a NeuralGRPOConfig flag) is also the evaluated episodes' budget; the LM recipe trains with 2
    context = MaestroContext(**({"max_turns": args.max_turns} if args.max_turns else {}), reach_floor=args.reach_floor)
    for exp in experiments(args.experiments, full, zbar):
        def select(t: Task, exp: Experiment = exp) -> bool:
            return exp.evaluated(t) and (not args.domains or t.domain in args.domains)

        items = [t for t in test if select(t)][: args.limit]
        before, after = exp.registries(_profiled(exp, train, args, args.out / exp.name) if args.profile
                                       else exp.after)
        kept = [t for t in train if exp.keep(t)]
        # a held-out source changes the items, not the registry: one evaluation serves as before and after
        phases = (("before", before), ("after", after)) if exp.models or exp.skills else (("after", after),)
        def evaluated(seed: int | str, policy: str, run: Path, exp: Experiment = exp, phases: tuple = phases,
                      select: Callable[[Task], bool] = select, items: list[Task] = items,
                      kept: list[Task] = kept) -> dict:
            """The experiment's row for one trained policy: its accuracy before and after (beside the oracle's
            and the routers'), per domain, and how it answers and stops."""
            row = {"experiment": exp.name, "router": args.router, "seed": seed, "items": len(items),
                   "profiled": args.profile, "chance": sum(t.chance for t in items) / max(len(items), 1),
                   "phases": [label for label, _ in phases]}
            for label, registry in phases:
                done = run / label / "results.json"
                results = (json.loads(done.read_text()) if done.is_file() else
                           evaluate_into(run / label, registry, [args.tasks], [policy, "oracle", *exp.routers],
                                         select=select, limit=args.limit, context=context, train_items=kept))
                row[label] = _accuracy(results, policy)
                row[f"oracle_{label}"] = _accuracy(results, "oracle")
                row[f"domains_{label}"] = _by_domain(results, policy)
                row[f"oracle_domains_{label}"] = _by_domain(results, "oracle")
                row.update({router: _accuracy(results, router) for router in exp.routers})
            row.update(_answering(results, {args.router: policy, **{r: r for r in exp.routers}}))
            for key in ("", "oracle_", "domains_", "oracle_domains_"):
                row.setdefault(f"{key}before", row[f"{key}after"])
            row["domain"] = exp.domain
            row["domain_share"], row["largest_fall"] = _domain_figures(row, exp.domain)
            print(json.dumps(row))
            return row

        members = []
        for seed in args.seeds:
            run = args.out / exp.name / f"seed{seed}"
            if args.router == "lm":
                policy, ranked_by = _train_lm_router(exp, before, args, seed, run)
                if ranked_by:  # the recipe's ranker is trained on the held-out registry too, never the shipped one
                    ranker = train_resumable(before, kept, from_arguments(NeuralGRPOConfig, args, seed=seed),
                                             run / "ranker")
                    policy = _ranked_by(policy, ranker, run)
            else:
                policy = train_resumable(before, kept, from_arguments(NeuralGRPOConfig, args, seed=seed), run / "train")
                members.append(policy.partition(":")[2])
            rows.append(evaluated(seed, policy, run))
        if args.ensemble and len(members) > 1:  # the seeds' checkpoints deciding together (policy/ensemble.py)
            rows.append(evaluated(ENSEMBLE, "neural:" + ENSEMBLE_SEP.join(members), args.out / exp.name / ENSEMBLE))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(rows, indent=2))
    _write_table(rows, args.out / "table.md")
    _plot(rows, args.out / "generalisation.png")


def _write_table(rows: list[dict], path: Path) -> None:
    """The experiments' rows as a markdown table (and the leave-one-source-out summary), written and printed."""
    lines = ["| experiment | router | profiled | seed | items | before | after | oracle after | chance | domain | "
             "domain after / oracle | largest fall of another domain | knn | classifier |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        routers = " | ".join(f"{r[k]:.3f}" if k in r else "" for k in ("knn", "classifier"))
        lines.append(f"| {r['experiment']} | {r['router']} | {'yes' if r.get('profiled') else 'no'} | {r['seed']} | "
                     f"{r['items']} | {r['before']:.3f} | {r['after']:.3f} | {r['oracle_after']:.3f} | "
                     f"{r['chance']:.3f} | {r['domain'] or 'all'} | {r['domain_share']:.2f} | "
                     f"{r['largest_fall']:+.3f} | {routers} |")
    lines += _loso_summary(rows)
    path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


ENSEMBLE = "ensemble"
"""The seed label of the row of the seeds' checkpoints deciding together (--ensemble)."""


def _loso_summary(rows: list[dict]) -> list[str]:
    """Per seed, the leave-one-source-out figures: the macro over the held-out sources of the trained router, `knn`
    and `classifier` (fitted on the same items in the same run), the sources that fell below chance, and, pooled over
    the sources, episodes without an answer and calls per episode on the items no pair answers."""
    lines = []
    for seed in sorted({r["seed"] for r in rows}, key=str):  # the seeds, then "ensemble"
        loso = [r for r in rows if r["seed"] == seed and r["experiment"].startswith("source:")]
        if not loso:
            continue
        macro = {k: sum(r[k] for r in loso) / len(loso) for k in ("after", "knn", "classifier", "oracle_after")}
        below = [f"{r['experiment'][7:]} ({r['after']:.3f} < {r['chance']:.3f})" for r in loso
                 if r["after"] < r["chance"]]
        items, closed, hopeless = (sum(r[k] for r in loso) for k in ("items", "closed_items", "no_pair_items"))
        routers = (loso[0]["router"], "knn", "classifier")

        pooled = {key: {k: sum(r[key][k] for r in loso) for k in routers} for key in ("no_answer", "no_answer_closed")}
        calls = {k: sum(r["no_pair_calls"][k] * r["no_pair_items"] for r in loso) / max(hopeless, 1) for k in routers}

        lines.append(f"\nLeave-one-source-out, seed {seed}, macro over {len(loso)} held-out sources: "
                     f"{routers[0]} {macro['after']:.3f}, knn {macro['knn']:.3f}, classifier "
                     f"{macro['classifier']:.3f}, oracle {macro['oracle_after']:.3f}; below chance: "
                     f"{', '.join(below) or 'none'}. No answer (of {items} items; of {closed} with choices or "
                     f"yes/no): " + ", ".join(f"{k} {pooled['no_answer'][k]} ({pooled['no_answer_closed'][k]})"
                                             for k in routers) +
                     f". Calls per episode on the {hopeless} items no pair answers: " +
                     ", ".join(f"{k} {calls[k]:.2f}" for k in routers) + ".")
    return lines


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["experiment"] for r in rows))
    fig, ax = plt.subplots(figsize=(1.8 * len(names) + 2, 3.2))
    labelled = set()

    def label(name: str) -> str | None:  # each legend entry once
        if name in labelled:
            return None
        labelled.add(name)
        return name

    for i, name in enumerate(names):
        together = [r for r in rows if r["experiment"] == name and r["seed"] == ENSEMBLE]
        mine = [r for r in rows if r["experiment"] == name and r["seed"] != ENSEMBLE]
        policy = mine[0]["router"]
        if together:
            ax.scatter([i + 0.3], [together[0]["after"]], color="tab:purple", marker="*", s=60,
                       label=label("the seeds together (ensemble)"))
        if "before" in mine[0]["phases"]:  # a registry held out: the policy without it, then with it
            ax.scatter([i - 0.15] * len(mine), [r["before"] for r in mine], color="tab:gray", label=label("before"))
            ax.scatter([i + 0.15] * len(mine), [r["after"] for r in mine], color="tab:blue", label=label("after"))
        else:  # a source held out: the policy per seed beside the routers fitted on the same items
            ax.scatter([i - 0.15] * len(mine), [r["after"] for r in mine], color="tab:blue",
                       label=label(f"{policy} (one dot per seed)"))
        for offset, router, marker in ((0.05, "knn", "x"), (0.2, "classifier", "+")):
            if router in mine[0]:  # fitted once on the same items: one value for every seed
                ax.scatter([i + offset], [mine[0][router]], color="tab:orange", marker=marker, label=label(router))
        ax.hlines(max(r["oracle_after"] for r in mine), i - 0.3, i + 0.3, color="tab:green", label=label("oracle"))
        ax.hlines(mine[0]["chance"], i - 0.3, i + 0.3, color="black", linestyles="dashed", label=label("chance"))
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("accuracy")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()
