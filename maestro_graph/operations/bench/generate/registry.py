"""The domain registry: domain name -> generator. Names follow the real benchmarks' `domain` values where one
exists (chart, table, document, geometry-perception, visual-math, barcode)."""

from __future__ import annotations

from . import arithmetic, barcodes, charts, counting, documents, geometry, smalltext, tables
from .base import Domain

__all__ = ["DOMAINS"]

DOMAINS: dict[str, Domain] = {
    d.name: d
    for d in (
        Domain("chart", charts.QUESTIONS, charts.make),
        Domain("table", tables.QUESTIONS, tables.make),
        Domain("document", documents.QUESTIONS, documents.make),
        Domain("geometry-perception", counting.QUESTIONS, counting.make),
        Domain("visual-math", geometry.QUESTIONS, geometry.make),
        Domain("arithmetic", arithmetic.QUESTIONS, arithmetic.make),
        Domain("small-text", smalltext.QUESTIONS, smalltext.make),
        Domain("barcode", barcodes.QUESTIONS, barcodes.make),
    )
}
