"""The `maestro` command: ask one question, predict over a task file, and inspect the registry."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from .bench.cli import bench_app
from .errors import MaestroError

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

RegistryOpt = typer.Option(None, "--registry", "-r", help="Registry config YAML (default: the packaged local one).")
MaxTurnsOpt = typer.Option(4, min=1, help="Most expert calls per episode before answering.")
MaxCostOpt = typer.Option(10.0, min=0, help="Cost budget of an episode, in card cost units.")
LimitOpt = typer.Option(None, min=1, help="Only the first N items.")
WorkersOpt = typer.Option(2, min=1, help="Episodes run at once (per-model limits still apply).")
CacheDirOpt = typer.Option(Path(".maestro-cache"), help="Persistent cache of expert calls and skill steps.")
NoCacheOpt = typer.Option(False, "--no-cache", help="Call every expert afresh.")


def _fail(message: str, code: int = 2) -> None:
    err.print(f"[red]error:[/red] {message}")
    raise typer.Exit(code)


def _registry(path: Optional[Path], cache_dir: Optional[Path] = None):
    from .cache import ExpertCache
    from .registry import Registry

    try:
        return Registry.load(path, cache=ExpertCache(cache_dir) if cache_dir else None)
    except MaestroError as exc:
        _fail(str(exc))


def _threads() -> None:
    """Two cores are easily oversubscribed: one intra-op thread per library unless the user says otherwise."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@app.command()
def ask(
    question: str = typer.Argument(..., help="The question, e.g. 'How many circles are there?'"),
    image: list[Path] = typer.Option([], "--image", "-i", help="An image file (repeat for several)."),
    choice: list[str] = typer.Option([], "--choice", "-c", help="A multiple-choice option (repeat)."),
    policy: Optional[str] = typer.Option(None, "--policy", "-p",
                                         help="neural (default: the shipped checkpoint) | rules | random | "
                                              "fixed:MODEL@@SKILL"),
    registry: Optional[Path] = RegistryOpt,
    max_turns: int = MaxTurnsOpt,
    max_cost: float = MaxCostOpt,
    as_json: bool = typer.Option(False, "--json", help="Print the answer and trace as JSON."),
    checkpoint_db: Optional[Path] = typer.Option(None, help="SQLite file to checkpoint the episode in."),
    thread: Optional[str] = typer.Option(None, help="Thread id for the checkpoint (with --checkpoint-db)."),
) -> None:
    """Answer QUESTION about the images and print the answer with a table of the steps taken."""
    _threads()
    from .graph import MaestroContext, build_graph
    from .images import load_image
    from .policy import ASK_POLICY, make_policy
    from .runner import run_episode

    policy = policy or ASK_POLICY
    if not question.strip():
        _fail("the question is empty; ask something about the image, e.g. 'What is the total?'")
    for path in image:
        try:
            load_image(str(path))
        except MaestroError as exc:
            _fail(str(exc))
    reg = _registry(registry)
    try:
        pol = make_policy(policy)
    except MaestroError as exc:
        _fail(str(exc))
    context = MaestroContext(max_turns=max_turns, max_cost=max_cost)
    images = [str(p.resolve()) for p in image]
    config = {}
    if checkpoint_db:
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        saver = SqliteSaver(sqlite3.connect(str(checkpoint_db), check_same_thread=False))
        config = {"configurable": {"thread_id": thread or "default"}}
    else:
        saver = None
    graph = build_graph(reg, pol, checkpointer=saver)
    resume = False
    if saver is not None:
        state = graph.get_state(config)
        if state.values:
            if state.values.get("question") != question:
                _fail(f"thread {thread or 'default'!r} in {checkpoint_db} holds another question; use a new --thread")
            resume = bool(state.next)
            if not resume:
                err.print(f"thread {thread or 'default'!r} is finished; showing its stored result")
    result = run_episode(graph, question, images, list(choice) or None, context=context, config=config,
                         resume=resume)
    if as_json:
        print(json.dumps({"answer": result.answer, "policy": policy, "stop_reason": result.stop_reason,
                          "steps": [s.model_dump() for s in result.steps],
                          "cost": result.cost, "latency_s": result.latency_s}, ensure_ascii=False, indent=2))
        return
    table = Table("#", "model", "skill", "answer", "latency (s)", "cost", "error", title="steps")
    for i, step in enumerate(result.steps, start=1):
        table.add_row(str(i), step.model, step.skill, str(step.answer), f"{step.latency_s:.2f}", f"{step.cost:.3f}",
                      (step.error or "")[:80])
    console.print(table)
    console.print(f"[bold]answer:[/bold] {result.answer if result.answer is not None else '(no answer)'}"
                  f"   [dim]({result.stop_reason}, {result.latency_s:.1f}s, cost {result.cost:.3f})[/dim]")


