"""The theory lab's result: Section 4's predictions next to the measurements, one row each."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from cel_lens.theory.experiment import TheoryRun

# rows are listed in the order the paper states the results
SECTION_ORDER = ("Prop 4.1", "Lemma B.1", "Lemma B.2", "Thm 4.2", "Thm 4.3")


@dataclass(frozen=True)
class TheoryRow:
    """One measured quantity next to the paper's prediction.

    ``ci_low``/``ci_high`` form a 95% interval: Wilson for proportions, Student-t for means,
    order statistics for medians, bootstrap for fitted exponents, and the min/max over the
    ``n`` cases for deterministic identities (``ci`` says which).
    """

    quantity: str
    section: str
    predicted: float
    measured: float
    ci_low: float
    ci_high: float
    n: int
    ci: str
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        """Plain dict of the row."""
        return asdict(self)


@dataclass
class TheoryTable:
    """Tidy table of Section 4's predictions vs measurements (rows: :class:`TheoryRow`)."""

    rows: list[TheoryRow]
    config: dict[str, Any]
    run: Optional[TheoryRun] = field(default=None, repr=False)

    def __getitem__(self, quantity: str) -> TheoryRow:
        """The row named ``quantity`` (``KeyError`` if there is none)."""
        for row in self.rows:
            if row.quantity == quantity:
                return row
        raise KeyError(quantity)

    def __len__(self) -> int:
        """Number of rows."""
        return len(self.rows)

    def as_dict(self) -> dict[str, dict[str, Any]]:
        """``{quantity: {predicted, measured, ci_low, ci_high, n, section, ci, note}}``."""
        return {r.quantity: {k: v for k, v in r.as_dict().items() if k != "quantity"} for r in self.rows}

    def to_json_dict(self) -> dict[str, dict[str, Any]]:
        """:meth:`as_dict` with NaN replaced by ``None`` (strict JSON)."""
        return {q: {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()} for q, d in self.as_dict().items()}

    def to_records(self) -> list[dict[str, Any]]:
        """One dict per row (e.g. for ``pandas.DataFrame``)."""
        return [r.as_dict() for r in self.rows]

    def to_frame(self) -> Any:
        """The table as a ``pandas.DataFrame`` (pandas must be installed)."""
        import pandas as pd

        return pd.DataFrame(self.to_records())

    def format(self, notes: bool = True) -> str:
        """Fixed-width text rendering of the table."""
        head = ["section", "quantity", "predicted", "measured", "95% CI", "n"]
        body = []
        for r in self.rows:
            body.append([r.section, r.quantity, _fmt(r.predicted), _fmt(r.measured), f"[{_fmt(r.ci_low)}, {_fmt(r.ci_high)}] {r.ci}", str(r.n)])
        widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
        lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths)), "  ".join("-" * w for w in widths)]
        lines += ["  ".join(c.ljust(w) for c, w in zip(b, widths)).rstrip() for b in body]
        cfg = ", ".join(f"{k}={v}" for k, v in self.config.items())
        out = [f"Section 4 theory lab ({cfg})", *lines]
        if notes:
            out += ["", "notes:"] + [f"  {r.quantity}: {r.note}" for r in self.rows if r.note]
        return "\n".join(out)

    def __str__(self) -> str:
        """:meth:`format` with notes."""
        return self.format()


def _fmt(x: float) -> str:
    """A number as the table prints it: six significant digits, ``nan`` for missing."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "nan"
    return f"{x:.6g}"
