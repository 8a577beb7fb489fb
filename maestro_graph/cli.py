"""The `maestro` command: ask one question, predict over a task file, and inspect the registry."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from enum import IntFlag
from pathlib import Path
from typing import Optional

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .backends.packages import missing_package
from .bench.cli import bench_app
from .cache.backends import DEFAULT_TTL_S
from .core.configs import MAX_COST, MAX_TURNS, Budget, typer_option, typer_options
from .errors import MaestroError, missing_extra
from .registry.reach import REACH_FLOOR
from .rl.config import LMTrainConfig, NeuralGRPOConfig
from .serve.settings import ServeSettings, startup_problem

app = typer.Typer(
    help="Maestro-Graph: answer questions about images by orchestrating expert models with a policy.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
skills_app = typer.Typer(help="Inspect the skill library.", no_args_is_help=True)
registry_app = typer.Typer(help="Inspect the model registry and its action space.", no_args_is_help=True)
app.add_typer(skills_app, name="skills")
app.add_typer(bench_app, name="bench")
app.add_typer(registry_app, name="registry")
console = Console()
err = Console(stderr=True)

WIDE_COLUMNS = 120
"""The terminal width from which the tables a person reads (`skills list`, `registry show`, `eval`'s summary) show
each field in a column of its own; in a narrower terminal (80 columns) they have fewer columns, with the other
fields wrapped beside each row's name, so no text is squeezed to a sliver or cut."""

RegistryOpt = typer.Option(None, "--registry", "-r", help="Registry config YAML (default: the packaged local one).")
POLICY_HELP = ("neural (the shipped checkpoint) | rules | random | fixed:MODEL@@SKILL | lm:shipped#choice "
               "(the paper's LM router as a composite: the shipped neural policy chooses the expert, SmolLM2 decides "
               "when to answer) | lm:... (docs/lm-router.md)")
"""The policy names every command's --policy help starts with."""
MaxTurnsOpt = typer_option(Budget, "max_turns", min=1, max=MAX_TURNS)
MaxCostOpt = typer_option(Budget, "max_cost", min=0, max=MAX_COST)
ReachFloorOpt = typer.Option(
    REACH_FLOOR, min=0, max=1, help="Stop before the next call when fewer of the 10 most similar calibration questions "
    "were answered by a pair not yet called than this (the registry's reach, written by `maestro registry profile`; "
    "a registry without one is never stopped); 0: off (docs/evaluation.md: Knowing when nothing fits).")
LimitOpt = typer.Option(None, min=1, help="Only the first N items.")
WorkersOpt = typer.Option(2, min=1, help="Episodes run at once (per-model limits still apply).")
CacheDirOpt = typer.Option(Path(".maestro-cache"), envvar="MAESTRO_CACHE_DIR",
                           help="Persistent cache of expert calls and skill steps.")
NoCacheOpt = typer.Option(False, "--no-cache", help="Call every expert afresh.")
CacheUrlOpt = typer.Option(None, "--cache-url", help="Shared expert cache on Redis (redis://HOST:PORT/DB), so "
                           "workers never repeat each other's calls; --cache-dir is its local fallback.")
CacheTtlOpt = typer.Option(DEFAULT_TTL_S, "--cache-ttl-s", min=0, envvar="MAESTRO_CACHE_TTL_S",
                           help="Seconds a Redis cache entry lives after it is written; 0: until Redis evicts it "
                           "(docs/scale.md: The Redis cache).")
ExecutorOpt = typer.Option("thread", "--executor", help="Where episodes run: thread (--workers threads here) | ray "
                           "(a local Ray cluster of --workers actors) | ray:ADDRESS (an existing cluster; needs the "
                           "`ray` extra).")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        print(f"maestro-graph {version('maestro-graph')}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print the version and exit.")) -> None:
    """Maestro-Graph: answer questions about images by orchestrating expert models with a policy."""


def _fail(message: str, code: int = 2) -> None:
    # a message's own brackets (`.[ray]`) are text, not markup; one line, whatever the width (the terminal wraps it)
    err.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)
    raise typer.Exit(code)


def _progress(message: str) -> contextlib.AbstractContextManager:
    """A spinner on stderr while a slow step runs, only when stderr is a terminal (scripts see nothing)."""
    return err.status(message, spinner="dots") if err.is_terminal else contextlib.nullcontext()


def _registry(path: Optional[Path], cache_dir: Optional[Path] = None, cache_url: Optional[str] = None,
              profiled: bool = True, cache_ttl_s: int = DEFAULT_TTL_S):
    from .batch.executors import RegistrySource

    try:
        return RegistrySource(path, cache_dir, cache_url, profiled, cache_ttl_s=cache_ttl_s).load()
    except MaestroError as exc:
        _fail(str(exc))


def _executor(spec: str, reg, path: Optional[Path], cache_dir: Optional[Path], cache_url: Optional[str],
              workers: int, cache_ttl_s: int = DEFAULT_TTL_S):
    """The `--executor` of a batch command; Ray workers build their registries from the same files and URLs."""
    from .batch.executors import RegistrySource, open_executor

    try:
        with _progress(f"starting {spec} workers"):
            source = RegistrySource(path, cache_dir, cache_url, cache_ttl_s=cache_ttl_s)
            return open_executor(spec, registry=reg, source=source, workers=workers)
    except MaestroError as exc:
        _fail(str(exc))