@app.command()
def predict(
    tasks: Path = typer.Option(..., "--tasks", "-t", exists=True, dir_okay=False, help="Task file (JSONL)."),
    out: Path = typer.Option(..., "--out", "-o", help="Prediction file to write (JSONL)."),
    policy: Optional[str] = typer.Option(None, "--policy", "-p",
                                         help="rules (default) | neural | random | fixed:MODEL@@SKILL | "
                                              "lm:... | oracle"),
    registry: Optional[Path] = RegistryOpt,
    max_turns: int = MaxTurnsOpt,
    max_cost: float = MaxCostOpt,
    limit: Optional[int] = LimitOpt,
    workers: int = WorkersOpt,
    cache_dir: Path = CacheDirOpt,
    no_cache: bool = NoCacheOpt,
    resume: bool = typer.Option(False, "--resume", help="Keep the predictions already in OUT; run only the rest."),
) -> None:
    """Run POLICY over every item of a task file and write the prediction file; prints accuracy per source."""
    _threads()
    from .graph import MaestroContext
    from .policy import DEFAULT_POLICY, make_policy
    from .runner import predict as run_predict

    policy = policy or DEFAULT_POLICY
    reg = _registry(registry, None if no_cache else cache_dir)
    if policy != "oracle":
        try:
            make_policy(policy)
        except MaestroError as exc:
            _fail(str(exc))
    summary = run_predict(reg, tasks, out, policy=policy, limit=limit, workers=workers, resume=resume,
                          context=MaestroContext(max_turns=max_turns, max_cost=max_cost))
    for problem in summary.skipped:
        err.print(f"[yellow]skipped[/yellow] {problem.file}:{problem.line} ({problem.id}): {problem.error}")
    table = Table("source", "items", "accuracy", title=f"{policy} on {tasks.name}")
    for source, values in sorted(summary.by_source.items()):
        table.add_row(source, str(len(values)), f"{sum(values) / len(values):.3f}")
    console.print(table)
    console.print(f"{summary.total} items, {summary.failed} failed, {len(summary.skipped)} skipped -> {out}")
    if reg.cache is not None:
        stats = reg.cache.stats
        console.print(f"expert cache {reg.cache.root}: {stats.hits} hits, {stats.misses} misses "
                      f"({stats.hit_rate:.0%} hit rate), {stats.corrupt} corrupt")


