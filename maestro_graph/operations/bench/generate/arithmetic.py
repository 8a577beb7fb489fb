"""Arithmetic word problems, text only (no image): totals, differences, rates, equal sharing, percentages and
making change, each with several wordings and everyday objects."""

from __future__ import annotations

import random

from .base import NAMES, Draft, ask, fmt_num

_THINGS = ("apples", "stickers", "marbles", "pencils", "books", "cookies", "stamps", "shells", "cards", "beads")
_PRODUCTS = ("notebook", "sandwich", "ticket", "T-shirt", "mug", "puzzle", "plant", "lamp")

QUESTIONS: dict[str, tuple[str, ...]] = {
    "total": (
        "{a} has {x} {thing} and {b} has {y} {thing}. How many {thing} do they have altogether?",
        "There are {x} {thing} in one box and {y} {thing} in another. How many {thing} are there in total?",
        "{a} collected {x} {thing} on Monday and {y} more on Tuesday. How many {thing} did {a} collect in all?",
    ),
    "difference": (
        "{a} has {x} {thing}. {b} has {y} {thing}. How many more {thing} does {a} have than {b}?",
        "A shop had {x} {thing} and sold {y} of them. How many {thing} are left?",
        "{a} had {x} {thing} and gave {y} to {b}. How many {thing} does {a} have now?",
    ),
    "rate": (
        "One {product} costs ${p}. How much do {n} {product}s cost?",
        "{a} buys {n} {product}s at ${p} each. What is the total cost?",
        "If each {product} is priced at ${p}, what do {n} of them cost altogether?",
    ),
    "speed": (
        "A car travels at {v} km per hour for {t} hours. How far does it go, in km?",
        "A cyclist rides {v} km every hour. How many km does she cover in {t} hours?",
        "A train moves at a steady {v} km/h. What distance does it travel in {t} hours?",
    ),
    "share": (
        "{a} shares {x} {thing} equally among {n} friends. How many {thing} does each friend get?",
        "{x} {thing} are split evenly into {n} bags. How many {thing} go in each bag?",
        "If {n} children divide {x} {thing} equally, how many {thing} does each child receive?",
    ),
    "percent": (
        "What is {pct}% of {x}?",
        "A class has {x} students and {pct}% of them walk to school. How many students walk to school?",
        "{a} saved {pct} percent of a ${x} allowance. How many dollars did {a} save?",
    ),
    "discount": (
        "A jacket costs ${x}. It is on sale for {pct}% off. What is the sale price in dollars?",
        "A ${x} bike is discounted by {pct}%. How much does it cost after the discount?",
        "The price of a TV is ${x}, reduced by {pct} percent. What is the new price?",
    ),
    "change": (
        "{a} buys {n} {product}s for ${p} each and pays with a ${bill} bill. How much change does {a} get?",
        "Each {product} costs ${p}. {a} buys {n} of them and hands over ${bill}. What is the change?",
        "{a} pays ${bill} for {n} {product}s that cost ${p} apiece. How much money comes back?",
    ),
}


def make(rng: random.Random) -> Draft:
    qtype = rng.choice(tuple(QUESTIONS))
    a, b = rng.sample(NAMES, 2)
    fields: dict[str, object] = {"a": a, "b": b, "thing": rng.choice(_THINGS), "product": rng.choice(_PRODUCTS)}
    x, y = sorted((rng.randint(5, 500), rng.randint(2, 300)), reverse=True)
    if qtype == "total":
        value: float = x + y
    elif qtype == "difference":
        value = x - y
    elif qtype == "rate":
        n, p = rng.randint(2, 12), round(rng.uniform(0.5, 40), rng.choice((0, 2)))
        fields.update(n=n, p=fmt_num(p))
        value = n * p
    elif qtype == "speed":
        v, t = rng.randint(8, 120), rng.randint(2, 9)
        fields.update(v=v, t=t)
        value = v * t
    elif qtype == "share":
        n = rng.randint(2, 12)
        x = n * rng.randint(2, 40)  # shares come out whole
        value = x // n
        fields.update(n=n)
    elif qtype in ("percent", "discount"):
        pct = rng.choice((5, 10, 15, 20, 25, 30, 40, 50, 60, 75))
        x = rng.randint(2, 60) * 20
        fields.update(pct=pct)
        value = x * pct / 100 if qtype == "percent" else x * (100 - pct) / 100
    else:
        n, p = rng.randint(2, 6), round(rng.uniform(0.5, 15), 2)
        bill = next(v for v in (5, 10, 20, 50, 100) if v >= n * p + 0.01)
        fields.update(n=n, p=f"{p:.2f}", bill=bill)
        value = bill - n * p
    fields.update(x=x, y=y)
    return Draft(ask(rng, QUESTIONS[qtype], "number", **fields), fmt_num(value), "number", qtype, [])
