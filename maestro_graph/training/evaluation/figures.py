"""The figures of an evaluation report that compare policies on one pair of axes, drawn so that a person can read
every policy: the reliability diagram (each policy its own marker and line style, nudged sideways so equal points do
not hide each other, each bin's answer count written beside its point) and accuracy against cost (each point named,
the names placed where they overlap no other name or point, with a leader line when moved away).

Each function takes pyplot (`core.plots.pyplot`) and the per-policy metrics of `EvaluationResult.metrics()`, and
returns the figure, which the caller saves and closes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["MARKERS", "cost_figure", "place_labels", "reliability_figure", "text_box"]

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
"""One marker per policy (then repeated), so policies tell apart in grey print and where colours coincide."""
_LINES = ("-", "--", ":", "-.")
_NUDGE = 0.012
"""How far apart (in confidence) the points of several policies in one bin are drawn: a tenth of a bin's width."""
_LABEL_OFFSETS = ((7, 5, "left", "bottom"), (7, -5, "left", "top"), (-7, 5, "right", "bottom"),
                  (-7, -5, "right", "top"), (0, 9, "center", "bottom"), (0, -9, "center", "top"))
"""Where a label may go around its point (points right, points up, alignment), tried in this order; each tried again
farther out, in `_RINGS` steps, before the label is left at the first place."""
_RINGS = 6
_RING_PT = 11


def reliability_figure(plt: Any, metrics: dict[str, dict]) -> Any:
    """The reliability diagram of every policy with answers: share right against mean confidence per bin, with the
    bin's count beside each point and the policy's ECE in the legend."""
    fig, ax = plt.subplots(figsize=(6, 5.2))
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1, label="calibrated")
    drawn = [(p, m) for p, m in metrics.items() if any(b["count"] for b in m["reliability"])]
    points, counts, colours = [], [], []
    for i, (policy, m) in enumerate(drawn):
        filled = [b for b in m["reliability"] if b["count"]]
        nudge = (i - (len(drawn) - 1) / 2) * _NUDGE
        xs, ys = [b["confidence"] + nudge for b in filled], [b["accuracy"] for b in filled]
        ece = "" if m["ece"] is None else f" (ECE {m['ece']:.3f})"
        (line,) = ax.plot(xs, ys, marker=MARKERS[i % len(MARKERS)], linestyle=_LINES[i % len(_LINES)],
                          markersize=6, markerfacecolor="none" if i % 2 else None, alpha=0.9, label=policy + ece)
        points += list(zip(xs, ys))
        counts += [str(b["count"]) for b in filled]
        colours += [line.get_color()] * len(filled)
    ax.set_xlim(-0.03, 1.03)
    ax.set_ylim(-0.05, 1.08)
    ax.set_xlabel("confidence (mean in each of 10 bins)")
    ax.set_ylabel("share of those answers that were right")
    ax.set_title("reliability diagram (beside each point: answers in its bin)", fontsize=10)
    # below the axes: no point hidden
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, frameon=False)
    fig.tight_layout()
    place_labels(fig, ax, points, counts, colours, fontsize=7)
    return fig


def cost_figure(plt: Any, metrics: dict[str, dict]) -> Any:
    """Macro accuracy against mean cost per episode, one named point per policy."""
    fig, ax = plt.subplots(figsize=(6.5, 4.8))
    points, names, colours = [], [], []
    for i, (policy, m) in enumerate(metrics.items()):
        colour = f"C{i % 10}"
        hollow = i % 2  # every other policy's marker hollow and larger: policies at one point all show
        ax.scatter(m["mean_cost"], m["macro_accuracy"], marker=MARKERS[i % len(MARKERS)], s=70 if hollow else 36,
                   facecolors="none" if hollow else colour, edgecolors=colour, linewidths=1.4, zorder=3 + (not hollow))
        points.append((m["mean_cost"], m["macro_accuracy"]))
        names.append(policy)
        colours.append(colour)
    ax.margins(x=0.25, y=0.2)  # room around the outer points for their names
    low, high = ax.get_xlim()
    ax.set_xlim(max(low, -0.03 * (high - low)), high)  # no stretch of negative cost
    ax.set_xlabel("mean cost per episode")
    ax.set_ylabel("macro accuracy")
    ax.set_title("accuracy against cost")
    fig.tight_layout()
    place_labels(fig, ax, points, names, colours, fontsize=8)
    return fig


def place_labels(fig: Any, ax: Any, points: Sequence[tuple[float, float]], labels: Sequence[str],
                 colours: Sequence[Any], *, fontsize: float) -> list[Any]:
    """Write each label beside its point (data coordinates) where it overlaps no label placed before it, no point
    and stays inside the axes: the offsets of `_LABEL_OFFSETS`, each farther out ring by ring (with a leader line
    from the second ring); a label with no free place keeps the first one. Call after the layout is final (the
    places are measured on the drawn figure). Returns the annotations."""
    renderer = fig.canvas.get_renderer()
    inside = ax.get_window_extent(renderer)
    to_pixels = ax.transData.transform
    taken = [_box(to_pixels(p), 4) for p in points]  # the markers themselves
    made = []
    for (x, y), label, colour in zip(points, labels, colours):
        chosen = None
        for ring in range(_RINGS):
            for dx, dy, ha, va in _LABEL_OFFSETS:
                grow = 1 + ring * _RING_PT / max(abs(dx), abs(dy))
                note = ax.annotate(label, (x, y), xytext=(dx * grow, dy * grow), textcoords="offset points",
                                   ha=ha, va=va, fontsize=fontsize, color=colour,
                                   arrowprops={"arrowstyle": "-", "color": colour, "lw": 0.6} if ring else None)
                box = text_box(note, renderer)
                if _within(box, inside) and not any(box.overlaps(other) for other in taken):
                    chosen = note
                    break
                note.remove()
            if chosen is not None:
                break
        if chosen is None:
            dx, dy, ha, va = _LABEL_OFFSETS[0]
            chosen = ax.annotate(label, (x, y), xytext=(dx, dy), textcoords="offset points", ha=ha, va=va,
                                 fontsize=fontsize, color=colour)
        taken.append(text_box(chosen, renderer))
        made.append(chosen)
    return made


def text_box(note: Any, renderer: Any) -> Any:
    """Where a label's text is on the figure (an annotation's own extent spans its leader line too, which always
    touches the point it names)."""
    from matplotlib.text import Text

    note.update_positions(renderer)
    return Text.get_window_extent(note, renderer)


def _box(centre: Sequence[float], half: float) -> Any:
    from matplotlib.transforms import Bbox

    return Bbox.from_extents(centre[0] - half, centre[1] - half, centre[0] + half, centre[1] + half)


def _within(box: Any, outer: Any) -> bool:
    return box.x0 >= outer.x0 and box.x1 <= outer.x1 and box.y0 >= outer.y0 and box.y1 <= outer.y1