@app.command("eval")
def eval_(
    tasks: list[Path] = typer.Option(..., "--tasks", "-t", exists=True, dir_okay=False, help="Task file (repeat)."),
    policy: list[str] = typer.Option(..., "--policy", "-p",
                                     help="rules | random | fixed:MODEL@@SKILL | best-single | knn | classifier | oracle (repeat)"),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for results.json, report.md, predictions, plots."),
    train_tasks: list[Path] = typer.Option([], exists=True, dir_okay=False,
                                           help="Training task file for best-single, knn and classifier (repeat)."),
    registry: Optional[Path] = RegistryOpt,
    max_turns: int = MaxTurnsOpt,
    max_cost: float = MaxCostOpt,
    limit: Optional[int] = LimitOpt,
    workers: int = WorkersOpt,
    cache_dir: Path = CacheDirOpt,
    no_cache: bool = NoCacheOpt,
) -> None:
    """Evaluate several policies through the same graph on the same items; write a report with tables and plots."""
    _threads()
    from .evaluation.evaluate import evaluate
    from .evaluation.report import write_report
    from .graph import MaestroContext
    from .policy import TRAINED_POLICIES, make_policy

    reg = _registry(registry, None if no_cache else cache_dir)
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
        run = evaluate(reg, tasks, policy, train_tasks=train_tasks, workers=workers, limit=limit,
                       context=MaestroContext(max_turns=max_turns, max_cost=max_cost),
                       predictions_dir=out / "predictions")
    except ValueError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        err.print(f"[yellow]interrupted:[/yellow] the episodes that finished are in {out / 'predictions'}; "
                   "rerun the command to evaluate again (finished expert calls replay from the cache)")
        raise typer.Exit(130) from None
    results = write_report(run, out)
    table = Table("policy", "macro acc", "accuracy", "mean cost", "calls/ep", "p50 s", "cache hits", "wall s",
                  title=f"evaluation -> {out}/report.md")
    for name, m in results["policies"].items():
        table.add_row(name, f"{m['macro_accuracy']:.3f}", f"{m['accuracy']:.3f}", f"{m['mean_cost']:.2f}",
                      f"{m['calls_per_episode']:.2f}", f"{m['latency_p50_s']:.2f}", str(m["cache_hits"]),
                      f"{m['wall_s']:.0f}")
    console.print(table)
    if run.skipped:
        console.print(f"[yellow]{len(run.skipped)} items skipped[/yellow] (listed in results.json)")


