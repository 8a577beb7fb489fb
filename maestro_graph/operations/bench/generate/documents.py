"""Receipts and key-value forms: a company name, a date and a total to find among many other printed lines
(SROIE style), or one field of a form."""

from __future__ import annotations

import random

from .base import NAMES, Draft, ask, canvas, degrade, fmt_num, font

_WORDS_A = ("Golden", "Sunrise", "Blue Ocean", "Evergreen", "Lucky", "Maple", "Royal", "Happy", "Silver Star",
            "Green Leaf", "Red Lantern", "Urban")
_WORDS_B = ("Bakery", "Hardware", "Mart", "Cafe", "Stationery", "Pharmacy", "Kitchen", "Trading", "Books",
            "Electronics", "Restaurant")
_SUFFIXES = ("SDN BHD", "LTD", "LLC", "ENTERPRISE", "CO.", "INC", "")
_GOODS = ("Milk 1L", "Bread loaf", "Eggs x10", "Coffee", "Green tea", "Rice 5kg", "Sugar", "Batteries AA",
          "Notebook A5", "Pen blue", "Soap bar", "Shampoo", "Tissue box", "Apple juice", "Chicken rice", "Noodles",
          "Iced latte", "Screwdriver", "Tape 24mm", "Light bulb")
_STREETS = ("Jalan Ampang", "Main Street", "Oak Avenue", "Market Road", "Harbour Lane", "Station Road")
_CURRENCIES = ("RM", "$", "", "USD", "€")
_FORM_FIELDS = {
    "invoice number": lambda rng: f"INV-{rng.randint(10000, 99999)}",
    "customer name": lambda rng: f"{rng.choice(NAMES)} {rng.choice(('Tan', 'Smith', 'Garcia', 'Okafor', 'Lee'))}",
    "phone number": lambda rng: f"{rng.randint(100, 999)}-{rng.randint(100, 999)}-{rng.randint(1000, 9999)}",
    "account number": lambda rng: str(rng.randint(10 ** 7, 10 ** 8 - 1)),
    "postcode": lambda rng: str(rng.randint(10000, 99999)),
    "order id": lambda rng: f"{rng.choice('ABCDEFGH')}{rng.randint(100000, 999999)}",
    "department": lambda rng: rng.choice(("Finance", "Sales", "Logistics", "Research", "Support")),
    "city": lambda rng: rng.choice(("Kuala Lumpur", "Lisbon", "Nairobi", "Osaka", "Denver", "Lyon")),
}

QUESTIONS: dict[str, tuple[str, ...]] = {
    "company": (
        "What is the name of the company that issued this receipt?",
        "Which business is this receipt from?",
        "Who is the seller on this receipt?",
    ),
    "date": (
        "What is the date on this receipt?",
        "On which date was this purchase made?",
        "When was this receipt issued?",
    ),
    "total": (
        "What is the total amount on this receipt?",
        "How much was paid in total?",
        "What is the grand total of this bill?",
    ),
    "items": (
        "How many different items are listed on this receipt?",
        "How many product lines does the receipt show?",
        "Count the purchased item lines on this bill.",
    ),
    "field": (
        "What is the {field} on this form?",
        "What does the form give as the {field}?",
        "Find the {field} written on this document.",
    ),
}


def _date(rng: random.Random) -> str:
    y, m, d = rng.randint(2015, 2024), rng.randint(1, 12), rng.randint(1, 28)
    months = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
    return rng.choice((f"{d:02d}/{m:02d}/{y}", f"{y}-{m:02d}-{d:02d}", f"{d:02d}-{months[m - 1]}-{y}",
                       f"{d} {months[m - 1]} {y}", f"{m:02d}/{d:02d}/{y}"))


def make(rng: random.Random) -> Draft:
    return _receipt(rng) if rng.random() < 0.7 else _form(rng)


