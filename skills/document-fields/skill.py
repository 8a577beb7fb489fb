"""Tier-1 document fields: total amount, date, company name and generic "what is the <key>" look-ups on receipts
and forms, read from OCR lines in reading order.

Receipts follow strong conventions (the issuer's name at the top, "TOTAL" next to the amount paid, one date near the
header), so each field has a small parser over the lines; anything else is a key-value look-up: find the line that
names the key and read the value written after it, to its right, or below it.
"""

import re
from dataclasses import dataclass

from maestro_graph.answer_forms import answered_yes_or_no
from maestro_graph.registry.context import SkillContext
from maestro_graph.types import SkillResult

MAX_SIDE = 2400  # larger scans are shrunk first: OCR time grows with the area, receipt text stays readable
HEADER_LINES = 8  # the issuer's name is printed within the first lines of a receipt

_AMOUNT_RE = re.compile(r"(?<![\d.,])-?(?:RM|\$)?\s?(\d{1,3}(?:,\d{3})+|\d+)\s?[.,]\s?(\d{2})(?![\d])", re.I)
_MONTHS = "JAN|FEB|MAR|APR|MAY|JUN|JUL|AUG|SEP|SEPT|OCT|NOV|DEC"
_DATE_RES = [
    # 25/01/2018, 01-03-18, and 05/01/201813:30 (a time glued to the year)
    re.compile(r"(?<!\d)(\d{1,2})\s?([/.-])\s?(\d{1,2})\s?\2\s?(\d{4}(?=\d{1,2}:\d{2})|(?:\d{4}|\d{2})(?!\d))"),
    re.compile(r"(?<!\d)(\d{4})\s?([/.-])\s?(\d{1,2})\s?\2\s?(\d{1,2})(?!\d)"),  # 2016/05/01
    re.compile(r"(?<![\d/.-])(\d{2}) (\d{2})([/.-])(\d{4}|\d{2})(?!\d)"),  # 05 02-18: OCR lost the first separator
    re.compile(rf"(?<!\d)(\d{{1,2}})[\s/-]?((?:{_MONTHS})[A-Z]*)[\s/,-]*(\d{{4}}|\d{{2}})(?!\d)", re.I),  # 14 MAY 2018
    re.compile(rf"\b((?:{_MONTHS})[A-Z]*)\s?(\d{{1,2}}),?\s?(\d{{4}})(?!\d)", re.I),  # May 14, 2018
]
_PAY_KEY = r"amount\s*(?:due|payable|to\s*be\s*paid|to\s*pay|paid)"
_TOTAL_RE = re.compile(rf"\b(?:grand|nett?|net)?\s*total\b|\b{_PAY_KEY}\b", re.I)
_STRONG_TOTAL_RE = re.compile(
    r"grand\s*total|nett?\s*total|total\s*(?:amount|amt|payable|due|sales|incl|inc\b|includes?|inclusive|rm|\(rm\))"
    rf"|round(?:ed|ing)?\s*total|total\s*round|{_PAY_KEY}",
    re.I,
)
_NOT_TOTAL_RE = re.compile(
    r"sub\s*-?\s*total|total\s*(?:qty|quantity|items?|item\(s\)|disc|discount|savings?|gst|tax|excl|exclusive|"
    r"before|no\.?\b|pcs|units?|\d+\s*%)|(?:qty|items?|tax|gst)\s*total|gst\s*summary|supplies|\bexcl",
    re.I,
)
_COMPANY_SUFFIX_RE = re.compile(
    r"\b(?:SDN\.?\s*BHD|S/B|BHD|BERHAD|ENTERPRISE|TRADING|RESTAURANT|RESTORAN|RESTORANT|STORES?|MARKET|SHOP|MART|"
    r"HARDWARE|BAKER(?:Y|IES)|CAFE|STATIONERY|PHARMACY|CO\b|COMPANY|LTD|LIMITED|INC|CORP|LLC|GMBH|HOLDINGS|"
    r"SUPERMARKET|KEDAI|FOOD|BOOKS?)\b",
    re.I,
)
_LEGAL_END_RE = re.compile(r"\b(?:SDN\.?\s*BHD|BHD|BERHAD|S/B|LTD|LIMITED|INC|CORP|LLC|GMBH)\.?\s*$", re.I)
_NOT_NAME_RE = re.compile(
    r"\b(?:tax\s*invoice|invoice|receipt|welcome|cash\s*bill|official|simplified|tel|fax|phone|gst|reg|co\.?\s*no|"
    r"company\s*no|roc|no\.|jalan|jln|lot|taman|date|email|www)\b|@",
    re.I,
)
_GLUED_WORD_RE = re.compile(
    r"(SUPERMARKET|STATIONERY|ENTERPRISE|TRADING|RESTAURANT|RESTORAN|HARDWARE|BAKERIES|BAKERY|PHARMACY|MARKET|"
    r"SHOP|STORE|MART|CAFE)", re.I)
