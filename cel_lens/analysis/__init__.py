"""What runs a model to make a figure: attention patterns intact vs ablated, and the side effects
of each task's selected heads on every task. The figures themselves are drawn by
:mod:`cel_lens.report` from the data computed here.

* :mod:`~cel_lens.analysis.attention`: :func:`attention_patterns`, :func:`plot_attention` (runs the
  model, then draws :func:`cel_lens.report.plot_attention_patterns`);
* :mod:`~cel_lens.analysis.side_effects`: :func:`side_effect_matrix`;
* :mod:`~cel_lens.analysis.flips`: :func:`flipped_examples`, the examples an ablation fixes and breaks,
  with the selected heads' attention and direct logit effects (drawn by :func:`cel_lens.report.plot_flips`);
* :mod:`~cel_lens.analysis.explorer`: :func:`explore`, the run explorer in Jupyter (click a head, see what it
  does), and :func:`explorer_panels`, the model panels of ``explorer.html``; activations cached per example
  by :mod:`~cel_lens.analysis.explorer_model`.
"""

from cel_lens.analysis.attention import attention_patterns, example_tokens, plot_attention
from cel_lens.analysis.explorer import Explorer, explore, explorer_panels
from cel_lens.analysis.flips import flipped_examples, load_run_model
from cel_lens.analysis.side_effects import side_effect_matrix

__all__ = ["attention_patterns", "example_tokens", "plot_attention", "side_effect_matrix", "flipped_examples", "load_run_model",
           "explore", "Explorer", "explorer_panels"]
