"""`maestro ask`: one question about images, answered through the graph, with the steps it took."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from ...errors import MaestroError
from .common import console, fail, limit_threads, narrow, progress
from .common import registry as load_registry
from .options import POLICY_HELP, MaxCostOpt, MaxTurnsOpt, ReachFloorOpt, RegistryOpt

ERROR_CHARS = 80
"""Characters of a step's error the table shows; a longer one is printed whole below it (a URL alone can take 80)."""

if TYPE_CHECKING:
    from ...episode.runner import EpisodeResult

__all__ = ["ask"]



def ask(
    question: str = typer.Argument(..., help="The question, e.g. 'How many circles are there?'"),
    image: list[Path] = typer.Option([], "--image", "-i", help="An image file (repeat for several), or "
                                     "example:NAME for an image the package ships (`maestro examples` lists them)."),
    choice: list[str] = typer.Option([], "--choice", "-c", help="A multiple-choice option (repeat)."),
    policy: str | None = typer.Option(None, "--policy", "-p", help=f"{POLICY_HELP}; default: neural"),
    registry: Path | None = RegistryOpt,
    max_turns: int = MaxTurnsOpt,
    max_cost: float = MaxCostOpt,
    reach_floor: float = ReachFloorOpt,
    min_confidence: float = typer.Option(
        0.0, min=0, max=1, help="Withhold an answer less sure than this (its confidence: the probability that it is "
        "right): no answer, exit 1, \"I could not find out\"; 0: every answer is given."),
    as_json: bool = typer.Option(False, "--json", help="Print the answer and trace as JSON."),
    checkpoint_db: Path | None = typer.Option(None, help="SQLite file to checkpoint the episode in."),
    thread: str | None = typer.Option(None, help="Thread id for the checkpoint; needs --checkpoint-db (a thread "
                                         "lives in the checkpoint database, so without one it is refused)."),
) -> None:
    """Answer QUESTION about the images and print the answer with a table of the steps taken."""
    limit_threads()
    from ...episode.context import MaestroContext
    from ...episode.graph import build_graph
    from ...episode.runner import run_episode
    from ...policy import DEFAULT_POLICY, make_policy

    policy = policy or DEFAULT_POLICY
    image = [_image_path(p) for p in image]
    if thread is not None and checkpoint_db is None:
        fail(f"--thread {thread}: a thread is kept in a checkpoint database, and none was named, so the conversation "
             "would be forgotten; add --checkpoint-db FILE (e.g. --checkpoint-db threads.sqlite)")
    _check_input(question, image, checkpoint_db is not None)
    reg = load_registry(registry)
    try:
        pol = make_policy(policy)
    except MaestroError as exc:
        fail(str(exc))
    context = MaestroContext(max_turns=max_turns, max_cost=max_cost, reach_floor=reach_floor,
                             min_confidence=min_confidence)
    config, saver, store = {}, None, None
    if checkpoint_db:
        from ...episode.storage import sqlite_checkpointer, sqlite_image_store

        saver, store = sqlite_checkpointer(checkpoint_db), sqlite_image_store(checkpoint_db)
        config = {"configurable": {"thread_id": thread or "default"}}
    graph = build_graph(reg, pol, checkpointer=saver, store=store)
    with progress("answering (the first question loads the experts, about 10 s)"):
        result = run_episode(graph, question, [str(p.resolve()) for p in image], list(choice) or None,
                             context=context, config=config)
    if saver is not None:
        from ...episode.storage import prune_thread

        prune_thread(saver, config["configurable"]["thread_id"])
    if as_json:
        _print_json(result, policy)
    else:
        _print_table(result)


def _image_path(given: Path) -> Path:
    """An `--image` as a file: `example:NAME` is the packaged example NAME, anything else the path given."""
    from .examples import EXAMPLE_PREFIX, example_path

    text = str(given)
    return example_path(text.removeprefix(EXAMPLE_PREFIX)) if text.startswith(EXAMPLE_PREFIX) else given


def _check_input(question: str, images: list[Path], threaded: bool) -> None:
    """Refuse a blank question without images or thread to read it from, a folder given as an image and an image
    that cannot be read, before any model loads."""
    from ...core.question_text import clean_question, question_problem
    from ...images.load import load_image

    problem = question_problem(clean_question(question), image=bool(images) or threaded)
    if problem:  # a blank question is read from the image (the request's, or its thread's)
        fail(problem)
    for path in images:
        if path.is_dir():
            fail(f"--image {path}: is a folder, not an image file; name each image in it with its own --image "
                 f"(e.g. --image {path / 'photo.png'})")
        try:
            load_image(str(path))
        except MaestroError as exc:
            fail(str(exc))


def _print_json(result: EpisodeResult, policy: str) -> None:
    """The answer and its trace on stdout; exit 1 without an answer."""
    print(json.dumps({"answer": result.answer, "answer_source": result.answer_source,
                      "confidence": result.confidence, "policy": policy, "stop": result.stop.value,
                      "stop_reason": result.stop_reason,
                      "steps": [s.model_dump() for s in result.steps],
                      "cost": result.cost, "latency_s": result.latency_s}, ensure_ascii=False, indent=2))
    if result.answer is None:
        raise typer.Exit(1)


def _print_table(result: EpisodeResult) -> None:
    """The steps as a table, then the answer with what it rests on; exit 1 (with the reason) without an answer."""
    from ...episode.confidence import answer_note

    note = answer_note(result.answer_source, result.confidence, asked=bool(result.steps))
    console.print(_steps_table(result, note))
    thin = narrow()
    for i, step in enumerate(result.steps, start=1):  # an error the table has no room for, whole on a line of its own
        if step.error and (thin or len(step.error) > ERROR_CHARS):
            console.print(f"step {i} error: {escape(step.error)}")  # wrapped at the terminal width
    if result.answer is None:  # why there is none, on stdout too (a withheld answer's confidence is in the reason)
        console.print(f"[bold]answer:[/bold] none   ({escape(result.stop_reason)})")
        said = "I could not find out" if result.confidence is not None else "no answer"
        fail(f"{said} ({result.stop_reason})", code=1)
    color = "yellow" if result.answer_source in ("guess", "candidate") else "dim"
    console.print(f"[bold]answer:[/bold] {escape(result.answer)}   [{color}]({escape(note)})[/{color}]"
                  f"   [dim]({result.stop_reason}, {result.latency_s:.1f}s, cost {result.cost:.3f})[/dim]")


def _cut(error: str) -> str:
    return error if len(error) <= ERROR_CHARS else error[:ERROR_CHARS - 1] + "…"


def _steps_table(result: EpisodeResult, note: str) -> Table:
    """One row per step and one for the answer; in a narrow terminal (see WIDE_COLUMNS) without borders and the
    error column, so that model and skill names are never cut."""
    thin = narrow()
    heads = ("#", "model", "skill", "answer", "s" if thin else "latency (s)", "cost", *(() if thin else ("error",)))
    table = Table(*heads, title="steps", box=box.SIMPLE_HEAD if thin else box.HEAVY_HEAD)
    for column in table.columns[1:3]:
        column.no_wrap = thin
    for i, step in enumerate(result.steps, start=1):
        table.add_row(str(i), step.model, step.skill, escape(str(step.answer)), f"{step.latency_s:.2f}",
                      f"{step.cost:.3f}", *(() if thin else (escape(_cut(step.error or "")),)))
    table.add_section()
    table.add_row("", "", "answer", escape(str(result.answer)), "", "", *(() if thin else (escape(note),)))
    return table
