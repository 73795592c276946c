"""Deprecated: ``cel_lens.organism_train`` moved to ``cel_lens.organism`` (this module stays for one release)."""

import warnings

from cel_lens.organism import (  # noqa: F401
    PARAM_NAMES,
    TrainingLog,
    SeedOutcome,
    init_parameters,
    answer_head_outputs,
    answer_logits,
    train_organisms,
    train_organism,
    emergence_sweep,
    sweep_table,
    plot_training_log,
    plot_head_effects,
    plot_emergence,
    encode_prompts,
    evaluate_models,
    model_parameters,
    save_training_figure,
    parse_seeds,
    config_with,
    train_and_save,
    describe_organism,
    format_summary,
)

__all__ = ['PARAM_NAMES', 'SeedOutcome', 'TrainingLog', 'answer_head_outputs', 'answer_logits', 'config_with', 'describe_organism', 'emergence_sweep', 'encode_prompts', 'evaluate_models', 'format_summary', 'init_parameters', 'model_parameters', 'parse_seeds', 'plot_emergence', 'plot_head_effects', 'plot_training_log', 'save_training_figure', 'sweep_table', 'train_and_save', 'train_organism', 'train_organisms']

warnings.warn("cel_lens.organism_train is deprecated; use cel_lens.organism", DeprecationWarning, stacklevel=2)
