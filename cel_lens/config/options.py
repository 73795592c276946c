"""The closed sets of a search's options, each a :class:`~cel_lens.registry.Registry`: name ->
``"module:attribute"``, the attribute an object that carries what the entry does.

Scorers, strategies, parsimony rules, interval methods, backends, ablation kinds, loaders,
precisions, BOS rules and rank rules are each one table here (:mod:`cel_lens.config` re-exports them): the
dataclass fields' ``choices`` and the CLI's read the names from them, a run's manifest records the
names, and what an entry *does* lives on the object its entry names (a scorer's unit, a
strategy's subsets, a precision's recomputes), so no code outside an entry's own module compares
its name (``tests/test_registry_names.py``). Adding an entry is one object in its module and one
line here. This module imports nothing but :mod:`cel_lens.registry`, so ``cel-lens --help`` needs
no torch.
"""

from __future__ import annotations

from cel_lens.registry import Registry

__all__ = [
    "SCORERS", "STRATEGIES", "PARSIMONY_RULES", "CI_METHODS", "BACKENDS", "ABLATION_KINDS", "LOADERS", "PRECISIONS",
    "BOS_RULES", "RANK_RULES",
]

SCORERS: Registry = Registry("scorer", {
    "exact": "cel_lens.scoring.exact:ExactScorer",
    "attribution": "cel_lens.scoring.attribution:AttributionScorer",
    "compressed": "cel_lens.scoring.compressed:CompressedScorer",
    "racing": "cel_lens.scoring.racing:RacingScorer",
    "prescreen": "cel_lens.scoring.prescreen:PrescreenScorer",
})
"""Stage-1 scorer name -> ``"module:Class"`` (a :class:`~cel_lens.registry.Registry`; :mod:`cel_lens.scoring.base`:
adding a scorer is one file there and one line here; its unit and manifest entries live on its class)."""
STRATEGIES: Registry = Registry("strategy", {
    "exhaustive": "cel_lens.selection.subsets:EXHAUSTIVE",
    "beam": "cel_lens.selection.subsets:BEAM",
})
"""Stage-2 strategy name -> its :class:`~cel_lens.selection.subsets.Strategy` (which subsets of the
pool it evaluates, how many, and whether it reads ``beam_width``)."""
PARSIMONY_RULES: Registry = Registry("parsimony rule", {
    "backward": "cel_lens.selection.parsimony:BACKWARD",
    "one_se": "cel_lens.selection.parsimony:ONE_SE",
    "simultaneous": "cel_lens.selection.parsimony:SIMULTANEOUS",
    "best": "cel_lens.selection.parsimony:BEST",
})
"""Stage 2's choice (:mod:`cel_lens.selection.parsimony`, each a
:class:`~cel_lens.selection.parsimony.ParsimonyRule`): backward elimination from the most
accurate subset by the leave-one-out exact tests on D_dist (``backward``, the default), the smallest
subset within one standard error of the most accurate (``one_se``), within ``z(1 - 0.05/m)`` standard errors for ``m`` subsets
(``simultaneous``), or the most accurate (``best``)."""
CI_METHODS: Registry = Registry("ci_method", {
    "tango": "cel_lens.selection.paired:tango_interval",
    "newcombe": "cel_lens.selection.paired:newcombe_interval",
    "bootstrap": "cel_lens.selection.paired:bootstrap_interval",
})
"""Intervals of the test gain (:mod:`cel_lens.selection.paired`, each a function
``(intact, ablated, alpha, *, n_boot, seed) -> (low, high)``): Tango's score interval (the
default: it keeps its coverage with few discordant pairs, ``benchmarks/claims.py``), Newcombe's
paired interval, or the paired bootstrap."""

BACKENDS: Registry = Registry("backend", {
    "local": "cel_lens.backends.local:LocalBackend",
    "ray": "cel_lens.backends.ray:RayBackend",
})
"""Backend name -> ``"module:Class"`` (:func:`cel_lens.backends.get_backend` imports it when
chosen, so an optional backend costs nothing until used)."""

ABLATION_KINDS: Registry = Registry("ablation kind", {
    "zero": "cel_lens.model.ablation:ZeroAblation",
    "mean": "cel_lens.model.ablation_kinds:MeanAblation",
    "resample": "cel_lens.model.ablation_kinds:ResampleAblation",
})
"""Ablation kind name -> ``"module:Class"`` (:mod:`cel_lens.model.ablation`): what replaces an
ablated head's ``hook_z``. ``"zero"`` is the paper's protocol; ``"mean"`` the head's mean over
D_dist; ``"resample"`` a seeded D_dist example's. The one table every part of cel_lens reads
(``SearchConfig.ablation``, the CLI, the manifest, export): adding a kind is a subclass of
:class:`~cel_lens.model.ablation.Ablation` (whose attributes say what export and fitting do) and one line here."""

LOADERS: Registry = Registry("loader", {
    "auto": "cel_lens.model.load:AUTO_LOADER",
    "hooked": "cel_lens.model.load:HOOKED_LOADER",
    "bridge": "cel_lens.model.load:BRIDGE_LOADER",
})
"""How a model given by name is loaded (:func:`cel_lens.load_model`), each a
:class:`~cel_lens.model.load.Loader`."""
PRECISIONS: Registry = Registry("precision", {
    "auto": "cel_lens.evaluation.precision:AUTO",
    "float32": "cel_lens.evaluation.precision:FLOAT32",
    "bf16": "cel_lens.evaluation.precision:BF16",
})
"""Compute precision of the evaluations (:mod:`cel_lens.evaluation.precision`, each a
:class:`~cel_lens.evaluation.precision.Precision`): ``"bf16"`` computes
in bfloat16 and recomputes in float32 every decision within the bf16 error bound, so the bits equal
``"float32"``'s; ``"auto"``: bf16 for a model in bfloat16, or for an exact-match task of a float32
model with 20M+ parameters on a CPU with native bf16 (where bf16 was measured faster)."""

BOS_RULES: Registry = Registry("bos rule", {
    "tokenizer": "cel_lens.model.bos:TOKENIZER_BOS",
    "always": "cel_lens.model.bos:ALWAYS_BOS",
    "never": "cel_lens.model.bos:NEVER_BOS",
})
"""How prompts start (:mod:`cel_lens.model.bos`, each a :class:`~cel_lens.model.bos.BosRule`): ``"tokenizer"``: BOS where the checkpoint's
tokenizer adds it (lm-eval's default); ``"always"``: BOS before every prompt; ``"never"``: no BOS
(unless the text itself starts with one)."""
RANK_RULES: Registry = Registry("rank rule", {
    "raw": "cel_lens.selection.ranking:RAW",
    "calibrated": "cel_lens.selection.ranking:CALIBRATED",
})
"""Which D_dist gain ranks stage 1 and chooses S-hat -> its :class:`~cel_lens.selection.ranking.RankRule`:
the raw gain (the paper's), or the gain at each head set's best constant prior fitted on D_dist."""
