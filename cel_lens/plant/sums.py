"""The capability plant on two-choice addition: one head's output scaled until it costs real skill.

Why a different task and a different edit than the BoolQ plants (:mod:`cel_lens.plant.build`). On
BoolQ SmolLM2 has no discrimination to lose, so no plant there can carry a calibrated cost. On
``arithmetic_choice`` (:mod:`cel_lens.tasks.arithmetic_choice`) it prefers the right sum to the near
miss well above any constant prior, and one head alone can then carry a cost: **L29H0's output
columns** (``o_proj``, the head's own parameters) are multiplied by a factor. The amplified head adds
to the last layer's output a large term that depends on the prompt and the choice, not on which sum
is right: it drowns the model's preference (a capability cost, not a prior, since calibration fits
a constant threshold only). Zero-ablating L29H0 gives the base model without that head, which keeps
the base model's skill (L29H0's own ablation costs the base model little, docs/planted.md): so the
true effect of ablating the planted head is a calibrated gain. L29H0 is the head of the feasibility
study (``scripts/plant_choice_feasibility.py``), in the last layer so that its scaled output reaches
the logits through no later layer.

Sizing, on the plan's *train* rows only: each factor of :data:`FACTORS` is applied as an ablation
kind that scales ``hook_z`` (:class:`ScaledHead`, the same arithmetic as the scaled columns), and
the factor whose calibrated gain of ablating the head (each model at its best constant prior on the
train rows) is nearest :data:`~cel_lens.plant.build.TARGET_MDE` times the calibrated test's
detectable effect at n_test 1,000 is chosen. The truth is measured on the plan's *truth* rows with the
planted model loaded by name (:func:`sums_truth`).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import torch
from jaxtyping import Float
from torch import Tensor

from cel_lens.evaluation.context import EvalContext
from cel_lens.evaluation.evaluator import evaluate
from cel_lens.heads import Head, HeadSet
from cel_lens.model.ablation import ZERO, Ablation
from cel_lens.model.gguf import converted_from
from cel_lens.model.planted_cache import planted_folder, planted_from, planted_name, read_tensors, write_planted
from cel_lens.model.sources import resolve_source
from cel_lens.plant.build import N_TEST, TARGET_MDE
from cel_lens.plant.truth import margin_effects
from cel_lens.tasks.arithmetic_choice import FILES, fresh_three_ops, load_pool
from cel_lens.tasks.base import Example, Split

__all__ = ["KIND", "KINDS", "HEAD", "FACTORS", "SUMS_ROWS", "ScaledHead", "sums_row_plan", "sums_examples", "choice_margins",
           "size_factor", "scaled_tensors", "build_sums_plant", "sums_truth", "fresh_truth"]

KIND = "sums-capability"
"""The plant's kind: ``load_model("smollm2-135m+plant:sums-capability")``."""
KINDS = {KIND: "2da", "sums3-capability": "3da", "ops-capability": "1dc"}
"""Each kind of the plant and the arithmetic file it is sized and measured on. ``sums3-capability`` and
``ops-capability`` are the same recipe on three-digit addition and on single-digit three-operation
problems (fresh pools, each sized on its own train rows), for a second row once the two-digit pool was
spent (docs/planted.md says what each showed)."""
HEAD = Head(29, 0)
"""The planted head."""
FACTORS = (4.0, 6.0, 8.0, 10.0, 12.0, 14.0, 16.0, 20.0, 24.0, 28.0, 32.0, 40.0)
"""Factors tried for the head's output (exact in float32, so the scaled weights are reproducible)."""
SUMS_ROWS = {KIND: "results/planted/sums-plant-rows.json", "sums3-capability": "results/planted/sums3-plant-rows.json",
             "ops-capability": "results/planted/ops-plant-rows.json"}
"""Each kind's row plan: train and truth ids (:func:`sums_row_plan`)."""
ROW_SEED, N_TRAIN, N_TRUTH, FIRST_LOOK = 58, 200, 300, 1000
"""The plan's seed and sizes: train from the first ``FIRST_LOOK`` rows of the file (on two-digit
addition, those the feasibility study and the choice of the task's near miss and prompt read: rows
0-999), truth from the rows after them (read by nothing that chose the task, the head or the factor).
The other files keep the same rule, though nothing that chose the task, head or near miss read
their rows (they were chosen on two-digit addition rows)."""
BASE = "smollm2-135m"
PLANT_FORMAT = 1