@app.command()
def train(
    tasks: list[Path] = typer.Option(..., "--tasks", "-t", exists=True, dir_okay=False, help="Training task file (repeat)."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for checkpoints, train_log.jsonl and curves.png."),
    registry: Optional[Path] = RegistryOpt,
    steps: int = typer.Option(60, min=1, help="Optimiser steps."),
    tasks_per_step: int = typer.Option(16, min=1),
    group_size: int = typer.Option(8, min=2, help="Episodes per task (G)."),
    lr: float = typer.Option(3e-3),
    cost_weight: float = typer.Option(0.0, min=0, help="Reward = score - cost_weight * cost."),
    advantage_std_floor: float = typer.Option(0.0, min=0, help="Divide advantages by max(group std, this); keeps "
                                              "a cost weight from dominating groups that differ only in cost."),
    entropy_coef: float = typer.Option(0.01, min=0),
    inner_epochs: int = typer.Option(2, min=1, help="Gradient passes over each step's rollouts."),
    registry_dropout: float = typer.Option(0.15, min=0, max=0.99),
    paraphrase_prob: float = typer.Option(0.5, min=0, max=1),
    revisit_weight: float = typer.Option(0.25, min=0.01, max=1,
                                         help="Sampling weight of a task whose last group gave no signal (1: uniform)."),
    max_turns: int = MaxTurnsOpt,
    seed: int = typer.Option(0),
    eval_tasks: list[Path] = typer.Option([], exists=True, dir_okay=False,
                                          help="Validation task file (repeat): scored at every checkpoint; the best "
                                               "checkpoint is kept as OUT/best.pt."),
    resume: bool = typer.Option(True, help="Continue from OUT/checkpoint.pt when it exists."),
    cache_dir: Path = CacheDirOpt,
) -> None:
    """Train the neural policy with GRPO on task files (outcome reward only); OUT/policy.pt is the result."""
    _threads()
    import torch

    from .evaluation.evaluate import load_task_files
    from .rl.grpo import GRPOConfig, GRPOTrainer

    torch.set_num_threads(1)
    reg = _registry(registry, cache_dir)
    items, problems = load_task_files(tasks)
    held_out, eval_problems = load_task_files(eval_tasks) if eval_tasks else ([], [])
    for problem in problems + eval_problems:
        err.print(f"[yellow]skipped[/yellow] {problem.file}:{problem.line}: {problem.error}")
    try:
        config = GRPOConfig(steps=steps, tasks_per_step=tasks_per_step, group_size=group_size, lr=lr,
                            cost_weight=cost_weight, advantage_std_floor=advantage_std_floor,
                            entropy_coef=entropy_coef, inner_epochs=inner_epochs,
                            registry_dropout=registry_dropout, paraphrase_prob=paraphrase_prob,
                            revisit_weight=revisit_weight, max_turns=max_turns, seed=seed)
        trainer = GRPOTrainer(reg, items, config, out, eval_tasks=held_out)
        if resume and trainer.resume():
            console.print(f"resuming from {trainer.checkpoint_path} at step {trainer.step}")
    except MaestroError as exc:
        _fail(str(exc))
    start = time.perf_counter()
    trainer.train()
    console.print(f"trained {trainer.step} steps in {time.perf_counter() - start:.0f}s -> {out / 'policy.pt'} "
                  f"(curves: {out / 'curves.png'}, log: {out / 'train_log.jsonl'})")
    if trainer.best:
        console.print(f"best validation score {trainer.best['score']:.3f} at step {trainer.best['step']} -> "
                      f"{out / 'best.pt'}")


cache_app = typer.Typer(help="The persistent cache of expert calls.", no_args_is_help=True)
app.add_typer(cache_app, name="cache")


@cache_app.command("clear")
def cache_clear(cache_dir: Path = CacheDirOpt) -> None:
    """Delete every cached expert call."""
    from .cache import ExpertCache

    console.print(f"removed {ExpertCache(cache_dir).clear()} entries from {cache_dir}")


@skills_app.command("list")
def skills_list(registry: Optional[Path] = RegistryOpt) -> None:
    """List the skills found in the registry's skill folders."""
    reg = _registry(registry)
    table = Table("skill", "tier", "requires", "description")
    for spec in sorted(reg.skills.values(), key=lambda s: (s.tier, s.name)):
        table.add_row(spec.name, str(spec.tier), ", ".join(spec.requires), spec.description[:90])
    console.print(table)


@registry_app.command("show")
def registry_show(registry: Optional[Path] = RegistryOpt,
                  as_json: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
    """Show the models (with availability and the reason when unavailable), skills and compatible pairs."""
    reg = _registry(registry)
    info = reg.describe()
    if as_json:
        print(json.dumps(info, indent=2))
        return
    models = Table("model", "capabilities", "backend", "cost/call", "available", title=f"models ({info['config']})")
    for m in info["models"]:
        models.add_row(m["name"], ", ".join(m["capabilities"]), m["backend"], f"{m['cost_per_call']:g}",
                       "yes" if m["available"] else f"[red]no[/red]: {m['reason']}")
    console.print(models)
    console.print(f"[bold]{len(info['pairs'])} pairs:[/bold] " + ", ".join(info["pairs"]))


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="Interface to listen on (loopback by default)."),
    port: int = typer.Option(8000, min=1, max=65535, help="TCP port."),
    registry: Optional[Path] = RegistryOpt,
    policy: str = typer.Option("rules", "--policy", "-p", help="Default policy: rules | random | fixed:MODEL@@SKILL"),
    checkpoint_db: Optional[Path] = typer.Option(None, help="SQLite file for checkpoints (thread ids, resume)."),
    api_key_env: str = typer.Option("MAESTRO_API_KEY", help="Environment variable holding the API key."),
    allow_image_host: list[str] = typer.Option([], "--allow-image-host", help="Host whose image URLs may be fetched."),
    max_episodes: int = typer.Option(64, min=1, help="Episodes admitted at once (429 beyond)."),
    workers: int = typer.Option(2, min=1, help="Threads running episodes."),
    timeout_s: float = typer.Option(300.0, min=0.1, help="Time limit of one request, in seconds."),
    max_body_bytes: int = typer.Option(20_000_000, min=1, help="Largest request body (413 beyond)."),
    max_image_bytes: int = typer.Option(8_000_000, min=1, help="Largest image (413 beyond)."),
    max_turns: int = typer.Option(4, min=1, help="Default and largest turn budget."),
    cache_dir: Optional[Path] = typer.Option(None, help="Persistent cache of expert calls (default: none)."),
    log_level: str = typer.Option("info", help="uvicorn log level."),
) -> None:
    """Serve an OpenAI-compatible endpoint (/v1/chat/completions, model `maestro`), /healthz, and LangServe routes
    at /maestro when the `langserve` extra is installed."""
    _threads()
    import uvicorn
    from pydantic import ValidationError

    from .policy import make_policy
    from .serve import ServeSettings, create_app

    try:
        make_policy(policy)
        settings = ServeSettings(
            policy=policy, checkpoint_db=checkpoint_db, api_key_env=api_key_env,
            allowed_image_hosts=tuple(allow_image_host), max_episodes=max_episodes, workers=workers,
            request_timeout_s=timeout_s, max_body_bytes=max_body_bytes, max_image_bytes=max_image_bytes,
            max_turns=max_turns,
        )
    except (MaestroError, ValidationError) as exc:
        _fail(str(exc))
    uvicorn.run(create_app(_registry(registry, cache_dir), settings), host=host, port=port, log_level=log_level)


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
    """Run the expert-fault and bad-input suites; write a table of faults survived, inputs rejected, episodes
    completed and lost. Exits 1 when anything was lost or an input was not handled as expected."""
    _threads()
    from .policy import make_policy
    from .reliability import run_reliability

    try:
        make_policy(policy)
    except MaestroError as exc:
        _fail(str(exc))
    results = run_reliability(out, episodes=episodes, policy=policy, workers=workers, task_files=list(tasks) or None,
                              seed=seed, progress=lambda m: err.print(f"[dim]{m}[/dim]"))
    console.print((out / "reliability.md").read_text())
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
    max_turns: int = typer.Option(4, min=1, help="The turn budget the episodes ran with."),
    cost_weight: float = typer.Option(0.0, min=0, help="Reward = score - cost_weight * cost - format_weight * errors."),
    format_weight: float = typer.Option(0.5, min=0),
    tool_calls: bool = typer.Option(False, "--tool-calls", help="TRL: actions as `search` tool calls, not tags."),
    card_chars: int = typer.Option(200, min=20, help="Characters of each card description in the prompt (use the "
                                                     "value `train-lm` trains with: its config's card_chars)."),
    observation_chars: int = typer.Option(600, min=20, help="Characters of each observation's evidence shown."),
    cache_dir: Path = typer.Option(Path(".maestro-cache"), help="Expert cache (re-runs steps whose observation "
                                                                  "the file lacks)."),
) -> None:
    """Export trajectories for TRL or verl: the router conversation from the cards, with the reward and its parts."""
    _threads()
    from .policy.lm import PromptOptions
    from .rl.export import ExportOptions, export_file

    if fmt not in ("trl", "verl"):
        _fail(f"unknown format {fmt!r}; use trl or verl")
    reg = _registry(registry, cache_dir)
    try:
        count = export_file(from_, tasks, out, fmt, reg, ExportOptions(
            max_turns=max_turns, cost_weight=cost_weight, format_weight=format_weight, tool_calls=tool_calls,
            prompt=PromptOptions(card_chars=card_chars, observation_chars=observation_chars)))
    except MaestroError as exc:
        _fail(str(exc))
    console.print(f"exported {count} episodes ({fmt}) -> {out}")


