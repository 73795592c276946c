"""Why does the ablation help? The examples it fixes and breaks, as data, a table and a figure.

:class:`Flips` holds what :func:`cel_lens.analysis.flipped_examples` measured on a split: how many
examples ablating S-hat fixes (wrong intact, right ablated) and breaks (the reverse), and for a
few of each the prompt, the correct answer, the intact and the ablated answer, and for every
selected head where it attends from the answer position and its *direct logit effect*: how much
removing that head's output alone moves the logit of the correct answer over its rival (the
wrong answer of the two) through the direct path (positive: the head was pushing towards the
rival, so ablating it helps). Nothing here runs a model.
"""

from __future__ import annotations

import html
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Optional

import plotly.graph_objects as go

from cel_lens.report.style import FONT, SELECTED_COLOUR

__all__ = ["HeadView", "FlippedExample", "Flips", "plot_flips", "format_flips"]

_KIND_COLOUR = {"fixed": "#dcefdc", "broken": "#f6dddd"}


@dataclass(frozen=True)
class HeadView:
    """One selected head on one example: the tokens it attends to most from the answer position
    (``(token, weight)``, intact model) and its direct logit effects (see the module docstring):
    on the correct answer's logit, and on the correct answer's logit minus the rival's."""

    head: str
    attends_to: tuple[tuple[str, float], ...]
    effect_on_answer: float
    effect_on_margin: float


@dataclass(frozen=True)
class FlippedExample:
    """An example whose correctness the ablation changes: ``kind`` is ``"fixed"`` or ``"broken"``;
    ``answer`` the correct answer, ``intact``/``ablated`` the model's answers; ``rival`` the wrong
    one of the two; ``heads`` one :class:`HeadView` per selected head."""

    id: str
    kind: str
    prompt: str
    answer: str
    intact: str
    ablated: str
    rival: str
    heads: tuple[HeadView, ...] = ()


@dataclass(frozen=True)
class Flips:
    """The examples ablating ``heads`` fixes and breaks on ``task``'s ``split`` (``n`` examples):
    the counts, and ``examples`` (a few of each kind, fixed first)."""

    heads: str
    task: str
    split: str
    n: int
    n_fixed: int
    n_broken: int
    examples: tuple[FlippedExample, ...] = field(default=())

    @property
    def net_gain(self) -> float:
        """``(fixed - broken) / n``: the ablation's accuracy gain on this split."""
        return (self.n_fixed - self.n_broken) / self.n if self.n else math.nan

    def summary(self) -> str:
        """One line: how many examples the ablation fixes and breaks, and the net gain."""
        return (
            f"ablating {self.heads} on {self.task}/{self.split} (n={self.n}): fixes {self.n_fixed}, breaks "
            f"{self.n_broken}, net {100 * self.net_gain:+.2f} pp"
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Flips":
        """Inverse of :meth:`to_dict`."""
        examples = tuple(
            FlippedExample(**{**e, "heads": tuple(
                HeadView(h["head"], tuple(tuple(t) for t in h["attends_to"]), h["effect_on_answer"], h["effect_on_margin"])
                for h in e.get("heads", ())
            )}) for e in d.get("examples", ())
        )
        return cls(**{**{k: v for k, v in d.items() if k != "examples"}, "examples": examples})

    def __repr__(self) -> str:
        return f"<Flips {self.summary()}; {len(self.examples)} shown>"

    def __str__(self) -> str:
        return format_flips(self)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in _columns(self))
        rows = "".join(
            f"<tr style='background:{_KIND_COLOUR.get(e.kind, 'white')}'>"
            + "".join(f"<td style='text-align:left'>{html.escape(v)}</td>" for v in _row(e))
            + "</tr>"
            for e in self.examples
        )
        return f"<p>{html.escape(self.summary())}</p><table><tr>{head}</tr>{rows}</table>" + _legend_html()


def _short(text: str, width: int) -> str:
    one = " ".join(str(text).split())
    return one if len(one) <= width else "…" + one[-(width - 1):]


def _attends(view: HeadView) -> str:
    return ", ".join(f"{tok!s} {w:.2f}" for tok, w in view.attends_to)


def _columns(flips: Flips) -> list[str]:
    heads = [h.head for h in flips.examples[0].heads] if flips.examples else []
    return ["kind", "prompt (end)", "answer", "intact", "ablated"] + [
        c for h in heads for c in (f"{h} attends to", f"{h} direct effect on answer vs rival")
    ]


def _answer_text(text: Any) -> str:
    """An answer as the table shows it: quoted, without the leading space a continuation carries, so
    the target ``' pos'`` and a model's ``'pos'`` read alike (correctness is the ``kind`` column)."""
    return repr(str(text).lstrip())


def _row(e: FlippedExample, width: int = 48) -> list[str]:
    cells = [e.kind, _short(e.prompt, width), _answer_text(e.answer), _answer_text(e.intact), _answer_text(e.ablated)]
    for h in e.heads:
        cells += [_attends(h), f"{h.effect_on_margin:+.2f} vs {_answer_text(e.rival)} (answer alone {h.effect_on_answer:+.2f})"]
    return cells


def _legend_html() -> str:
    return (
        "<p><small>attends to: the intact head's attention from the answer position (top tokens, weight); direct "
        "effect: change of logit(answer) - logit(rival) when the head's output alone is removed from the final "
        "residual stream (positive: the head pushed towards the wrong answer), and of logit(answer) alone.</small></p>"
    )


def format_flips(flips: Flips) -> str:
    """The flips as text: the summary line, then one block per example."""
    lines = [flips.summary()]
    for e in flips.examples:
        lines.append(f"  [{e.kind}] {e.id}: {_short(e.prompt, 70)!r}")
        lines.append(f"      answer {e.answer!r}; intact {e.intact!r} -> ablated {e.ablated!r}")
        for h in e.heads:
            lines.append(
                f"      {h.head}: attends to {_attends(h)}; direct effect on logit(answer) - logit({e.rival!r}) "
                f"{h.effect_on_margin:+.2f}, on logit(answer) {h.effect_on_answer:+.2f}"
            )
    if not flips.examples:
        lines.append("  (no example changes its correctness)")
    return "\n".join(lines)


def plot_flips(flips: Flips, *, width: int = 1400, title: Optional[str] = None) -> go.Figure:
    """The flips as a table figure: one row per example (fixed rows green, broken rows red), the
    prompt's end, the answers, and each selected head's attention and direct logit effect."""
    columns = _columns(flips)
    rows = [_row(e, 60) for e in flips.examples]
    cells = [[r[i] for r in rows] for i in range(len(columns))] if rows else [[] for _ in columns]
    colours = [_KIND_COLOUR.get(e.kind, "white") for e in flips.examples]
    n_heads = (len(columns) - 5) // 2
    fig = go.Figure(
        go.Table(
            columnwidth=[0.7, 3.0, 1.0, 1.2, 1.2] + [2.2, 1.8] * n_heads,
            header=dict(values=[f"<b>{html.escape(c)}</b>" for c in columns], fill_color=SELECTED_COLOUR, align="left"),
            cells=dict(values=[[html.escape(v) for v in col] for col in cells], align="left",
                       fill_color=[colours] * len(columns), height=30),
        )
    )
    fig.update_layout(
        width=width, height=150 + 58 * max(len(rows), 1), font=FONT, margin=dict(l=20, r=20, t=80, b=20),
        title=dict(text=title or html.escape(flips.summary()), x=0.01, xanchor="left", font=dict(size=15)),
    )
    return fig