_SDN_RE = re.compile(r"\bS[BDO0]N\.?\s*[B3]H[DO0]\b\.?", re.I)  # "SON BHO" is how OCR often misreads SDN BHD
_REG_NO_RE = re.compile(  # a registration number ends the name: "(519537-X)", "CO.REG: 704427-T" and what follows
    r"\s*[(\[]?\s*(?:co\.?\s*(?:reg\.?\s*)?no\.?|company\s*no\.?|roc)?\s*:?\s*[A-Z]?\d{4,}[\d\s]*-?\s*[A-Z]\b.*$", re.I
)
_KEY_SYNONYMS = {"number": "(?:number|no\\.?|num|#)", "no": "(?:number|no\\.?|num|#)", "amount": "(?:amount|amt)"}


@dataclass(frozen=True)
class Found:
    """A field value and the OCR line it came from (the evidence)."""

    value: str
    line: str
    confidence: float


def field_of(question: str) -> tuple[str, str]:
    """What the question asks for: ("company"|"date"|"total", "") or ("key", <key words>)."""
    q = question.lower()
    if re.search(r"\b(?:company|store|shop|vendor|merchant|seller|business|restaurant|issuer)\b|\bwho issued\b", q):
        return "company", ""
    if re.search(r"\btotal\b|\bhow much\b|\bamount (?:paid|due|payable)\b|\bpaid\b", q):
        return "total", ""
    if re.search(r"\bdate\b|\bwhen\b|\bwhat day\b", q):
        return "date", ""
    match = re.search(r"\b(?:what|who)(?:'s| is| are| was)\s+(?:the\s+)?(.+?)"
                      r"(?:\s+(?:on|in|of|for)\s+(?:this|the)\b.*)?\??$", q)
    key = (match.group(1) if match else q).strip(" ?.:")
    return "key", key


def amounts(text: str) -> list[str]:
    """Money amounts with two decimals, as '1234.50'."""
    return [f"{m.group(1).replace(',', '')}.{m.group(2)}" for m in _AMOUNT_RE.finditer(text)]


def _line_value(lines, i: int) -> list[str]:
    """Amounts on line i after its label, else on the next line when that line is only an amount."""
    found = amounts(lines[i].text)
    if found:
        return found
    if i + 1 < len(lines) and re.fullmatch(r"[\sRM$:.,\d-]+", lines[i + 1].text, re.I):
        return amounts(lines[i + 1].text)
    return []


def find_total(lines) -> Found | None:
    """The amount on the strongest "total" line (ties: the lowest one, the final figure), moved to the rounded
    figure printed below it when there is one; the amount actually paid (cash - change) confirms a candidate."""
    candidates: list[tuple[int, int, str, str]] = []
    for i, line in enumerate(lines):
        text = line.text
        if not _TOTAL_RE.search(text) or _NOT_TOTAL_RE.search(text):
            continue
        values = _line_value(lines, i)
        if values:  # a plain "Total" row with several amounts is a tax summary table (amount, tax)
            rank = 2 if _STRONG_TOTAL_RE.search(text) else 1 if len(values) == 1 else 0
            candidates.append((rank, i, values[-1], text))
    paid = _paid(lines)
    confirmed = [c for c in candidates if paid is not None and abs(float(c[2]) - paid) < 0.005]
    if confirmed:
        rank, i, value, text = max(confirmed)
        return Found(value, f"{text} (= cash - change)", 0.9)
    if not candidates:
        if paid is not None:
            return Found(f"{paid:.2f}", "cash - change", 0.5)
        return _largest_repeated(lines)
    rank, i, value, text = max(candidates)
    for below in lines[i + 1 : i + 4]:
        rounded = amounts(below.text)
        if re.search(r"round", below.text, re.I) and rounded and 0 < abs(float(rounded[-1]) - float(value)) <= 0.05:
            return Found(rounded[-1], below.text, 0.8)
    return Found(value, text, (0.5, 0.7, 0.85)[rank])


