"""``cel-lens demo``: Algorithm 1 end to end on the built-in model organism, offline, on a CPU.

The organism (:mod:`cel_lens.organism`) is a small transformer trained on two tasks that conflict
on a shared feature; the demo searches for heads whose ablation helps task A, reports the held-out
gain with its CI, p-value and random-subset null, and measures what the same ablation does to
task B (the side effect the theory predicts).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Union

from cel_lens.evaluation.evaluator import evaluate
from cel_lens.evaluation.context import EvalContext
from cel_lens.evaluation.seal import SealReader
from cel_lens.heads import HeadSet
from cel_lens.organism.ground_truth import ground_truth_heads
from cel_lens.organism.model import load_organism
from cel_lens.pipeline import search
from cel_lens.report.run_figures import write_run_figures
from cel_lens.selection.result import format_p, format_result, pp
from cel_lens.stats import mcnemar_exact, paired_bootstrap_ci
from cel_lens.tasks.organism import ORGANISM_TASK, SIDE_TASK
from cel_lens.tasks.registry import load_task

__all__ = ["run_demo", "demo_dir", "DEMO_ROOT"]

DEMO_ROOT = Path("runs") / "demo"
"""The demo's run directory with its default options."""


def demo_dir(n_dist: Optional[int] = None, n_test: Optional[int] = None, seed: int = 0) -> Path:
    """Where the demo writes a run with these options: :data:`DEMO_ROOT` for the defaults, else
    ``runs/demo__n_dist-1000__seed-3`` (each option that differs from its default), so a demo
    with other options never runs into the default demo's directory."""
    parts = [f"{name}-{value}" for name, value in (("n_dist", n_dist), ("n_test", n_test)) if value is not None]
    parts += [f"seed-{seed}"] if seed != 0 else []
    return DEMO_ROOT if not parts else DEMO_ROOT.with_name("__".join([DEMO_ROOT.name, *parts]))


def run_demo(
    out: Union[str, Path, None] = None,
    *,
    n_dist: Optional[int] = None,
    n_test: Optional[int] = None,
    seed: int = 0,
    figures: Optional[Union[str, Path]] = "default",
    progress: bool = True,
    verbose: bool = True,
) -> dict[str, Any]:
    """Run the demo; returns ``result.json``'s keys plus ``task_B_*`` (intact, ablated, gain, CI,
    p-value of the selected ablation on task B's test split), ``run_dir`` and ``figures``.

    ``out`` defaults to :func:`demo_dir` of the options; ``figures="default"`` writes them to
    ``OUT/figures``; ``None`` skips them.
    """
    out = demo_dir(n_dist, n_test, seed) if out is None else out
    model = load_organism()
    task_a = load_task(ORGANISM_TASK, n_dist=n_dist, n_test=n_test, seed=seed)
    task_b = load_task(SIDE_TASK, n_dist=n_dist, n_test=n_test, seed=seed)
    run = search(model, task_a, out=out, seed=seed, progress=progress)
    res = run.result
    owner = EvalContext.from_environment(reader=SealReader("demo: side effect of Ŝ on task B"))  # after the selection
    side = evaluate(model, task_b.test, [HeadSet(), res.head_set], progress=progress, context=owner)
    b_lo, b_hi = paired_bootstrap_ci(side.correct[0], side.correct[1], seed=seed)
    summary: dict[str, Any] = dict(res.to_dict())
    summary.update(
        task=task_a.name,
        side_task=task_b.name,
        task_B_acc_intact=float(side.correct[0].double().mean()),
        task_B_acc_ablated=float(side.correct[1].double().mean()),
        task_B_ci_low=b_lo,
        task_B_ci_high=b_hi,
        task_B_p_value=mcnemar_exact(side.correct[0], side.correct[1]),
        ground_truth_heads=str(ground_truth_heads()),
        run_dir=str(run.path),
    )
    summary["task_B_gain"] = summary["task_B_acc_ablated"] - summary["task_B_acc_intact"]
    written: list[str] = []
    if figures is not None:
        fig_dir = Path(run.path) / "figures" if figures == "default" else Path(figures)
        try:
            written = [str(p) for p in write_run_figures(run, fig_dir)]
        except RuntimeError as err:  # no browser for PNG export: HTML still works
            summary["figures_note"] = f"PNG skipped: {str(err).splitlines()[0]}"
            written = [str(p) for p in write_run_figures(run, fig_dir, formats=("html",))]
    summary["figures"] = written
    if verbose:
        print(_describe(summary))
    return summary


def _describe(s: dict[str, Any]) -> str:
    """The demo's report: the search result's block as everywhere else (:func:`format_result`), with
    the ground truth, the side effect on task B and where the run and its figures are as its last rows."""
    extra = [
        ("task", f"{s['task']} (model organism)"),
        ("ground truth (weights)", s["ground_truth_heads"]),
        (f"side effect ({s['side_task']})", f"intact {pp(s['task_B_acc_intact'], False)} -> ablated "
         f"{pp(s['task_B_acc_ablated'], False)}, gain {pp(s['task_B_gain'])} "
         f"[{pp(s['task_B_ci_low'])}, {pp(s['task_B_ci_high'])}], McNemar p {format_p(s['task_B_p_value'])}"),
        ("run directory", s["run_dir"]),
    ]
    if s.get("figures"):
        extra.append(("figures", ", ".join(s["figures"])))
    if s.get("figures_note"):
        extra.append(("note", s["figures_note"]))
    return format_result(s, extra=extra)
