"""``cel-lens theory``: Section 4's predictions next to their measurements."""

from __future__ import annotations

import argparse

from cel_lens.cli.common import Formatter, print_json

__all__ = ["add", "run"]


def add(sub: argparse._SubParsersAction) -> None:
    """Declare the subcommand and its options."""
    p = sub.add_parser(
        "theory",
        help="reproduce Section 4's theory numerically (prediction vs measurement, with CIs)",
        formatter_class=Formatter,
        description="Trains the three-head, three-feature attention model of Section 4 from many small "
        "random initializations at once and prints each of the paper's predictions (Prop 4.1, Lemma B.1, "
        "Thm 4.2, Thm 4.3) next to the measured value and its 95% confidence interval.",
    )
    p.add_argument("--seeds", type=int, default=4000, help="random initializations trained at once")
    p.add_argument("--alpha", type=float, default=0.1, help="initialization scale (θ⁰ = α·G)")
    p.add_argument("--eta", type=float, default=0.5, help="gradient-descent step size")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--sweep-seeds", type=int, default=1000, help="seeds per α in the 2α, α, α/2 sweep")
    p.add_argument("--json", action="store_true", help="print {quantity: {predicted, measured, ci_low, ci_high, ...}} as JSON")
    p.add_argument("--figures", metavar="DIR", default=None, help="also write theory_trajectories and theory_escape figures to DIR")


def run(args: argparse.Namespace) -> int:
    """Run the subcommand; returns the exit code."""
    from cel_lens.theory import save_theory_figures, theory_table

    table = theory_table(seeds=args.seeds, alpha=args.alpha, eta=args.eta, seed=args.seed, sweep_seeds=args.sweep_seeds)
    figures = save_theory_figures(table, args.figures) if args.figures else []
    if args.json:
        print_json(table.to_json_dict())
        return 0
    print(table.format())
    for f in figures:
        print(f"wrote {f}")
    return 0
