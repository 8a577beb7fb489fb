"""Tables rendered as images, TabMWP style: a titled table of names and numbers, and questions that look a value
up or combine several (sum, mean, range, comparison, difference, largest)."""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable

from .base import NAMES, Draft, ask, canvas, degrade, fmt_num, font

_PRICE_ITEMS = ("canoe", "motorcycle", "scooter", "tent", "kayak", "bicycle", "guitar", "desk lamp", "backpack",
                "notebook", "stapler", "teapot", "blender", "toaster", "sofa cushion", "wall clock")
_COUNT_TOPICS = (
    ("Books read", "Name", "Books"), ("Cookies baked", "Day", "Cookies"),
    ("Pages written", "Student", "Pages"), ("Goals scored", "Player", "Goals"),
    ("Movies checked out", "Day", "Movies"), ("Points in the quiz", "Team", "Points"),
)
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_TEAMS = ("Falcons", "Otters", "Comets", "Lions", "Pirates", "Rockets", "Wolves", "Hawks")

QUESTIONS: dict[str, tuple[str, ...]] = {
    "lookup": (
        "What is the {col} for {row}?",
        "Look at the table. What {col} does {row} have?",
        "According to the table, what is listed as the {col} of {row}?",
    ),
    "sum": (
        "What is the total {col} of {row} and {row2}?",
        "How much is the {col} of {row} and {row2} combined?",
        "Add the {col} of {row} to that of {row2}. What do you get?",
    ),
    "buy": (
        "How much money does {name} need to buy a {row} and a {row2}?",
        "{name} wants a {row} and a {row2}. How much will both cost?",
        "What is the combined price of a {row} and a {row2}?",
    ),
    "mean": (
        "What is the mean of the numbers in the table?",
        "Find the average {col} across all rows.",
        "What is the average of the {col} values shown?",
    ),
    "range": (
        "What is the range of the numbers?",
        "Find the range of the {col} values in the table.",
        "What is the difference between the largest and the smallest {col}?",
    ),
    "max": (
        "Which {key} has the greatest {col}?",
        "Looking at the table, which {key} has the most?",
        "Name the {key} with the highest {col}.",
    ),
    "compare": (
        "Does {row} have more {col} than {row2}?",
        "Is the {col} of {row} greater than the {col} of {row2}?",
        "According to the table, is {row}'s {col} larger than {row2}'s?",
    ),
    "difference": (
        "How much more does a {row} cost than a {row2}?",
        "What is the price difference between a {row} and a {row2}?",
        "By how much does the {row} price exceed the {row2} price?",
    ),
}


def make(rng: random.Random) -> Draft:
    priced = rng.random() < 0.4
    n = rng.randint(4, 7)
    if priced:
        title, key, col = rng.choice(("Price list", "Store prices", "Catalog", "")), "item", "price"
        rows = rng.sample(_PRICE_ITEMS, n)
        cents = rng.random() < 0.5
        values = [round(rng.uniform(0.5, 99) if cents else rng.randint(20, 900), 2 if cents else 0) for _ in rows]
        show: Callable[[float], str] = "${:,.2f}".format if cents else "${:,.0f}".format
    else:
        title, key, col = rng.choice(_COUNT_TOPICS)
        rows = list(_DAYS[:n]) if key == "Day" else rng.sample(_TEAMS if key == "Team" else NAMES, n)
        values = [rng.randint(1, 99) for _ in rows]
        show = str
        key, col = key.lower(), col.lower()
    while len(set(values)) < n:  # distinct values keep "which is greatest" and comparisons unambiguous
        values[rng.randrange(n)] += 1
    image = _draw(rng, title, (key.capitalize(), col.capitalize()), rows, [show(v) for v in values])
    table = dict(zip(rows, values))
    row, row2 = rng.sample(rows, 2)
    qtypes = ["lookup", "mean", "range", "max", "compare"] + (["buy", "difference"] if priced else ["sum"])
    qtype = rng.choice(qtypes)
    fields = {"col": col, "key": key, "row": row, "row2": row2, "name": rng.choice(NAMES)}
    if qtype == "max":
        return Draft(ask(rng, QUESTIONS[qtype], "text", **fields), max(rows, key=table.__getitem__), "text", qtype,
                     [image])
    if qtype == "compare":
        answer = "Yes" if table[row] > table[row2] else "No"
        return Draft(ask(rng, QUESTIONS[qtype], "yesno", **fields), answer, "yesno", qtype, [image])
    value = {
        "lookup": lambda: table[row],
        "sum": lambda: table[row] + table[row2],
        "buy": lambda: table[row] + table[row2],
        "mean": lambda: statistics.fmean(values),
        "range": lambda: max(values) - min(values),
        "difference": lambda: abs(table[row] - table[row2]),
    }[qtype]()
    if qtype == "difference" and table[row] < table[row2]:
        fields.update(row=row2, row2=row)
    return Draft(ask(rng, QUESTIONS[qtype], "number", **fields), fmt_num(value), "number", qtype, [image],
                 tolerance=0.01 if qtype == "mean" else None)


def _draw(rng: random.Random, title: str, header: tuple[str, str], rows: list[str], shown: list[str]):
    size = rng.randint(16, 24)
    body, bold = font(rng, size), font(rng, size + 2)
    pad = rng.randint(8, 16)
    col_w = [max(body.getlength(t) for t in (header[0], *rows)) + 2 * pad,
             max(body.getlength(t) for t in (header[1], *shown)) + 2 * pad]
    row_h = size + 2 * pad
    top = row_h if title else 0
    margin = rng.randint(15, 40)
    width = int(sum(col_w)) + 2 * margin
    height = top + row_h * (len(rows) + 1) + 2 * margin
    image, draw = canvas(width, height)
    line = tuple(rng.randint(0, 120) for _ in range(3))
    shade = tuple(rng.randint(200, 245) for _ in range(3))
    x0, y0 = margin, margin + top
    if title:
        draw.text((width / 2, margin + row_h / 2), title, fill=(0, 0, 0), font=bold, anchor="mm")
    draw.rectangle((x0, y0, x0 + sum(col_w), y0 + row_h), fill=shade)
    for r, cells in enumerate([header, *zip(rows, shown)]):
        y = y0 + r * row_h
        x: float = x0
        for c, text in enumerate(cells):
            draw.rectangle((x, y, x + col_w[c], y + row_h), outline=line, width=1)
            anchor = "lm" if c == 0 else "rm"
            tx = x + pad if c == 0 else x + col_w[c] - pad
            draw.text((tx, y + row_h / 2), text, fill=(0, 0, 0), font=bold if r == 0 else body, anchor=anchor)
            x += col_w[c]
    return degrade(image, rng, noise=6.0, max_rotation=1.0, blur=0.5)