def _threads() -> None:
    """Two cores are easily oversubscribed by concurrent expert calls: the libraries that load after this (onnxruntime
    through RapidOCR, OpenMP) get one thread each unless the user says otherwise. torch, loaded with this module (the
    reach's question features), keeps one thread per core unless OMP_NUM_THREADS was set before the process started:
    an LM router alone decides faster on both cores (1.3 s against 2.2 s on one), while LM processes run side by side
    need OMP_NUM_THREADS=1 (docs/lm-router.md, "Decision time")."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@app.command()
def ask(
    question: str = typer.Argument(..., help="The question, e.g. 'How many circles are there?'"),
    image: list[Path] = typer.Option([], "--image", "-i", help="An image file (repeat for several)."),
    choice: list[str] = typer.Option([], "--choice", "-c", help="A multiple-choice option (repeat)."),
    policy: Optional[str] = typer.Option(None, "--policy", "-p",
                                         help=f"{POLICY_HELP}; default: neural"),
    registry: Optional[Path] = RegistryOpt,
    max_turns: int = MaxTurnsOpt,
    max_cost: float = MaxCostOpt,
    reach_floor: float = ReachFloorOpt,
    min_confidence: float = typer.Option(
        0.0, min=0, max=1, help="Withhold an answer less sure than this (its confidence: the probability that it is "
        "right): no answer, exit 1, \"I could not find out\"; 0: every answer is given."),
    as_json: bool = typer.Option(False, "--json", help="Print the answer and trace as JSON."),
    checkpoint_db: Optional[Path] = typer.Option(None, help="SQLite file to checkpoint the episode in."),
    thread: Optional[str] = typer.Option(None, help="Thread id for the checkpoint (with --checkpoint-db)."),
) -> None:
    """Answer QUESTION about the images and print the answer with a table of the steps taken."""
    _threads()
    from .core.question_text import clean_question, question_problem
    from .episode.confidence import answer_note
    from .episode.graph import MaestroContext, build_graph, checkpoint_serde
    from .episode.runner import run_episode
    from .images.load import load_image
    from .policy import DEFAULT_POLICY, make_policy

    policy = policy or DEFAULT_POLICY
    problem = question_problem(clean_question(question), image=bool(image) or checkpoint_db is not None)
    if problem:  # a blank question is read from the image (the request's, or its thread's)
        _fail(problem)
    for path in image:
        if path.is_dir():
            _fail(f"--image {path}: is a folder, not an image file; name each image in it with its own --image "
                  f"(e.g. --image {path / 'photo.png'})")
        try:
            load_image(str(path))
        except MaestroError as exc:
            _fail(str(exc))
    reg = _registry(registry)
    try:
        pol = make_policy(policy)
    except MaestroError as exc:
        _fail(str(exc))
    context = MaestroContext(max_turns=max_turns, max_cost=max_cost, reach_floor=reach_floor,
                             min_confidence=min_confidence)
    images = [str(p.resolve()) for p in image]
    config, saver, store = {}, None, None
    if checkpoint_db:
        from .episode.storage import prune_thread, sqlite_checkpointer, sqlite_image_store

        saver, store = sqlite_checkpointer(checkpoint_db), sqlite_image_store(checkpoint_db)
        config = {"configurable": {"thread_id": thread or "default"}}
    graph = build_graph(reg, pol, checkpointer=saver, store=store)
    with _progress("answering (the first question loads the experts, about 10 s)"):
        result = run_episode(graph, question, images, list(choice) or None, context=context, config=config)
    if saver is not None:
        prune_thread(saver, config["configurable"]["thread_id"])
    if as_json:
        print(json.dumps({"answer": result.answer, "answer_source": result.answer_source,
                          "confidence": result.confidence, "policy": policy, "stop_reason": result.stop_reason,
                          "steps": [s.model_dump() for s in result.steps],
                          "cost": result.cost, "latency_s": result.latency_s}, ensure_ascii=False, indent=2))
        if result.answer is None:
            raise typer.Exit(1)
        return
    table = Table("#", "model", "skill", "answer", "latency (s)", "cost", "error", title="steps")
    for i, step in enumerate(result.steps, start=1):
        table.add_row(str(i), step.model, step.skill, str(step.answer), f"{step.latency_s:.2f}", f"{step.cost:.3f}",
                      (step.error or "")[:80])
    table.add_section()
    note = answer_note(result.answer_source, result.confidence, asked=bool(result.steps))
    table.add_row("", "", "answer", str(result.answer), "", "", note)
    console.print(table)
    if result.answer is None:
        said = "I could not find out" if result.confidence is not None else "no answer"
        _fail(f"{said} ({result.stop_reason})", code=1)
    color = "yellow" if result.answer_source in ("guess", "candidate") else "dim"
    console.print(f"[bold]answer:[/bold] {escape(result.answer)}   [{color}]({escape(note)})[/{color}]"
                  f"   [dim]({result.stop_reason}, {result.latency_s:.1f}s, cost {result.cost:.3f})[/dim]")


class PredictExit(IntFlag):
    """`maestro predict`'s exit status, so that a script can tell a clean run from one to look into
    (docs/evaluation.md). The kinds of trouble add up: 3 is failed episodes and skipped lines, 5 failed episodes on
    a run that lost capacity. `maestro eval` exits with LOST_CAPACITY alone (its failures are measurements)."""

    ALL_RAN = 0
    FAILED = 1
    """some episodes failed (crashed, or their input was unreadable); they are in the prediction file, marked"""
    SKIPPED = 2
    """task-file lines were skipped as bad input; 2 is also every usage error, which stops the run before it starts"""
    LOST_CAPACITY = 4
    """the run ran on less than it asked for: workers died or never started, or steps failed on their node (its
    disk, memory or files); every item may still have been answered, by the workers that remained"""

    @classmethod
    def of(cls, failed: int, skipped: int, lost: int = 0) -> "PredictExit":
        return cls(cls.FAILED * (failed > 0) | cls.SKIPPED * (skipped > 0) | cls.LOST_CAPACITY * (lost > 0))


def _report_losses(lost: list, node_failures: int, cache_errors: int) -> int:
    """Print what a batch run lost (workers by name, steps failed on their node) and the cache errors it ran
    through; returns how many losses there were (cache errors are not: the steps ran uncached)."""
    for worker in lost:
        err.print(f"[red]lost worker[/red] {escape(str(worker))}")
    if lost:
        err.print(f"[red]{len(lost)} workers lost[/red]: the items ran on the remaining workers")
    if node_failures:
        err.print(f"[red]{node_failures} steps failed on their node[/red] (error kind `node` in the records)")
    if cache_errors:
        err.print(f"[yellow]{cache_errors} expert-cache reads or writes failed[/yellow]; those calls and steps ran "
                  "uncached")
    return len(lost) + node_failures


@app.command()
def predict(
    tasks: Path = typer.Option(..., "--tasks", "-t", exists=True, dir_okay=False, help="Task file (JSONL)."),
    out: Path = typer.Option(..., "--out", "-o", help="Prediction file to write (JSONL)."),
    policy: Optional[str] = typer.Option(None, "--policy", "-p",
                                         help=f"{POLICY_HELP} | oracle; default: neural"),
    registry: Optional[Path] = RegistryOpt,
    max_turns: int = MaxTurnsOpt,
    max_cost: float = MaxCostOpt,
    reach_floor: float = ReachFloorOpt,
    limit: Optional[int] = LimitOpt,
    workers: int = WorkersOpt,
    cache_dir: Path = CacheDirOpt,
    no_cache: bool = NoCacheOpt,
    cache_url: Optional[str] = CacheUrlOpt,
    cache_ttl_s: int = CacheTtlOpt,
    executor: str = ExecutorOpt,
    resume: bool = typer.Option(False, "--resume", help="Keep the predictions already in OUT; run only the rest."),
) -> None:
    """Run POLICY over every item of a task file and write the prediction file; prints accuracy per source.

    Exit status (the codes add up):
    0 every item ran;
    1 some episodes failed (recorded in OUT with `failed: true`);
    2 some task-file lines were skipped as bad input, or a usage error stopped the run;
    4 the run lost capacity: workers died or never started, or steps failed on their node (each named on stderr
    and in the metrics file)."""
    _threads()
    from .episode.graph import MaestroContext
    from .episode.runner import predict as run_predict
    from .policy import DEFAULT_POLICY, make_policy

    policy = policy or DEFAULT_POLICY
    cache_dir, cache_url = (None, None) if no_cache else (cache_dir, cache_url)
    reg = _registry(registry, cache_dir, cache_url, cache_ttl_s=cache_ttl_s)
    if policy != "oracle":
        try:
            make_policy(policy)
        except MaestroError as exc:
            _fail(str(exc))
    runner = _executor(executor, reg, registry, cache_dir, cache_url, workers, cache_ttl_s)
    try:
        summary = run_predict(reg, tasks, out, policy=policy, limit=limit, workers=workers, resume=resume,
                              executor=runner,
                              context=MaestroContext(max_turns=max_turns, max_cost=max_cost, reach_floor=reach_floor))
    except MaestroError as exc:  # the cluster gave out mid-run: what finished is in OUT
        _fail(f"{exc}; the predictions that finished are in {out}: rerun with --resume to run the rest")
    for problem in summary.skipped:
        err.print(f"[yellow]skipped[/yellow] {problem.file}:{problem.line} ({problem.id}): {problem.error}")
    table = Table("source", "items", "accuracy", title=f"{policy} on {tasks.name}")
    for source, values in sorted(summary.by_source.items()):
        table.add_row(source, str(len(values)), f"{sum(values) / len(values):.3f}")
    console.print(table)
    console.print(f"{summary.total} items, {summary.failed} failed, {len(summary.skipped)} skipped -> {out} "
                  f"(counters: {summary.metrics_file})")
    if reg.cache is not None:
        stats = reg.cache.stats
        console.print(f"expert cache {reg.cache.location}: {stats.hits} hits, {stats.misses} misses "
                      f"({stats.hit_rate:.0%} hit rate), {stats.corrupt} corrupt, {stats.errors} errors")
    losses = _report_losses(summary.lost, summary.node_failures, summary.cache_errors)
    raise typer.Exit(PredictExit.of(summary.failed, len(summary.skipped), losses))


@app.command("eval")
def eval_(
    tasks: list[Path] = typer.Option(..., "--tasks", "-t", exists=True, dir_okay=False, help="Task file (repeat)."),
    policy: list[str] = typer.Option(..., "--policy", "-p",
                                     help=f"{POLICY_HELP} | best-single | knn | classifier | oracle (repeat)"),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for results.json, report.md, predictions, plots."),
    train_tasks: list[Path] = typer.Option([], exists=True, dir_okay=False,
                                           help="Training task file for best-single, knn and classifier (repeat)."),
    registry: Optional[Path] = RegistryOpt,
    max_turns: int = MaxTurnsOpt,
    max_cost: float = MaxCostOpt,
    reach_floor: float = ReachFloorOpt,
    limit: Optional[int] = LimitOpt,
    workers: int = WorkersOpt,
    cache_dir: Path = CacheDirOpt,
    no_cache: bool = NoCacheOpt,
    cache_url: Optional[str] = CacheUrlOpt,
    cache_ttl_s: int = CacheTtlOpt,
    executor: str = ExecutorOpt,
) -> None:
    """Evaluate several policies through the same graph on the same items; write a report with tables and plots."""
    _threads()
    from .episode.graph import MaestroContext
    from .evaluation.evaluate import evaluate
    from .evaluation.report import write_report
    from .policy import TRAINED_POLICIES, make_policy

    cache_dir, cache_url = (None, None) if no_cache else (cache_dir, cache_url)
    reg = _registry(registry, cache_dir, cache_url, cache_ttl_s=cache_ttl_s)
    for name in policy:
        if name == "oracle" or name in TRAINED_POLICIES:
            continue
        try:
            make_policy(name)
        except MaestroError as exc:
            _fail(str(exc))
    if any(p in TRAINED_POLICIES for p in policy) and not train_tasks:
        _fail(f"policies {[p for p in policy if p in TRAINED_POLICIES]} are trained: pass --train-tasks FILE")
    try:
        runner = _executor(executor, reg, registry, cache_dir, cache_url, workers, cache_ttl_s)
        run = evaluate(reg, tasks, policy, train_tasks=train_tasks, workers=workers, limit=limit, executor=runner,
                       context=MaestroContext(max_turns=max_turns, max_cost=max_cost, reach_floor=reach_floor),
                       predictions_dir=out / "predictions")
    except (ValueError, MaestroError) as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        err.print(f"[yellow]interrupted:[/yellow] the episodes that finished are in {out / 'predictions'}; "
                   "rerun the command to evaluate again (finished expert calls replay from the cache)")
        raise typer.Exit(130) from None
    results = write_report(run, out)
    no_pair = results["no_pair_items"]
    narrow = _narrow()  # one-word heads that are never cut, no borders; what they stand for under the table
    heads = dict(zip(
        ("macro acc", "accuracy", "mean cost", "calls/ep", "calls/ep, no pair right", "no answer", "ECE", "p50 s",
         "cache hits", "wall s"),
        ("macro", "acc", "cost", "calls", "calls*", "none", "ece", "p50_s", "hits", "wall_s")))
    left_out = {"cache hits", "wall s"} if narrow else set()  # in results.json and report.md; a narrow row fits
    shown = [h for h in heads if (no_pair or h != "calls/ep, no pair right") and h not in left_out]
    table = Table("policy", title=f"evaluation -> {out}/report.md", box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD)
    for head in shown:
        table.add_column(heads[head] if narrow else head, justify="right", no_wrap=narrow)
    table.columns[0].overflow = "fold"  # a long policy name (fixed:MODEL@@SKILL) wraps, never cut
    for name, m in results["policies"].items():
        closed = f"({m['no_answer_closed']})" if narrow else f"({m['no_answer_closed']} with choices or yes/no)"
        row = {"macro acc": f"{m['macro_accuracy']:.3f}", "accuracy": f"{m['accuracy']:.3f}",
               "mean cost": f"{m['mean_cost']:.2f}", "calls/ep": f"{m['calls_per_episode']:.2f}",
               "calls/ep, no pair right": f"{no_pair['calls_per_episode'][name]:.2f}" if no_pair else "",
               "no answer": f"{m['no_answer']} {closed}", "ECE": "-" if m["ece"] is None else f"{m['ece']:.3f}",
               "p50 s": f"{m['latency_p50_s']:.2f}", "cache hits": str(m["cache_hits"]), "wall s": f"{m['wall_s']:.0f}"}
        table.add_row(escape(name), *(row[h] for h in shown))
    console.print(table)
    if narrow:
        console.print("; ".join(f"{heads[h]}: {h}" for h in shown).replace(
            "none: no answer", "none: episodes without an answer (in brackets: of questions with choices or yes/no)"
        ).replace("ece: ECE", "ece: expected calibration error of the confidences (10 bins)")
            + f"; cache hits and wall time: {out}/report.md")
    if no_pair:
        console.print(f"{no_pair['items']} items no pair answers (the oracle's misses)")
    if run.skipped:
        console.print(f"[yellow]{len(run.skipped)} items skipped[/yellow] (listed in results.json)")
    losses = _report_losses([w for r in run.results for w in r.lost], sum(r.node_failures for r in run.results),
                            sum(r.cache_errors for r in run.results))
    if losses:
        raise typer.Exit(PredictExit.LOST_CAPACITY)


@app.command()
def calibrate(
    predictions: list[Path] = typer.Option(..., "--predictions", exists=True, dir_okay=False,
                                           help="Prediction file of scored episodes to fit on (`maestro eval`'s "
                                           "OUT/predictions/POLICY.jsonl; repeat)."),
    out: Path = typer.Option(..., "--out", "-o", help="The confidence model to write (JSON)."),
    check: list[Path] = typer.Option([], "--check", exists=True, dir_okay=False,
                                     help="Prediction file of other episodes: the fitted model's expected "
                                     "calibration error on them (repeat)."),
) -> None:
    """Fit the confidence model (the probability that an answer is right) on the recorded evidence of scored
    episodes; a graph built with it (`build_graph(..., confidence=ConfidenceModel.read(OUT))`, or the package's
    checkpoints/confidence.json) answers with calibrated confidences. Fit on items other than those you report."""
    from .evaluation.calibration import fit_confidence, judged_answers

    try:
        model, fitted = fit_confidence(predictions)
        held_out = judged_answers(check) if check else None
    except MaestroError as exc:
        _fail(str(exc))
    model.save(out)
    table = Table("episodes", "answers", "accuracy", "ECE (10 bins)", title=f"confidence model -> {out}")
    for name, judged in (("fitted on", fitted), *((("checked on", held_out),) if held_out else ())):
        ece = judged.ece(model)
        table.add_row(name, str(len(judged.right)), f"{sum(judged.right) / max(1, len(judged.right)):.3f}",
                      "-" if ece is None else f"{ece:.3f}")
    console.print(table)
    if held_out:  # the reliability diagram of the other episodes, as a table
        bins = Table("confidence", "answers", "mean confidence", "accuracy", title="reliability on --check")
        for b in held_out.reliability(model):
            bins.add_row(f"{b.low:.1f}-{b.high:.1f}", str(b.count), *(("-", "-") if not b.count else
                                                                      (f"{b.confidence:.3f}", f"{b.accuracy:.3f}")))
        console.print(bins)


@app.command()
@typer_options(NeuralGRPOConfig, flags={"registry": ("--registry", "-r")})
def train(
    config: NeuralGRPOConfig,
    tasks: list[Path] = typer.Option(..., "--tasks", "-t", exists=True, dir_okay=False, help="Training task file (repeat)."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for checkpoints, train_log.jsonl and curves.png."),
    eval_tasks: list[Path] = typer.Option([], exists=True, dir_okay=False,
                                          help="Validation task file (repeat): scored at every checkpoint; the best "
                                               "checkpoint is kept as OUT/best.safetensors."),
    resume: bool = typer.Option(True, help="Continue from OUT/checkpoint.safetensors when it exists."),
    cache_dir: Path = CacheDirOpt,
    cache_url: Optional[str] = CacheUrlOpt,
    cache_ttl_s: int = CacheTtlOpt,
    executor: str = ExecutorOpt,
    workers: int = typer.Option(1, min=1, help="Rollout workers (groups sampled at once; with --executor ray, "
                                "Ray actors)."),
) -> None:
    """Train the neural policy with GRPO on task files (outcome reward only); OUT/policy.safetensors is the result.
    Every NeuralGRPOConfig field is an option (or a key of --config FILE.yaml), those TRL's GRPOConfig also has under
    TRL's names (--num-generations, --learning-rate, --epsilon, --num-iterations, --save-steps); the defaults, and
    configs/recipes/neural-grpo.yaml, are the shipped checkpoint's recipe."""
    _threads()
    import torch

    from .core.tasks import load_task_files
    from .rl.grpo import NeuralGRPOTrainer

    torch.set_num_threads(1)
    registry = Path(config.registry) if config.registry else None
    reg = _registry(registry, cache_dir, cache_url, cache_ttl_s=cache_ttl_s)
    items, problems = load_task_files(tasks)
    held_out, eval_problems = load_task_files(eval_tasks) if eval_tasks else ([], [])
    for problem in problems + eval_problems:
        err.print(f"[yellow]skipped[/yellow] {problem.file}:{problem.line}: {problem.error}")
    try:
        trainer = NeuralGRPOTrainer(reg, items, config, out, eval_tasks=held_out,
                              executor=_executor(executor, reg, registry, cache_dir, cache_url, workers, cache_ttl_s))
        if resume and trainer.resume():
            console.print(f"resuming from {trainer.checkpoint_path} at step {trainer.step}")
    except MaestroError as exc:
        _fail(str(exc))
    start = time.perf_counter()
    trainer.train()
    console.print(f"trained {trainer.step} steps in {time.perf_counter() - start:.0f}s -> {trainer.policy_path} "
                  f"(curves: {out / 'curves.png'}, log: {out / 'train_log.jsonl'})")
    if trainer.best:
        console.print(f"best validation score {trainer.best['score']:.3f} at step {trainer.best['step']} -> "
                      f"{trainer.best_path}")


