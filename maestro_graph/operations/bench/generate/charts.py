"""Charts drawn with matplotlib: bar, grouped bar, line and pie, with or without printed values.

Values without printed labels are read off the axis, so their questions carry a tolerance and the values are
multiples of the grid step (exactly readable in principle, as in ChartQA); printed values must be matched exactly.
"""

from __future__ import annotations

import random

from .base import COLORS, Draft, ask, degrade, figure_to_image, fmt_num, new_figure, pick_colors

_CATEGORY_POOLS = (
    ("Apples", "Bananas", "Cherries", "Grapes", "Mangoes", "Pears", "Plums", "Kiwis"),
    ("Brazil", "Canada", "Egypt", "France", "India", "Japan", "Kenya", "Mexico", "Norway", "Peru"),
    ("North", "South", "East", "West", "Central"),
    ("Laptops", "Phones", "Tablets", "Monitors", "Printers", "Cameras"),
    ("Bus", "Car", "Bike", "Train", "Walk", "Ferry"),
)
_SERIES_POOL = ("Store A", "Store B", "Online", "Men", "Women", "Urban", "Rural", "Team X", "Team Y")
_MEASURES = ("Sales (units)", "Revenue ($M)", "Share (%)", "Visitors (thousands)", "Score", "Count")
_TITLES = ("Quarterly overview", "Survey results", "Annual report", "Market snapshot", "", "Comparison by group")

QUESTIONS: dict[str, tuple[str, ...]] = {
    "value": (
        "What is the value of {cat}{series_part}?",
        "According to the chart, how much is {cat}{series_part}?",
        "Read off the value shown for {cat}{series_part}.",
        "What value does the chart give for {cat}{series_part}?",
    ),
    "argmax": (
        "Which {unit} has the highest value{series_part}?",
        "Which {unit} is the largest{series_part} in the chart?",
        "Name the {unit} with the greatest value{series_part}.",
    ),
    "argmin": (
        "Which {unit} has the lowest value{series_part}?",
        "Which {unit} is the smallest{series_part} in the chart?",
        "Name the {unit} with the least value{series_part}.",
    ),
    "compare": (
        "Is the value of {a} higher than that of {b}{series_part}?",
        "According to this chart, is {a} greater than {b}{series_part}?",
        "Does {a} exceed {b}{series_part}?",
    ),
    "difference": (
        "What is the difference between {a} and {b}{series_part}?",
        "By how much does {a} differ from {b}{series_part}?",
        "How far apart are the values of {a} and {b}{series_part}?",
    ),
    "total": (
        "What is the sum of all values{series_part}?",
        "Add up every value shown{series_part}. What is the total?",
        "What do all the values{series_part} add up to?",
    ),
}


