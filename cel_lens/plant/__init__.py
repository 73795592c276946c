"""Planted controls inside a real model: heads edited so the truth of their ablation is known.

``cel-lens plant KIND`` builds a planted variant of SmolLM2-135M-Instruct (see docs/planted.md):
``capability`` (ablating one head restores a push fitted to read the label; on SmolLM2's BoolQ it
generalizes to no calibrated gain), ``prior``
(ablating one head shifts the answer prior: a raw gain that calibration removes) and ``both``, on
BoolQ; and ``sums-capability`` (:mod:`~cel_lens.plant.sums`): on two-choice addition, where the
model discriminates, one head's output scaled until ablating it is a calibrated gain (and the same
recipe on other arithmetic files, ``sums3-capability`` and ``ops-capability``, fresh pools).
:mod:`~cel_lens.plant.features` measures the base model once per prompt,
:mod:`~cel_lens.plant.fit` and :mod:`~cel_lens.plant.build` choose, fit and size the plants on the
train rows, :mod:`~cel_lens.plant.truth` measures them on the held-out truth rows, and
:mod:`~cel_lens.plant.command` ties the command together.
"""

from __future__ import annotations

from cel_lens.plant.build import KINDS, PAIRS_OF, fit_pairs, planted_tensors
from cel_lens.plant.command import BASE, DEFAULT_ROWS, build_plants, plant_rows
from cel_lens.plant.features import LastLayer, PromptFeatures, extract_features, last_layer_margin, load_base
from cel_lens.plant.truth import paired_effect, plant_truth

__all__ = ["KINDS", "PAIRS_OF", "BASE", "DEFAULT_ROWS", "LastLayer", "PromptFeatures", "build_plants", "plant_rows",
           "fit_pairs", "planted_tensors", "extract_features", "last_layer_margin", "load_base", "paired_effect",
           "plant_truth"]
