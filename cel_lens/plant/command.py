"""``cel-lens plant``: build the planted SmolLM2 variants from the wheel, and measure their truth.

One seeded command reads the base model (``smollm2-135m``, the wheel's GGUF dequantized once), the
BoolQ validation rows of the row plan (``results/planted/boolq-plant-rows.json``: its ``train`` rows
fit and size the plants, its ``truth`` rows are read only with ``--truth``), fits both pairs
(:mod:`cel_lens.plant.build`), and writes each plant under ``<cache>/planted/<content hash>/`` with
its name pointing there (:mod:`cel_lens.model.planted_cache`): ``load_model("smollm2-135m+plant:capability")``.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from cel_lens.model.gguf import converted_from
from cel_lens.model.planted_cache import planted_name, read_tensors, write_planted
from cel_lens.model.sources import resolve_source
from cel_lens.plant.build import KINDS, PAIRS_OF, base_discrimination, fit_pairs, pair_record, planted_tensors
from cel_lens.plant.features import extract_features, load_base
from cel_lens.plant.truth import plant_truth

__all__ = ["BASE", "DEFAULT_ROWS", "PLANT_FORMAT", "plant_rows", "build_plants"]

BASE = "smollm2-135m"
"""The model the plants are built on."""
DEFAULT_ROWS = "results/planted/boolq-plant-rows.json"
"""The row plan (``scripts/plant_rows.py``): train and truth ids."""
PLANT_FORMAT = 1
"""Version of the recipe a plant's marker records."""


def plant_rows(rows: Union[str, Path], data_dir: Optional[str]) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """The row plan and its ``train`` and ``truth`` examples (BoolQ validation rows by id)."""
    from cel_lens.tasks.boolq import load_boolq

    path = Path(rows)
    plan = json.loads(path.read_text())
    plan["file"], plan["file_sha256"] = str(rows), hashlib.sha256(path.read_bytes()).hexdigest()
    validation = load_boolq(n_test=3270, data_dir=data_dir, dist_from="validation", splits=("test",)).test
    by_id = {e.id: e for e in validation.examples}
    missing = [i for part in ("train", "truth") for i in plan[part] if i not in by_id]
    if missing:
        raise ValueError(f"{rows}: {len(missing)} ids are not BoolQ validation rows (e.g. {missing[0]})")
    return plan, {part: [by_id[i] for i in plan[part]] for part in ("train", "truth")}


def _recipe(kind: str, w: Any, pairs: dict, seed: int, plan: dict, base: Any) -> dict[str, Any]:
    return {"format": PLANT_FORMAT, "kind": kind, "base_id": base.id, "base_gguf": (converted_from(base.path) or {}).get("sha256"),
            "layer": w.layer, "seed": seed, "rows": {"file": plan["file"], "sha256": plan["file_sha256"],
                                                     "train": len(plan["train"])},
            "pairs": {name: pair_record(w, pairs[name]) for name in PAIRS_OF[kind]},
            "push": "scale * (v . z_reader) * d, d = g*(u_yes-u_no) / |g*(u_yes-u_no)|^2 (g: final norm gain)",
            "changed": sorted({f"L{w.layer}H{pairs[n][k]}" for n in PAIRS_OF[kind] for k in ("reader", "canceller")})}


def build_plants(kinds: Sequence[str], *, data_dir: Optional[str] = None, rows: Union[str, Path] = DEFAULT_ROWS,
                 seed: int = 0, truth: bool = False, cache: Optional[str] = None) -> dict[str, Any]:
    """Fit both pairs on the train rows, write the plants ``kinds`` (their folders, content hashes
    and recipes), and with ``truth`` measure every plant on the truth rows (:func:`plant_truth`)."""
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown plant kind(s) {unknown}: choose from {', '.join(KINDS)}")
    start = time.process_time()
    base = resolve_source(BASE)
    plan, examples = plant_rows(rows, data_dir)
    model, tokenizer, w = load_base(base.path)
    train = extract_features(model, tokenizer, examples["train"])
    pairs = fit_pairs(w, train, seed)
    tensors = read_tensors(base.path)
    out: dict[str, Any] = {"base": base.id, "rows": {"file": plan["file"], "sha256": plan["file_sha256"]}, "plants": {}}
    for kind in kinds:
        recipe = _recipe(kind, w, pairs, seed, plan, base)
        planted = planted_tensors(tensors, w, [pairs[n] for n in PAIRS_OF[kind]])
        folder, digest = write_planted(base.path, planted_name(BASE, kind), planted, recipe, cache=cache)
        out["plants"][kind] = {"name": planted_name(BASE, kind), "tensors_sha256": digest, "folder": str(folder), **recipe}
    out["train_sizing"] = {n: {k: v for k, v in p.items() if k not in ("v", "reader", "canceller")} for n, p in pairs.items()}
    out["base_on_train"] = base_discrimination(w, train)
    if truth:
        held = extract_features(model, tokenizer, examples["truth"])
        out["truth"] = plant_truth(w, train, held, pairs, {k: PAIRS_OF[k] for k in kinds})
        out["base_on_truth"] = base_discrimination(w, held)
    out["cpu_s"] = time.process_time() - start
    return out