def _paid(lines) -> float | None:
    """Cash tendered minus change given, when both are printed."""
    cash = change = None
    for line in lines:
        values = amounts(line.text)
        if not values:
            continue
        if cash is None and re.search(r"\b(?:cash|tender(?:ed)?)\b", line.text, re.I):
            cash = float(values[-1])
        elif change is None and re.search(r"\bchange\b", line.text, re.I):
            change = float(values[-1])
    return cash - change if cash is not None and change is not None and cash >= change else None


def _largest_repeated(lines) -> Found | None:
    """Last resort: the largest amount printed more than once (the total recurs as payment and in summaries)."""
    all_values = [float(v) for line in lines for v in amounts(line.text)]
    repeated = [v for v in set(all_values) if all_values.count(v) > 1]
    if repeated:
        return Found(f"{max(repeated):.2f}", "largest repeated amount", 0.3)
    return None


def find_date(lines) -> Found | None:
    """The date as written. Preferred: on a line labelled "date", then followed by a time of day, then printed
    without stray spaces; among equals the first one."""
    candidates: list[tuple[int, int, str, str]] = []
    for i, line in enumerate(lines):
        for pattern in _DATE_RES:
            for match in pattern.finditer(line.text):
                value = _clean_date(match)
                if value:
                    rank = (2 * bool(re.search(r"\bdate\b|\btarikh\b", line.text, re.I))
                            + bool(re.match(r"\s*\d{1,2}:\d{2}", line.text[match.end():]))
                            + (value == match.group(0)))
                    candidates.append((rank, -i, value, line.text))
    if not candidates:
        return None
    rank, _, value, text = max(candidates)
    return Found(value, text, 0.85 if rank >= 2 else 0.7)


def _clean_date(match: re.Match) -> str | None:
    """Plausible dates only (day 1-31, month 1-12 in either order); numeric dates lose OCR's stray spaces."""
    text = match.group(0)
    if re.fullmatch(r"\d{2} \d{2}[/.-]\d+", text):
        text = text.replace(" ", match.group(3))
    if any(ch.isalpha() for ch in text):
        return re.sub(r"\s+", " ", text).strip()
    parts = [int(p) for p in re.findall(r"\d+", text)]
    day_month = parts[1:] if len(str(parts[0])) == 4 else parts[:2]
    if not (1 <= min(day_month) <= 12 and 1 <= max(day_month) <= 31):
        return None
    return re.sub(r"\s+", "", text)


def find_company(lines) -> Found | None:
    """The issuer. In the block of name-like lines at the top (before the address), a legal name ("... SDN BHD")
    wins, joined with the line above when it starts mid-name ("ENTERPRISE (SETIA ALAM) SDN BHD"); else the first
    line with a trade word (SHOP, TRADING...), joined with a wrapped second line; else, anywhere in the header, the
    first line with a trade word, then the first name-like line."""
    header = [_clean_header(line.text) for line in lines[:HEADER_LINES]]
    header = [text for text in header if sum(ch.isalpha() for ch in text) >= 3]
    names = [k for k, text in enumerate(header) if _is_name(text)]
    block = [k for n, k in enumerate(names) if k - n == names[0]] if names else []
    legal = [k for k in block if _LEGAL_END_RE.search(_REG_NO_RE.sub("", header[k]))]
    trade = [k for k in block if _COMPANY_SUFFIX_RE.search(header[k])]
    if legal:
        k = legal[0]
        name = _REG_NO_RE.sub("", header[k])
        if k - 1 in block and re.match(rf"\(|{_COMPANY_SUFFIX_RE.pattern}", name, re.I):
            name = f"{header[k - 1]} {name}"
        found = Found(name, header[k], 0.8)
    elif trade:
        k = trade[0]
        name = _REG_NO_RE.sub("", header[k])
        if k + 1 in block and _COMPANY_SUFFIX_RE.search(header[k + 1]):
            name = f"{name} {_REG_NO_RE.sub('', header[k + 1])}"
        found = Found(name, header[k], 0.75)
    else:
        anywhere = [t for t in header if _COMPANY_SUFFIX_RE.search(t) and not _NOT_NAME_RE.search(t)]
        first = anywhere or [header[k] for k in names]
        if not first:
            return None
        found = Found(_REG_NO_RE.sub("", first[0]), first[0], 0.6 if anywhere else 0.45)
    value = _respace(found.value.strip(), " ".join(line.text for line in lines))
    return Found(value, found.line, found.confidence)


def _clean_header(text: str) -> str:
    """Undo common OCR slips in a header line: "SON BHO" for SDN BHD, glued trade words, "NAME(KL)"."""
    text = _split_glued(_SDN_RE.sub("SDN BHD", text.strip(" .,:;*-_|'\"")))
    return re.sub(r"(?<=[A-Za-z.])\(", " (", re.sub(r"\)(?=[A-Za-z])", ") ", text))


