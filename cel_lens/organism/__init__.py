"""The model organism: a small trained transformer in which a beneficial head ablation emerges.

cel_lens needs a model with a *known* answer that runs offline on a CPU. This package ships one: a
one-layer, attention-only ``HookedTransformer`` (4 heads of width 2, no normalization), trained from
random initialization on a mix of two tasks that conflict on a shared feature, in the spirit of
Section 4 of the paper. The two tasks are ordinary cel_lens tasks (``organism_a``, ``organism_b``:
:mod:`cel_lens.tasks.organism`); the shipped model is ``cel_lens.load_model("organism")``.

**Training.** Every training prompt is labelled by task B with probability 0.75 and by task A
otherwise, with no task cue anywhere: both tasks draw the same prompts, so no head can know which
task is being asked. For a prompt with ``x_u >= 3`` the best the model can do on the mix is to say
``skip`` (probability 0.75 against 0.25), which is wrong for task A. So the trained model loses task
A on (most of) the 3 in 16 prompts where task B says ``skip`` (task A about 0.84, task B about 0.97
on held-out prompts): the compromise of Proposition 4.1.

**Why a beneficial ablation exists.** In a one-layer attention-only model the answer position reads
the prompt only through its heads. The shared feature pushes one output direction (``skip`` against
the two answers), the task feature another (``pos`` against ``neg``); gradient descent learns them
as separate modes, each spread over the heads in its own, random-at-initialization proportions.
When one head ends up carrying most of the ``u -> skip`` mode and little of the ``v -> pos/neg``
mode (the allocation event of Theorem 4.3), zeroing it removes the ``skip`` answers: task A rises
toward 1.0 while task B falls by as much. ``docs/organism.md`` measures how often this happens.

Modules: :mod:`~cel_lens.organism.model` (tokenizer, architecture, save/load),
:mod:`~cel_lens.organism.train` (many seeds at once), :mod:`~cel_lens.organism.ground_truth` (the
head that carries the conflict, from activations and weights), :mod:`~cel_lens.organism.sweep`
(emergence over seeds), :mod:`~cel_lens.organism.figures`, :mod:`~cel_lens.organism.commands`
(``cel-lens organism``), :mod:`~cel_lens.organism.demo` (``cel-lens demo``).
"""

import importlib
from typing import Any

# public name -> module that defines it, imported on first use: `cl.organism.load_organism()` loads the model
# module alone, not the training, sweep and figure modules (plotly, pandas) beside it
_LAZY: dict[str, str] = {
    "config_with": "cel_lens.organism.commands",
    "describe_organism": "cel_lens.organism.commands",
    "format_summary": "cel_lens.organism.commands",
    "parse_seeds": "cel_lens.organism.commands",
    "train_and_save": "cel_lens.organism.commands",
    "plot_emergence": "cel_lens.organism.figures",
    "plot_head_effects": "cel_lens.organism.figures",
    "plot_training_log": "cel_lens.organism.figures",
    "save_training_figure": "cel_lens.organism.figures",
    "FeatureCoefficients": "cel_lens.organism.ground_truth",
    "fit_feature_coefficients": "cel_lens.organism.ground_truth",
    "ground_truth_heads": "cel_lens.organism.ground_truth",
    "head_feature_coefficients": "cel_lens.organism.ground_truth",
    "ov_feature_reading": "cel_lens.organism.ground_truth",
    "ORGANISM_DIR": "cel_lens.organism.model",
    "build_model": "cel_lens.organism.model",
    "build_tokenizer": "cel_lens.organism.model",
    "hooked_config": "cel_lens.organism.model",
    "load_organism": "cel_lens.organism.model",
    "load_tokenizer": "cel_lens.organism.model",
    "organism_info": "cel_lens.organism.model",
    "save_organism": "cel_lens.organism.model",
    "SeedOutcome": "cel_lens.organism.sweep",
    "emergence_sweep": "cel_lens.organism.sweep",
    "evaluate_models": "cel_lens.organism.sweep",
    "sweep_table": "cel_lens.organism.sweep",
    "PARAM_NAMES": "cel_lens.organism.train",
    "TrainingLog": "cel_lens.organism.train",
    "answer_head_outputs": "cel_lens.organism.train",
    "answer_logits": "cel_lens.organism.train",
    "encode_prompts": "cel_lens.organism.train",
    "init_parameters": "cel_lens.organism.train",
    "model_parameters": "cel_lens.organism.train",
    "train_organism": "cel_lens.organism.train",
    "train_organisms": "cel_lens.organism.train",
    "ORGANISM_TASK": "cel_lens.tasks.organism",
    "SIDE_TASK": "cel_lens.tasks.organism",
    "TOKEN_ID": "cel_lens.tasks.organism",
    "VOCAB": "cel_lens.tasks.organism",
    "OrganismBatch": "cel_lens.tasks.organism",
    "OrganismConfig": "cel_lens.tasks.organism",
    "organism_task": "cel_lens.tasks.organism",
    "prompt_text": "cel_lens.tasks.organism",
    "sample_prompts": "cel_lens.tasks.organism",
}

__all__ = [
    "ORGANISM_TASK", "SIDE_TASK", "ORGANISM_DIR", "VOCAB", "TOKEN_ID", "OrganismConfig", "OrganismBatch",
    "FeatureCoefficients", "build_tokenizer", "load_tokenizer", "hooked_config", "sample_prompts",
    "prompt_text", "organism_task", "load_organism", "save_organism", "organism_info",
    "head_feature_coefficients", "ground_truth_heads", "ov_feature_reading", "fit_feature_coefficients",
    "build_model", "train_organism", "train_organisms", "PARAM_NAMES", "TrainingLog", "init_parameters",
    "answer_head_outputs", "answer_logits", "model_parameters", "encode_prompts", "SeedOutcome",
    "evaluate_models", "emergence_sweep", "sweep_table", "plot_training_log", "save_training_figure",
    "plot_head_effects", "plot_emergence", "parse_seeds", "config_with", "train_and_save",
    "describe_organism", "format_summary",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'cel_lens.organism' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
