"""Offline test support: tiny models and checkpoints, planted tasks, a synthetic oracle.

Nothing here touches the Hugging Face hub. Used by the test suite, the benchmarks and the examples.
"""

from cel_lens.testing.planted_choices import PlantedChoiceOracle
from cel_lens.testing.tiny_models import TINY_ARCHS, tiny_hf_checkpoint, tiny_hooked_from_hf, tiny_hooked_transformer
from cel_lens.testing.planted import planted_task
from cel_lens.testing.synthetic import SyntheticOracle, realistic_oracle
from cel_lens.testing.tokenizers import BOS_CONVENTIONS, CORPUS, tiny_tokenizer, train_tokenizer

__all__ = [
    "CORPUS",
    "BOS_CONVENTIONS",
    "TINY_ARCHS",
    "train_tokenizer",
    "tiny_tokenizer",
    "tiny_hooked_transformer",
    "tiny_hf_checkpoint",
    "tiny_hooked_from_hf",
    "planted_task",
    "SyntheticOracle",
    "realistic_oracle",
    "PlantedChoiceOracle",
]