@app.command("train-lm")
def train_lm_(
    config: Path = typer.Option(..., "--config", "-c", exists=True, dir_okay=False,
                                help="Training config YAML (configs/train-lm-cpu.yaml, configs/train-lm-gpu.yaml)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Override the config's out_dir."),
    steps: Optional[int] = typer.Option(None, min=1, help="Override the config's GRPO steps."),
) -> None:
    """Train the LM router with TRL: optional SFT warm start, then GRPO with episodes run through the graph."""
    _threads()
    from .rl.trl_train import load_train_config, train_lm

    try:
        cfg = load_train_config(config, out_dir=str(out) if out else None, steps=steps)
        summary = train_lm(cfg)
    except MaestroError as exc:
        _fail(str(exc))
    for phase in ("before", "after"):
        if phase in summary:
            m = summary[phase]
            console.print(f"{phase}: accuracy {m['accuracy']:.3f} on {m['items']} items, "
                          f"{m['format_errors_per_episode']:.2f} format errors per episode")
    console.print(f"trained in {summary['train_seconds']:.0f}s -> {summary['final_model']} "
                  f"(log, reward_curve.png, summary.json in {cfg.out_dir})")


def main() -> None:  # pragma: no cover - console entry for `python -m maestro_graph.cli`
    sys.exit(app())


if __name__ == "__main__":  # pragma: no cover
    main()