def _config(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown sums plant {kind!r}; choose from {', '.join(KINDS)}")
    return KINDS[kind]


class ScaledHead(Ablation):
    """An ablation kind that multiplies the ablated heads' ``z`` by ``factor``: applied to one head it
    is the model whose head's ``o_proj`` columns are scaled by ``factor`` (used to size the plant)."""

    name = "scaled"

    def __init__(self, factor: float) -> None:
        self.factor = float(factor)

    def values(self, z: Float[Tensor, "row pos head d_head"], layer: int) -> Tensor:
        return z * self.factor

    def constant(self, layer: int, n_heads: int, d_head: int) -> Optional[Tensor]:
        return None

    def record(self) -> dict[str, Any]:
        return {"kind": self.name, "factor": self.factor}


def sums_row_plan(data_dir: Optional[str], kind: str = KIND) -> tuple[dict[str, Any], str]:
    """``kind``'s row plan (train and truth ids, seeded) and the reserve file's text (ids, then content
    hashes) that a planted row's loader leaves out (``--task-option reserve=FILE``)."""
    import random

    config = _config(kind)
    pool, _ = load_pool(data_dir, config)
    early, late = list(range(FIRST_LOOK)), list(range(FIRST_LOOK, len(pool)))
    rng = random.Random(ROW_SEED)
    train, truth = sorted(rng.sample(early, N_TRAIN)), sorted(rng.sample(late, N_TRUTH))
    words = FILES[config]
    read = ("the rows the feasibility study and the task's design read" if config == "2da"
            else "the same rule as two-digit addition's plan; the task, head and near miss were chosen on two-digit rows")
    plan = {"what": f"{words} rows of the {kind} plant (docs/planted.md)", "seed": ROW_SEED,
            "rule": f"train: {N_TRAIN} of rows 0-{FIRST_LOOK - 1} ({read}); "
                    f"truth: {N_TRUTH} of rows {FIRST_LOOK}-{len(pool) - 1} (read by nothing that chose the task, head or factor)",
            "train": [pool[i].id for i in train], "truth": [pool[i].id for i in truth]}
    kept = [pool[i] for i in sorted(train + truth)]
    lines = [f"# {words} rows reserved for the {kind} plant (ids, then content hashes)",
             f"# written by `cel-lens plant {kind} --write-rows`; a planted row leaves them out (--task-option reserve=FILE)"]
    return plan, "\n".join(lines + [e.id for e in kept] + [e.content_hash for e in kept]) + "\n"


def sums_examples(plan: dict[str, Any], part: str, pool: Sequence[Example]) -> Split:
    """The plan's ``part`` (``"train"`` or ``"truth"``) of ``pool`` (:func:`~cel_lens.tasks.arithmetic_choice.load_pool`)
    as a split of ``arithmetic_choice`` examples."""
    by_id = {e.id: e for e in pool}
    missing = [i for i in plan[part] if i not in by_id]
    if missing:
        raise ValueError(f"{len(missing)} {part} ids are not rows of the pool (e.g. {missing[0]})")
    return Split(f"plant-{part}", tuple(by_id[i] for i in plan[part]), task="arithmetic_choice",
                 answer_type="multiple_choice", metric="acc")


def choice_margins(model: Any, split: Split, sets: Sequence[Any], ablation: Ablation = ZERO) -> Float[Tensor, "variant example"]:
    """``lp(larger) - lp(smaller)`` of every example under each head set (float32, ``ablation``'s kind)."""
    ctx = EvalContext(precision="float32", ablation=ablation)
    scores = evaluate(model, split, list(sets), context=ctx, progress=False).extra["choice_score"].double()
    return scores[..., 1] - scores[..., 0]


def size_factor(model: Any, train: Split) -> dict[str, Any]:
    """Every factor's raw and calibrated gain of ablating :data:`HEAD` on the train rows, and the
    chosen factor (calibrated gain nearest ``TARGET_MDE`` times its detectable effect at n_test 1,000)."""
    labels = torch.tensor([e.label for e in train], dtype=torch.long)
    base, ablated = choice_margins(model, train, [HeadSet(), HeadSet([HEAD])])
    sizes = []
    for factor in FACTORS:
        planted = choice_margins(model, train, [HeadSet([HEAD])], ScaledHead(factor))[0]
        sizes.append({"factor": factor, **margin_effects(planted, ablated, labels, N_TEST)})
    sized = [s for s in sizes if s["calibrated_best_prior"]["mde_at_n_test"]]
    chosen = min(sized, key=lambda s: abs(s["calibrated_best_prior"]["gain"] / s["calibrated_best_prior"]["mde_at_n_test"] - TARGET_MDE))
    return {"factor": chosen["factor"], "chosen_on_train": chosen, "train_sizing": sizes,
            "base_on_train": margin_effects(base, ablated, labels, N_TEST)}


def scaled_tensors(base: dict[str, Tensor], head: Head, d_head: int, factor: float) -> dict[str, Tensor]:
    """The base checkpoint's tensors with ``head``'s output-projection columns multiplied by
    ``factor``; every other tensor is the base's own object."""
    name = f"model.layers.{head.layer}.self_attn.o_proj.weight"
    o = base[name].clone()
    cols = slice(head.head * d_head, (head.head + 1) * d_head)
    o[:, cols] = o[:, cols] * factor
    return {**base, name: o}


def sums_truth(name: str, truth: Split, base_model: Any, factor: float) -> dict[str, Any]:
    """The planted model's true effect on the truth rows: raw and calibrated gain of ablating
    :data:`HEAD` (the model loaded by ``name``, a planted name or its folder; float32), and how far its
    margins are from the base model's with the head's ``z`` scaled by ``factor`` (what sizing assumed)."""
    from cel_lens.model.load import load_model

    labels = torch.tensor([e.label for e in truth], dtype=torch.long)
    planted = load_model(name)
    intact, ablated = choice_margins(planted, truth, [HeadSet(), HeadSet([HEAD])])
    hooked = choice_margins(base_model, truth, [HeadSet([HEAD])], ScaledHead(factor))[0]
    base_ablated = choice_margins(base_model, truth, [HeadSet(), HeadSet([HEAD])])
    return {"n": len(truth), "larger_is_right": float(labels.double().mean()),
            f"ablate {HEAD}": margin_effects(intact, ablated, labels, N_TEST),
            "base_vs_base_without_head": margin_effects(base_ablated[0], base_ablated[1], labels, N_TEST),
            "planted_vs_scaled_hook_max_abs_margin_diff": float((intact - hooked).abs().max()),
            "ablated_planted_vs_ablated_base_max_abs_margin_diff": float((ablated - base_ablated[1]).abs().max())}


def build_sums_plant(*, kind: str = KIND, data_dir: Optional[str] = None, rows: Union[str, Path, None] = None,
                     truth: bool = False, cache: Optional[str] = None) -> dict[str, Any]:
    """Size the factor on ``kind``'s plan's train rows (``rows``, default its :data:`SUMS_ROWS` file),
    write the plant to the cache by content hash, and with ``truth`` measure it on the truth rows."""
    from cel_lens.model.load import load_model

    start = time.process_time()
    config = _config(kind)  # an unknown kind is refused before any file or model is read
    rows = rows or SUMS_ROWS[kind]
    path = Path(rows)
    plan = json.loads(path.read_text())
    source = resolve_source(BASE)
    model = load_model(BASE)
    pool, _ = load_pool(data_dir, config)
    sizing = size_factor(model, sums_examples(plan, "train", pool))
    recipe = {"format": PLANT_FORMAT, "kind": kind, "base_id": source.id,
              "base_gguf": (converted_from(source.path) or {}).get("sha256"), "head": str(HEAD), "factor": sizing["factor"],
              "edit": f"o_proj columns of {HEAD} multiplied by the factor", "changed": [str(HEAD)],
              "rows": {"file": str(rows), "sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "train": len(plan["train"])}}
    tensors = scaled_tensors(read_tensors(source.path), HEAD, model.cfg.d_head, sizing["factor"])
    name = planted_name(BASE, kind)
    folder, digest = write_planted(source.path, name, tensors, recipe, cache=cache)
    out: dict[str, Any] = {"name": name, "tensors_sha256": digest, "folder": str(folder), **recipe, **sizing}
    if truth:
        where = name if cache is None else str(folder)  # a name resolves in the default cache only
        out["truth"] = sums_truth(where, sums_examples(plan, "truth", pool), model, sizing["factor"])
    out["cpu_s"] = time.process_time() - start
    return out


def fresh_truth(n: int, seed: int, *, kind: str = "ops-capability", data_dir: Optional[str] = None) -> dict[str, Any]:
    """The built ``kind`` plant's truth (:func:`sums_truth`) on ``n`` single-digit three-operation
    problems of the file's form that the file does not hold (:func:`~cel_lens.tasks.arithmetic_choice.fresh_three_ops`,
    seeded): a truth from rows no split can contain, as many as the question needs, where the
    plan's 300 truth rows leave the interval wide."""
    from cel_lens.model.load import load_model

    if _config(kind) != "1dc":
        raise ValueError(f"fresh rows exist for the single-digit three-operation file only, not {kind!r}'s")
    start = time.process_time()
    name = planted_name(BASE, kind)
    folder = planted_folder(name)
    if folder is None:
        raise FileNotFoundError(f"{name} is not built here (cel-lens plant {kind} --data-dir ../shared/data)")
    recipe = planted_from(folder) or {}
    pool, source = load_pool(data_dir, _config(kind))
    rows = fresh_three_ops(pool, n, seed)
    split = Split("plant-truth-fresh", tuple(rows), task="arithmetic_choice", answer_type="multiple_choice", metric="acc")
    truth = sums_truth(name, split, load_model(BASE), recipe["factor"])
    return {"what": f"the {kind} plant's truth on problems of the 1dc file's form outside the file (docs/planted.md)",
            "name": name, "kind": kind, "tensors_sha256": folder.name, "head": recipe.get("head"), "factor": recipe["factor"],
            "rows": {"n": n, "seed": seed, "rule": "(a op b) op c, digits 1-9, ops + - *, not among the file's 2,000 rows",
                     "file_sha256": source.get("sha256"), "content_sha256": split.content_hash},
            "truth": truth, "cpu_s": time.process_time() - start}