def _is_name(text: str) -> bool:
    """Looks like a name: no address, phone or document words, no long numbers once a registration number is cut."""
    return not _NOT_NAME_RE.search(text) and not re.search(r"\d{3,}", _REG_NO_RE.sub("", text))


def _split_glued(text: str) -> str:
    """Put back spaces OCR dropped around trade words ("SANYUSTATIONERYSHOP" -> "SANYU STATIONERY SHOP")."""
    return re.sub(r"[A-Za-z]{10,}", lambda m: _GLUED_WORD_RE.sub(r" \1 ", m.group(0)).strip().replace("  ", " "), text)


def _respace(name: str, text: str) -> str:
    """Restore spaces OCR dropped inside a name ("FUYIMINI MARKET") from another place where the same letters are
    printed with spaces (receipts repeat the shop's name in the footer)."""
    key = re.sub(r"[^a-z0-9]", "", name.lower())
    if len(key) < 6 or not re.search(r"[A-Za-z0-9]{8,}", name):  # only names with glued words
        return name
    words = text.split()
    for i in range(len(words)):
        joined = ""
        for j in range(i, len(words)):
            joined += re.sub(r"[^a-z0-9]", "", words[j].lower())
            if joined == key and j - i + 1 > len(name.split()):
                return _split_like(name, [re.sub(r"[^a-z0-9]", "", w.lower()) for w in words[i : j + 1]])
            if not key.startswith(joined):
                break
    return name


def _split_like(name: str, parts: list[str]) -> str:
    """`name` with spaces placed where the letter groups `parts` end (punctuation in `name` is kept)."""
    out, count, bounds = [], 0, set()
    for part in parts[:-1]:
        count += len(part)
        bounds.add(count)
    seen = 0
    for ch in name.replace(" ", ""):
        out.append(ch)
        if ch.isalnum():
            seen += 1
            if seen in bounds:
                out.append(" ")
                bounds.discard(seen)
    return "".join(out).strip()


def find_key(lines, key: str) -> Found | None:
    """The value written after the line's `key` label (same line), else the next line."""
    words = [w for w in re.findall(r"[a-z0-9#]+", key.lower()) if w not in {"the", "a", "an"}]
    if not words:
        return None
    pattern = re.compile(r"\W*".join(_KEY_SYNONYMS.get(w, re.escape(w)) for w in words) + r"\b\.?", re.I)
    for i, line in enumerate(lines):
        match = pattern.search(line.text)
        if not match:
            continue
        value = line.text[match.end():].strip(" :#.-=")
        if not value and i + 1 < len(lines):
            value = lines[i + 1].text.strip(" :#.-=")
        if value:
            return Found(value, line.text, 0.6)
    return None


def read_lines(ctx: SkillContext):
    """OCR lines of the document. Huge scans are shrunk first; receipts are not enlarged (on the real-dev receipts
    enlarging made Tesseract slower and no more accurate)."""
    view = ctx.use("zoom", op="upscale", image=ctx.image, factor=1.0, max_side=MAX_SIDE)
    return ctx.use("ocr", image=view.image).lines


NOT_A_FIELD = "the question asks yes or no: a field's value does not answer it"


def run(ctx: SkillContext) -> SkillResult:
    # "Is the total more than 5 dollars?" would get the total back ("5.70"): declined before any OCR. In code, not
    # by a `declines` check: a check that accepts every other question would claim a question asked without an
    # image as one about a missing picture (maestro_graph/policy/base.py, `_claimed_for_an_image`).
    if answered_yes_or_no(ctx.request, ctx.choices):
        return SkillResult(evidence=NOT_A_FIELD, answer=None, confidence=0.0)
    kind, key = field_of(ctx.request)
    lines = read_lines(ctx)
    if not lines:
        return SkillResult(evidence="OCR found no text in the document", answer=None, confidence=0.0)
    finder = {"total": find_total, "date": find_date, "company": find_company}.get(kind)
    found = finder(lines) if finder else find_key(lines, key)
    label = kind if kind != "key" else f"key {key!r}"
    if found is None:
        head = " | ".join(line.text for line in lines[:6])
        return SkillResult(evidence=f"no {label} found; document starts: {head}", answer=None, confidence=0.0)
    return SkillResult(evidence=f"{label} from line {found.line!r}: {found.value}", answer=found.value,
                       confidence=found.confidence)