def _receipt(rng: random.Random) -> Draft:
    company = " ".join(p for p in (rng.choice(_WORDS_A), rng.choice(_WORDS_B), rng.choice(_SUFFIXES)) if p).upper()
    date = _date(rng)
    currency = rng.choice(_CURRENCIES)
    goods = rng.sample(_GOODS, rng.randint(2, 7))
    lines = [(g, rng.randint(1, 4), round(rng.uniform(0.8, 30), 2)) for g in goods]
    subtotal = round(sum(q * p for _, q, p in lines), 2)
    tax = round(subtotal * rng.choice((0, 0.06, 0.1)), 2)
    total = round(subtotal + tax, 2)
    paid = float(int(total) + rng.choice((1, 5, 10, 20)))
    width = rng.choice((34, 38, 42))  # characters per line, as on a thermal printer

    def row(left: str, right: str) -> str:
        return left[: width - len(right) - 1].ljust(width - len(right)) + right

    text = [company.center(width), f"{rng.randint(1, 200)} {rng.choice(_STREETS)}".center(width),
            f"Tel: {rng.randint(100, 999)}-{rng.randint(1000000, 9999999)}".center(width), "",
            row(f"Date: {date}", f"{rng.randint(8, 21):02d}:{rng.randint(0, 59):02d}"),
            f"Receipt #: {rng.randint(1000, 99999)}", f"Cashier: {rng.choice(NAMES)}", "-" * width]
    text += [row(f"{q} x {g}", f"{q * p:.2f}") for g, q, p in lines]
    text += ["-" * width, row("Subtotal", f"{subtotal:.2f}")]
    if tax:
        text.append(row("Tax", f"{tax:.2f}"))
    text += [row(rng.choice(("TOTAL", "Total", "Grand Total", "TOTAL DUE")), f"{currency}{total:.2f}"),
             row("Cash", f"{paid:.2f}"), row("Change", f"{paid - total:.2f}"), "",
             rng.choice(("THANK YOU", "Thank you, come again!", "Goods sold are not returnable"))]
    image = _print(rng, text, mono=True)
    qtype = rng.choice(("company", "date", "total", "items"))
    if qtype == "company":
        return Draft(ask(rng, QUESTIONS[qtype], "text"), company, "text", qtype, [image])
    if qtype == "date":
        return Draft(ask(rng, QUESTIONS[qtype], "text"), date, "text", qtype, [image])
    if qtype == "total":
        return Draft(ask(rng, QUESTIONS[qtype], "number"), f"{total:.2f}", "number", qtype, [image])
    return Draft(ask(rng, QUESTIONS[qtype], "number"), fmt_num(len(lines)), "number", qtype, [image])


def _form(rng: random.Random) -> Draft:
    fields = rng.sample(sorted(_FORM_FIELDS), rng.randint(4, 7))
    values = {f: _FORM_FIELDS[f](rng) for f in fields}
    title = rng.choice(("APPLICATION FORM", "Order Form", "Customer Details", "Registration", "Service Request"))
    sep = rng.choice((": ", " - ", ":  "))
    text = [title, ""] + [f"{f.title()}{sep}{values[f]}" for f in fields] + ["", f"Date{sep}{_date(rng)}"]
    image = _print(rng, text, mono=rng.random() < 0.3)
    field = rng.choice(fields)
    question = ask(rng, QUESTIONS["field"], "text", field=field)
    return Draft(question, values[field], "text", "field", [image])


def _print(rng: random.Random, lines: list[str], *, mono: bool):
    """Lines of text on paper-coloured background, one font, left-aligned."""
    face = font(rng, rng.randint(15, 22), mono=mono)
    spacing = int(face.size * rng.uniform(1.25, 1.6))
    margin = rng.randint(20, 45)
    width = int(max(face.getlength(line) for line in lines)) + 2 * margin
    height = spacing * len(lines) + 2 * margin
    paper = tuple(rng.randint(235, 255) for _ in range(3))
    ink = tuple(rng.randint(0, 70) for _ in range(3))
    image, draw = canvas(width, height, paper)
    for i, line in enumerate(lines):
        draw.text((margin, margin + i * spacing), line, fill=ink, font=face)
    return degrade(image, rng, noise=10.0, max_rotation=2.5, blur=0.7)
