"""Progress bars: one helper, so every long loop of cel_lens reports progress the same way."""

from __future__ import annotations

from typing import Any, Iterable, Optional

__all__ = ["progress_bar"]


def progress_bar(
    total: int,
    enabled: bool = True,
    desc: str = "",
    unit: str = "it",
    leave: bool = False,
    iterable: Optional[Iterable[Any]] = None,
) -> Any:
    """A ``tqdm`` bar over ``total`` steps (a widget in Jupyter, text in a terminal); a no-op bar
    when ``enabled`` is False. Use it as a context manager or call ``update``/``close``, or iterate
    over it when ``iterable`` is given."""
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, disable=not enabled, desc=desc, unit=unit, leave=leave)
