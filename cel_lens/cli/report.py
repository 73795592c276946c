"""``cel-lens report``: a run's result and figures, an unfinished run's progress, two runs compared,
and (with the run's model) the examples its ablation fixes and breaks."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cel_lens.cli.common import Formatter, print_json
from cel_lens.cli.options import add_fields, settings_from_args
from cel_lens.config import ExecutionSettings

__all__ = ["add", "run"]


def add(sub: argparse._SubParsersAction) -> None:
    """Declare the subcommand and its options."""
    p = sub.add_parser(
        "report",
        help="print a run's result and write its figures; compare two runs; show flipped examples",
        formatter_class=Formatter,
        description="One RUN (a run directory, or a file in it such as RUN/result.json): prints the result "
        "(selected heads, accuracies, gain with CI, McNemar p-value, random-subset null) and writes its figures "
        "(gain heatmap with the ranked subsets; discovery vs test gain) as HTML and PNG, and explorer.html: click a "
        "head of the heatmap to see its panel (gain with CI, examples it fixes and breaks; with --explorer-model its "
        "attention and direct logit effects). An unfinished run "
        "(running or killed) prints how far it got and writes the heatmap of what it recorded. Two runs: "
        "prints and draws how they compare (selected heads and pools, stage-1 heatmaps side by side). "
        "--flips loads the run's model (from its manifest, or --model) and shows the examples the "
        "ablation fixes and breaks, with the selected heads' attention and direct logit effects.",
    )
    p.add_argument("runs", metavar="RUN", nargs="+", help="run directory (or a file in it); two to compare them")
    p.add_argument("--out", default=None, help="figure directory (default: RUN/figures, of the first run)")
    p.add_argument("--no-figures", action="store_true", help="only print")
    p.add_argument("--json", action="store_true", help="print the result (and the figure paths) as JSON")
    p.add_argument("--label", action="append", default=None, help="a run's name in a comparison (once per run)")
    p.add_argument("--flips", action="store_true",
                   help="load the run's model and show the D_test examples the ablation fixes and breaks")
    p.add_argument("--n-flips", type=int, default=4, help="examples of each kind (fixed, broken) to show")
    p.add_argument("--model", default=None, help="with --flips: the model to load (default: the run's, from its manifest)")
    add_fields(p, ExecutionSettings, ("device",), help_suffix={"device": "; with --flips or --explorer-model"})
    p.add_argument("--data-dir", default=None, help="with --flips: the run's task files, if not from the hub")
    p.add_argument("--explorer-model", action="store_true",
                   help="load the run's model (its manifest's, or --model) and add model panels (attention intact vs "
                   "ablated, direct logit effects on D_dist examples) to explorer.html; without it the page shows what "
                   "the run recorded")
    p.add_argument("--explorer-examples", type=int, default=2,
                   help="with --explorer-model: D_dist examples each precomputed head set is run on")


def _figures(args: argparse.Namespace, base: Path) -> Path:
    return Path(args.out) if args.out else base / "figures"


def _single(args: argparse.Namespace, record: Any) -> dict[str, Any]:
    """Print one run (finished, or how far it got) and write its figures; return the JSON form."""
    from cel_lens.report import result_dict, write_run_figures
    from cel_lens.runs.unfinished import format_partial
    from cel_lens.selection import format_result

    figures = [] if args.no_figures else write_run_figures(record, _figures(args, record.path))
    r = result_dict(record, partial=True)
    if not args.no_figures and (r.get("scores") is not None or r.get("n_layers")):  # a layout to draw
        figures.append(_explorer(args, record))
    paths = [str(f) for f in figures]
    if record.result is None:
        partial = result_dict(record, partial=True)
        status = partial["progress"]["status"]
        if not args.json:
            print(f"unfinished run ({record.state}): {status}\n  run directory  {record.path}")
            print("".join(f"  {line}\n" for line in format_partial(partial)), end="")
            print("".join(f"  wrote {f}\n" for f in paths), end="")
        return {**partial, "figures": paths}
    rows = [("run directory", str(record.path))] + ([("figures", ", ".join(paths))] if paths else [])
    if not args.json:
        print(format_result(record.result, extra=rows))
    return {**record.result.to_dict(), "figures": paths}


def _explorer(args: argparse.Namespace, record: Any) -> Path:
    """Write ``explorer.html`` (with model panels when ``--explorer-model``)."""
    from cel_lens.report.explorer_page import write_explorer_page

    panels = None
    if args.explorer_model:
        from cel_lens.analysis.explorer import explorer_panels
        from cel_lens.analysis.flips import load_run_model

        model = load_run_model(record, args.model, device=args.device)
        panels = explorer_panels(model, record, n_examples=args.explorer_examples, data_dir=args.data_dir)
    return write_explorer_page(record, _figures(args, record.path), model_panels=panels, data_dir=args.data_dir)


def _compare(args: argparse.Namespace, records: list) -> dict[str, Any]:
    from cel_lens.report.compare import compare_runs, format_comparison, plot_compare
    from cel_lens.report.save import save_figure

    labels = list(args.label or []) + [None, None]
    cmp = compare_runs(records[0], records[1], labels=labels[:2])
    paths: list = []
    if not args.no_figures:
        name = f"compare__{cmp['labels'][0]}__{cmp['labels'][1]}"
        paths = save_figure(plot_compare(records[0], records[1], labels=labels[:2]),
                            _figures(args, records[0].path) / name, include_plotlyjs="shared")
    if not args.json:
        print(format_comparison(cmp) + "".join(f"\n  wrote {f}" for f in paths))
    return {**cmp, "figures": [str(f) for f in paths]}


def _flips(args: argparse.Namespace, record: Any) -> dict[str, Any]:
    from cel_lens.analysis.flips import flipped_examples, load_run_model
    from cel_lens.report.flips import plot_flips
    from cel_lens.report.save import save_figure

    if args.n_flips < 1:
        raise ValueError(f"--n-flips must be >= 1, got {args.n_flips}")
    model = load_run_model(record, args.model, device=args.device)
    flips = flipped_examples(model, record, n=args.n_flips, data_dir=args.data_dir)
    paths = [] if args.no_figures else save_figure(plot_flips(flips), _figures(args, record.path) / "flips",
                                                  include_plotlyjs="shared")
    if not args.json:
        print(str(flips) + "".join(f"\n  wrote {f}" for f in paths))
    return {**flips.to_dict(), "figures": [str(f) for f in paths]}


def run(args: argparse.Namespace) -> int:
    """Run the subcommand; returns the exit code."""
    from cel_lens.runs import load_run

    if len(args.runs) > 2:
        raise ValueError(f"report takes one run, or two to compare; got {len(args.runs)}")
    if args.explorer_model and (args.no_figures or len(args.runs) != 1):
        raise ValueError("--explorer-model adds model panels to one run's explorer.html: give one run, without --no-figures")
    if not 1 <= args.explorer_examples <= 8:
        raise ValueError(f"--explorer-examples must lie in 1..8 (the page's size budget), got {args.explorer_examples}")
    if args.flips and len(args.runs) != 1:
        raise ValueError("--flips shows one run's flipped examples: give one run")
    settings_from_args(args)  # --device by its field's rule
    records = [load_run(r) for r in args.runs]
    if len(records) == 2:
        out = _compare(args, records)
    elif args.flips:
        out = _flips(args, records[0])
    else:
        out = _single(args, records[0])
    if args.json:
        print_json(out)
    return 0