cache_app = typer.Typer(help="The persistent cache of expert calls.", no_args_is_help=True)
app.add_typer(cache_app, name="cache")


@cache_app.command("clear")
def cache_clear(cache_dir: Path = CacheDirOpt, cache_url: Optional[str] = CacheUrlOpt) -> None:
    """Delete every cached expert call (on the Redis server too, with --cache-url)."""
    from .cache.store import open_cache

    try:
        cache = open_cache(cache_dir, cache_url)
    except MaestroError as exc:
        _fail(str(exc))
    console.print(f"removed {cache.clear()} entries from {cache.location}")


@skills_app.command("list")
def skills_list(registry: Optional[Path] = RegistryOpt,
                as_json: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
    """List the skills found in the registry's skill folders, each with whether a model here can run it (where
    none can: why, and how to add one)."""
    skills = sorted(_registry(registry).describe()["skills"], key=lambda s: (s["tier"], s["name"]))
    if as_json:
        print(json.dumps(skills, indent=2, ensure_ascii=False))
        return
    console.print(_skills_table(skills))


def _narrow() -> bool:
    return console.width < WIDE_COLUMNS


def _skills_table(skills: list[dict]) -> Table:
    """Whole descriptions: the table wraps them at word boundaries rather than cutting them (in a narrow terminal,
    under the skill's tier, requirements and availability, beside its name)."""
    title = f"skills ({len(skills)})"
    rows = [(spec["name"], str(spec["tier"]), " | ".join(filter(None, (", ".join(spec["requires"]),
                                                                      ", ".join(spec.get("or_requires", []))))),
             "yes" if spec["available"] else f"[red]no[/red]: {escape(spec['reason'])}", escape(spec["description"]))
             for spec in skills]
    if _narrow():
        table = Table("skill", "tier, requires, available; description", title=title, box=box.SIMPLE_HEAD,
                      show_lines=True)
        for name, tier, requires, available, description in rows:
            table.add_row(name, f"tier {tier}, requires {escape(requires)}, available: {available}\n{description}")
        return table
    table = Table("skill", "tier", "requires", "available", "description", title=title)
    for name, tier, requires, available, description in rows:
        table.add_row(name, tier, escape(requires), available, description)
    return table


@registry_app.command("show")
def registry_show(registry: Optional[Path] = RegistryOpt,
                  as_json: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
    """Show the models (with availability and the reason when unavailable), skills and compatible pairs."""
    reg = _registry(registry)
    info = reg.describe()
    if as_json:
        print(json.dumps(info, indent=2))
        return
    title = f"models ({info['config']})"
    if _narrow():
        models = Table("model", "capabilities, backend, cost/call; available", title=title, box=box.SIMPLE_HEAD,
                       show_lines=True)
        models.columns[1].overflow = "fold"  # a long word (a path, a package) wraps; nothing is cut
    else:
        models = Table("model", "capabilities", "backend", "cost/call", "available", title=title)
    for m in info["models"]:
        available = "yes" if m["available"] else f"[red]no[/red]: {escape(m['reason'])}"
        install = f"to add it: {escape(m['install'])}" if not m["available"] and m["install"] else ""
        fields = (", ".join(m["capabilities"]), m["backend"], f"{m['cost_per_call']:g}")
        if _narrow():
            models.add_row(m["name"], "; ".join(escape(f) for f in fields)
                           + ("; available: yes" if m["available"] else f"\navailable: {available}")
                           + (f"\n{install}" if install else ""))
        else:
            models.add_row(m["name"], *map(escape, fields), available + (f"; {install}" if install else ""))
    console.print(models)
    console.print(_skills_table(info["skills"]))
    console.print(f"[bold]{len(info['pairs'])} pairs:[/bold] " + ", ".join(info["pairs"]))


@registry_app.command("profile")
def registry_profile(
    tasks: list[Path] = typer.Option(..., "--tasks", "-t", exists=True, dir_okay=False,
                                     help="Labelled calibration task file (JSONL), a few items per kind of "
                                          "question (repeat for several files)."),
    registry: Optional[Path] = RegistryOpt,
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Profile file to write (default: the one the "
                                       "registry file's `profile:` key names, else <registry>.profile.json next "
                                       "to it)."),
    workers: int = WorkersOpt,
    cache_dir: Path = CacheDirOpt,
) -> None:
    """Run every pair once on a calibration file and write each pair's accuracy and cost, fingerprinted against
    the registry; the registry file's `profile:` key makes policies read it (`Pair.profile`)."""
    from .batch.measure import measure_pairs
    from .core.tasks import load_task_files
    from .registry.config import default_config_path
    from .registry.reach import reach_path

    reg = _registry(registry, cache_dir, profiled=False)  # measuring needs no profile, and this writes it
    items, problems = load_task_files(tasks)
    for problem in problems:
        err.print(f"[yellow]skipped[/yellow] {problem.file}:{problem.line}: {problem.error}")
    if not items:
        _fail(f"no usable item in {', '.join(map(str, tasks))}")
    config_path = Path(reg.config.source) if reg.config.source != "<memory>" else default_config_path()
    named = reg.config.profile_path()
    target = out or named or config_path.with_name(f"{config_path.stem}.profile.json")
    outcomes = measure_pairs(reg, items, workers=workers)
    profile, reach = outcomes.write_profile(reg, " + ".join(map(str, tasks)), target)
    for entry in profile.pairs:
        family = "unknown" if entry.family_accuracy is None else f"{entry.family_accuracy:.3f}"
        failed = f" ({entry.failures} failed calls left out)" if entry.failures else ""
        console.print(f"{entry.pair}: {entry.accuracy:.3f} on {entry.items} items{failed}, {family} on the "
                      f"{entry.family_items} its family answers, mean cost {entry.mean_cost:g}")
    sources = Table("source", "items", "best single pair", "its accuracy", "oracle (any pair right)",
                    title="per source: what one pair reaches, and what any pair does")
    for row in outcomes.by_source():
        sources.add_row(row.source, str(row.items), row.best_pair, f"{row.best_accuracy:.3f}",
                        f"{row.oracle_accuracy:.3f}")
    console.print(sources)
    console.print(f"reach: some pair answered {int(reach.answered.sum())} of {len(reach.answered)} items; an episode "
                  f"stops before a call where fewer of the {reach.k} most similar were answered by a pair not yet called "
                  f"than the run context's reach_floor ({reach_path(target)})")
    if named is not None and target.resolve() == named.resolve():
        console.print(f"wrote {target}, the registry file's `profile:`; policies read it from now on")
    else:
        console.print(f"wrote {target}; policies read it once the registry file has `profile: {target.name}` "
                      "(a path relative to the registry file)")
    if profile.unmeasured:
        for pair in profile.unmeasured:
            err.print(f"[red]not measured[/red] {pair.pair}: {escape(pair.reason)}")
        _fail(f"{len(profile.unmeasured)} pairs were not measured (their calls failed; no accuracy was written for "
              "them): make their endpoints answer and profile again")


@app.command()
@typer_options(ServeSettings, param="settings", flags={
    "policy": ("--policy", "-p"), "policies": ("--allow-policy",), "allowed_image_hosts": ("--allow-image-host",),
    "image_dirs": ("--image-dir",), "request_timeout_s": ("--timeout-s",)})
def serve(
    settings: ServeSettings,
    host: str = typer.Option("127.0.0.1", help="Interface to listen on (loopback by default)."),
    port: int = typer.Option(8321, min=1, max=65535, help="TCP port (not vLLM's 8000, so both run side by side)."),
    registry: Optional[Path] = RegistryOpt,
    insecure: bool = typer.Option(False, "--insecure",
                                  help="Start without an API key even when one was named or the host is public."),
    cache_dir: Optional[Path] = typer.Option(None, help="Persistent cache of expert calls (default: none)."),
    cache_url: Optional[str] = typer.Option(None, "--cache-url", help="Shared expert cache on Redis "
                                            "(redis://HOST:PORT/DB) for all replicas; needs --cache-dir (fallback)."),
    cache_ttl_s: int = CacheTtlOpt,
    log_level: str = typer.Option("info", help="Log level of Maestro and uvicorn."),
    log_format: str = typer.Option("json", help="json (one object per line, with request and thread ids) | text."),
) -> None:
    """Serve an OpenAI-compatible endpoint (/v1/chat/completions, model `maestro`), /healthz, and LangServe routes
    at /maestro when the `langserve` extra is installed. Every ServeSettings field is an option (or a key of
    --config FILE.yaml)."""
    _threads()
    if (module := missing_package("fastapi", "uvicorn")) is not None:
        _fail(missing_extra("serve", "`maestro serve`", module))
    import uvicorn

    from .serve import create_app
    from .serve.observability import configure_logging, log_config

    if log_format not in ("json", "text"):
        _fail(f"--log-format {log_format!r}: choose json or text")
    configure_logging(log_level, log_format)  # before the app loads anything that could write to stderr
    try:
        app_ = create_app(_registry(registry, cache_dir, cache_url, cache_ttl_s=cache_ttl_s), settings)
    except MaestroError as exc:
        _fail(str(exc))
    problem = startup_problem(settings, host, key_env_named="api_key_env" in settings.model_fields_set)
    if problem and not insecure:
        _fail(problem)
    if problem:
        err.print(f"[yellow]warning:[/yellow] --insecure: {problem}")
    uvicorn.run(app_, host=host, port=port, log_level=log_level, access_log=False,
                log_config=log_config(log_level, log_format))


@app.command()
def reliability(
    out: Path = typer.Option(..., "--out", "-o", help="Folder for reliability.md, reliability.json and the registries."),
    episodes: int = typer.Option(200, min=1, help="Episodes per fault scenario."),
    policy: str = typer.Option("rules", "--policy", "-p", help="The policy that runs the episodes."),
    tasks: list[Path] = typer.Option([], "--tasks", "-t", exists=True, dir_okay=False,
                                     help="Task files of fast items (default: the bundled barcode and vision samples)."),
    workers: int = typer.Option(4, min=1, help="Episodes run at once."),
    seed: int = typer.Option(0, help="Seed of the injected faults."),
) -> None:
    """Run the expert-fault, bad-input and trust-boundary suites; write a table of faults survived, inputs
    rejected, attacks held, episodes completed and lost.

    Needs the `serve` extra (the trust suite attacks a real server). Exits 1 when anything was lost, an input was
    not handled as expected or an attack was not held. A check that cannot run here (LangServe's, without the
    `langserve` extra) is reported as skipped, with the reason, and does not fail the run."""
    _threads()
    if (module := missing_package("fastapi", "uvicorn")) is not None:  # the trust suite attacks a real server
        _fail(missing_extra("serve", "`maestro reliability`", module))
    from .policy import make_policy
    from .reliability.suite import run_reliability

    try:
        make_policy(policy)
    except MaestroError as exc:
        _fail(str(exc))
    results = run_reliability(out, episodes=episodes, policy=policy, workers=workers, task_files=list(tasks) or None,
                              seed=seed, progress=lambda m: err.print(f"[dim]{escape(m)}[/dim]"))
    console.print((out / "reliability.md").read_text(), markup=False, soft_wrap=True)  # `[langserve]` is text
    if not results["passed"]:
        raise typer.Exit(1)


@app.command("export")
def export_(
    from_: Path = typer.Option(..., "--from", exists=True, dir_okay=False,
                               help="Prediction or rollout file (JSONL) of any policy."),
    tasks: Path = typer.Option(..., "--tasks", "-t", exists=True, dir_okay=False, help="The task file it came from."),
    fmt: str = typer.Option("trl", "--format", "-f", help="trl (JSONL conversational records) | verl (parquet)"),
    out: Path = typer.Option(..., "--out", "-o", help="File to write."),
    registry: Optional[Path] = RegistryOpt,
    max_turns: int = typer_option(Budget, "max_turns", min=1, help="The turn budget the episodes ran with."),
    cost_weight: float = typer.Option(0.0, min=0, help="Reward = score - cost_weight * cost - format_weight * errors."),
    format_weight: float = typer.Option(0.5, min=0),
    tool_calls: bool = typer.Option(False, "--tool-calls", help="TRL: actions as `search` tool calls, not tags."),
    card_chars: Optional[int] = typer.Option(None, min=20, help="Characters of each card description in the prompt "
                                             "(default: the LM router's; use the value `train-lm` trains with: its "
                                             "config's card_chars)."),
    observation_chars: Optional[int] = typer.Option(None, min=20, help="Characters of each observation's evidence "
                                                    "shown (default: the LM router's)."),
    measured: bool = typer.Option(False, "--measured", help="Show each option's measured accuracy on similar "
                                  "questions (the registry's profile), as a router trained with `measured: true` "
                                  "reads its prompt."),
    order: str = typer.Option("registry", "--order", help="How the options are offered, as a router trained with "
                              "this `order` reads its prompt: pair-ids, registry (numbered in the registry's order), "
                              "reach (numbered, best measured on similar questions first), neural or "
                              "neural:PATH.safetensors (numbered by that neural policy's opening choice)."),
) -> None:
    """Export trajectories for TRL or verl: the router conversation from the cards, with the reward and its parts."""
    _threads()
    from .policy.lm import PromptOptions
    from .policy.lm.policy import make_ranker, order_problem, prompt_order
    from .rl.export import ExportOptions, export_file

    if fmt not in ("trl", "verl"):
        _fail(f"unknown format {fmt!r}; use trl or verl")
    problem = order_problem(order, measured)
    if problem:
        _fail(f"--order {order!r} {problem}")
    reg = _registry(registry)
    try:
        count, bad = export_file(from_, tasks, out, fmt, reg, ExportOptions(
            max_turns=max_turns, cost_weight=cost_weight, format_weight=format_weight, tool_calls=tool_calls,
            ranker=make_ranker(order),
            prompt=PromptOptions(order=prompt_order(order), measured=measured, **{k: v for k, v in (("card_chars", card_chars),
                                                                         ("observation_chars", observation_chars))
                                                       if v is not None})))
    except MaestroError as exc:
        _fail(str(exc))
    for problem in bad:
        err.print(f"[yellow]skipped[/yellow] {problem}")
    console.print(f"exported {count} episodes ({fmt}) -> {out}" + (f"; {len(bad)} unreadable lines skipped" if bad else ""))


@app.command("train-lm")
@typer_options(LMTrainConfig, flags={"tasks": ("--tasks", "-t"), "out_dir": ("--out-dir", "--out", "-o")})
def train_lm_(config: LMTrainConfig) -> None:
    """Train the LM router with TRL: optional SFT warm start, then GRPO with episodes run through the graph. Every
    LMTrainConfig field is an option (or a key of --config FILE.yaml); configs/recipes/lm-router-sft.yaml is the
    shipped router's recipe."""
    _threads()
    if (module := missing_package("trl", "datasets")) is not None:
        _fail(missing_extra("train", "`maestro train-lm`", module))
    from .rl.trl_train import train_lm

    try:
        summary = train_lm(config)
    except MaestroError as exc:
        _fail(str(exc))
    for phase in ("before", "after_sft", "after"):
        if phase in summary:
            m = summary[phase]
            console.print(f"{phase}: accuracy {m['accuracy']:.3f} on {m['items']} items, "
                          f"{m['format_errors_per_episode']:.2f} format errors per episode")
    skipped = [*summary.get("sft_lines_skipped", []), *summary.get("sft_examples_skipped", []),
               *summary.get("rollout_problems", [])]
    if skipped:
        console.print(f"{len(skipped)} input problems skipped, cut or rejected (each named in summary.json), "
                      f"first: {skipped[0]}")
    console.print(f"trained in {summary['train_seconds']:.0f}s -> {summary['final_model']} "
                  f"(log, reward_curve.png, summary.json in {config.out_dir})")


def main() -> None:  # pragma: no cover - console entry for `python -m maestro_graph.cli`
    sys.exit(app())


if __name__ == "__main__":  # pragma: no cover
    main()
