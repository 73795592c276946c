"""``cel-lens organism train|info|sweep``: the built-in model organism."""

from __future__ import annotations

import argparse

from cel_lens.cli.common import Formatter, print_json

__all__ = ["add", "run"]


def add(sub: argparse._SubParsersAction) -> None:
    """Declare the subcommand and its options."""
    p = sub.add_parser(
        "organism",
        help="train, inspect or sweep the built-in model organism",
        formatter_class=Formatter,
        description="The model organism is a one-layer attention-only transformer trained on two tasks "
        "that conflict on a shared feature (see docs/organism.md). 'train' retrains it from a seed and "
        "writes weights, tokenizer, training log and loss figure; 'info' describes the shipped (or a "
        "saved) organism and its ground-truth head; 'sweep' trains many seeds and tabulates how often a "
        "beneficial single-head ablation emerges.",
    )
    osub = p.add_subparsers(dest="organism_command", metavar="ACTION")
    osub.required = True
    t = osub.add_parser("train", help="train one organism from a seed", formatter_class=Formatter)
    t.add_argument("--seed", type=int, default=0, help="training seed (initialization and data)")
    t.add_argument("--out", default=None, help="output directory (default: runs/organism_seed<S>)")
    t.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="change one OrganismConfig field, e.g. --set n_heads=6 (repeatable)")
    t.add_argument("--no-figure", action="store_true", help="skip the training figure")
    t.add_argument("--json", action="store_true", help="print the summary as JSON")
    i = osub.add_parser("info", help="describe the shipped or a saved organism", formatter_class=Formatter)
    i.add_argument("--path", default=None, help="organism directory (default: the shipped one)")
    i.add_argument("--json", action="store_true", help="print JSON")
    w = osub.add_parser("sweep", help="how often a beneficial head emerges over training seeds", formatter_class=Formatter)
    w.add_argument("--seeds", default="0-8", help="seeds: '0-19' or '0,3,7'")
    w.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="change one OrganismConfig field (repeatable)")
    w.add_argument("--n-test", type=int, default=2000, help="test examples per task")
    w.add_argument("--json", action="store_true", help="print the per-seed outcomes as JSON")


def run(args: argparse.Namespace) -> int:
    """Run the subcommand; returns the exit code."""
    from cel_lens import organism as ot

    if args.organism_command == "train":
        config = ot.config_with(args.overrides)
        out = args.out or f"runs/organism_seed{args.seed}"
        summary = ot.train_and_save(args.seed, config, out, figure=not args.no_figure)
        if args.json:
            print_json(summary)
        else:
            print(ot.format_summary(summary))
        return 0
    if args.organism_command == "info":
        info = ot.describe_organism(args.path)
        if args.json:
            print_json(info)
        else:
            print(ot.format_summary(info))
        return 0
    seeds = ot.parse_seeds(args.seeds)
    outcomes = ot.emergence_sweep(seeds, ot.config_with(args.overrides), n_test=args.n_test)
    if args.json:
        print_json([o.to_dict() for o in outcomes])
    else:
        print(ot.sweep_table(outcomes))
    return 0