def _values(rng: random.Random, k: int, labelled: bool, step: float) -> list[float]:
    """`k` distinct values (distinct so that argmax, argmin and comparisons are unambiguous); unlabelled values sit
    on multiples of the grid step so they can be read exactly off the axis."""
    while True:
        if labelled:
            decimals = rng.choice((0, 0, 1))
            values = [round(rng.uniform(5, 95), decimals) for _ in range(k)]
        else:
            values = [step * rng.randint(1, int(100 // step)) for _ in range(k)]
        if len(set(values)) == k and len(set(_pie_percents(values))) == k:
            return values


def _pie_percents(values: list[float]) -> list[float]:
    """Shares in percent with one decimal, adjusted so that the printed shares add up to exactly 100."""
    total = sum(values)
    percents = [round(100 * v / total, 1) for v in values]
    percents[-1] = round(100 - sum(percents[:-1]), 1)
    return percents


def _series_part(series: str | None) -> str:
    return f" for {series}" if series else ""


def make(rng: random.Random) -> Draft:
    kind = rng.choice(("bar", "barh", "grouped", "line", "pie"))
    labelled = kind == "pie" or rng.random() < 0.5
    years = kind == "line" and rng.random() < 0.6
    if years:
        start = rng.randint(2000, 2016)
        cats = [str(start + i) for i in range(rng.randint(4, 7))]
    else:
        pool = rng.choice(_CATEGORY_POOLS)
        cats = rng.sample(pool, min(len(pool), rng.randint(3, 5 if kind == "grouped" else 6)))
    n_series = rng.randint(2, 3) if kind == "grouped" or (kind == "line" and rng.random() < 0.5) else 1
    series_names = rng.sample(_SERIES_POOL, n_series) if n_series > 1 else [None]
    step = rng.choice((5.0, 10.0))
    data = {s: _values(rng, len(cats), labelled, step) for s in series_names}
    if kind == "pie":
        data = {s: _pie_percents(v) for s, v in data.items()}
    colors = pick_colors(rng, n_series if kind != "pie" else len(cats), exclude=("black",))
    image = _draw(rng, kind, cats, data, colors, labelled, step)

    series = rng.choice(series_names)
    values = dict(zip(cats, data[series]))
    unit = "year" if years else "category"
    qtypes = ["value", "argmax", "argmin", "compare", "difference", "total"]
    if kind == "pie":
        qtypes.remove("total")  # the shares of a pie always add up to 100
    qtype = rng.choice(qtypes)
    tolerance = None if labelled else 0.05
    fields = {"series_part": _series_part(series), "unit": unit}
    a, b = rng.sample(cats, 2)
    if qtype == "value":
        cat = rng.choice(cats)
        question = ask(rng, QUESTIONS[qtype], "number", cat=cat, **fields)
        return Draft(question, fmt_num(values[cat]), "number", qtype, [image], tolerance=tolerance)
    if qtype in ("argmax", "argmin"):
        pick = max if qtype == "argmax" else min
        answer = pick(cats, key=values.__getitem__)
        return Draft(ask(rng, QUESTIONS[qtype], "text", **fields), answer, "text", qtype, [image])
    if qtype == "compare":
        question = ask(rng, QUESTIONS[qtype], "yesno", a=a, b=b, **fields)
        return Draft(question, "Yes" if values[a] > values[b] else "No", "yesno", qtype, [image])
    if qtype == "difference":
        question = ask(rng, QUESTIONS[qtype], "number", a=a, b=b, **fields)
        answer = fmt_num(abs(values[a] - values[b]))
        return Draft(question, answer, "number", qtype, [image], tolerance=None if labelled else 0.1)
    question = ask(rng, QUESTIONS[qtype], "number", **fields)
    return Draft(question, fmt_num(sum(values.values())), "number", qtype, [image], tolerance=tolerance)


def _draw(rng: random.Random, kind: str, cats: list[str], data: dict, colors: list[str], labelled: bool,
          step: float):
    from matplotlib.ticker import MultipleLocator

    with new_figure(rng, rng.uniform(5.0, 8.0), rng.uniform(3.6, 5.5)) as fig:
        ax = fig.add_subplot(111)
        rgb = [tuple(c / 255 for c in COLORS[name]) for name in colors]
        names = list(data)
        fmt = "%g"
        if kind == "pie":
            percents = data[names[0]]
            _, _, autotexts = ax.pie(percents, labels=cats, colors=rgb, autopct=lambda p: "",
                                     startangle=rng.choice((0, 90, 140)), counterclock=rng.random() < 0.5)
            for text, value in zip(autotexts, percents):
                text.set_text(f"{value:g}%")
            ax.axis("equal")
        elif kind == "line":
            for name, color in zip(names, rgb):
                ax.plot(range(len(cats)), data[name], marker=rng.choice("osD^"), color=color, label=name, linewidth=2)
                if labelled:
                    for x, y in enumerate(data[name]):
                        ax.annotate(fmt % y, (x, y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
            ax.set_xticks(range(len(cats)), cats)
        else:
            width = 0.8 / len(names)
            for i, (name, color) in enumerate(zip(names, rgb)):
                positions = [j + (i - (len(names) - 1) / 2) * width for j in range(len(cats))]
                draw = ax.barh if kind == "barh" else ax.bar
                bars = draw(positions, data[name], width * 0.95, color=color, label=name)
                if labelled:
                    ax.bar_label(bars, fmt=fmt, fontsize=8, padding=2)
            ticks = ax.set_yticks if kind == "barh" else ax.set_xticks
            ticks(range(len(cats)), cats)
        if kind != "pie":
            value_axis = ax.xaxis if kind == "barh" else ax.yaxis
            value_axis.set_major_locator(MultipleLocator(step * (2 if labelled else 1)))
            limit = (ax.set_xlim if kind == "barh" else ax.set_ylim)
            limit(0, 110)
            ax.grid(axis="x" if kind == "barh" else "y", alpha=rng.uniform(0.2, 0.6))
            ax.set_axisbelow(True)
            (ax.set_xlabel if kind == "barh" else ax.set_ylabel)(rng.choice(_MEASURES))
            if len(names) > 1:
                ax.legend(loc=rng.choice(("upper left", "upper right", "best")), fontsize=8)
        title = rng.choice(_TITLES)
        if title:
            ax.set_title(title)
        fig.tight_layout()
        return degrade(figure_to_image(fig), rng, noise=6.0, max_rotation=1.0, blur=0.5)
