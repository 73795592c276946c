"""Whether a prompt starts with a BOS token: the tokenizer's own rule, as lm-evaluation-harness, or an override.

lm-eval's ``HFLM`` encodes text with the tokenizer's special tokens on (``tokenizer.encode(text)``),
so a prompt starts with BOS exactly where the checkpoint's tokenizer adds one itself (Llama-3,
SmolLM3, ...), and not where the tokenizer defines a BOS token but does not add it (GPT-2/Pythia
style) or has none (Qwen2.5). Text that already starts with the BOS token (a chat template that
writes it) gets no second one. That is the default rule here, ``"tokenizer"``; ``"always"``
(lm-eval's ``add_bos_token=True``) and ``"never"`` override it (:data:`BOS_RULES`).

TransformerLens reloads a model's tokenizer with ``add_bos_token=True`` and names EOS as BOS where
there is none, so ``model.tokenizer`` no longer shows the checkpoint's rule: it is read from the
checkpoint's own tokenizer (:func:`read_bos`) when the model is loaded, or, for a model built
elsewhere, from the tokenizer files ``model.tokenizer`` was loaded from. The rule and what it
resolved to are kept with the model (:func:`bos_rule`) and recorded in run manifests with the
model's identity, since they change every token id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from cel_lens.config import BOS_RULES

__all__ = ["BOS_RULES", "BosRule", "TOKENIZER_BOS", "ALWAYS_BOS", "NEVER_BOS", "check_bos_rule", "read_bos", "set_bos_rule", "bos_rule", "bos_prefix", "prompt_ids"]




@dataclass(frozen=True)
class BosRule:
    """How prompts start (an entry of :data:`~cel_lens.config.BOS_RULES`): with BOS ``always``,
    never, or (``follows_tokenizer``) where the checkpoint's tokenizer adds it."""

    name: str
    always: bool = False
    follows_tokenizer: bool = False

    def prepends(self, facts: Mapping[str, Any]) -> bool:
        """Whether a prompt gets BOS, given the tokenizer's facts (:func:`read_bos`)."""
        return bool(facts["tokenizer_adds_bos"]) if self.follows_tokenizer else self.always


TOKENIZER_BOS = BosRule("tokenizer", follows_tokenizer=True)
"""BOS where the checkpoint's tokenizer adds it (lm-eval's default)."""
ALWAYS_BOS = BosRule("always", always=True)
"""BOS before every prompt (lm-eval's ``add_bos_token=True``)."""
NEVER_BOS = BosRule("never")
"""No BOS (unless the text itself starts with one)."""

_KEY = "_cel_lens_bos"
_PROBE = "a"


def check_bos_rule(rule: Any) -> str:
    """``rule`` if it is one of :data:`BOS_RULES`; ``ValueError`` naming them otherwise."""
    if rule not in BOS_RULES:
        raise ValueError(f"unknown bos rule {rule!r}: expected one of {', '.join(BOS_RULES)}")
    return str(rule)


def read_bos(tokenizer: Any) -> dict[str, Any]:
    """A tokenizer's BOS token id and whether its encode with special tokens puts it first
    (``{"bos_token_id": int | None, "tokenizer_adds_bos": bool}``). Read it before TransformerLens
    wraps the tokenizer (see the module docstring)."""
    bos = getattr(tokenizer, "bos_token_id", None) if tokenizer is not None else None
    if bos is None:
        return {"bos_token_id": None, "tokenizer_adds_bos": False}
    special = list(tokenizer(_PROBE, add_special_tokens=True)["input_ids"])
    plain = list(tokenizer(_PROBE, add_special_tokens=False)["input_ids"])
    return {"bos_token_id": int(bos), "tokenizer_adds_bos": special[:1] == [int(bos)] and plain[:1] != [int(bos)]}


def _own_tokenizer(model: Any) -> Any:
    """The tokenizer ``model.tokenizer`` was loaded from, reloaded from its files (local only);
    ``model.tokenizer`` itself when those cannot be read."""
    tok = getattr(model, "tokenizer", None)
    source = str(getattr(tok, "name_or_path", "") or "")
    if tok is None or not source:
        return tok
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(source, local_files_only=True)
    except Exception:  # noqa: BLE001 - files gone or not a tokenizer: the model's copy is all there is
        return tok


def set_bos_rule(model: Any, rule: str = "tokenizer", own: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """Fix how ``model``'s prompts start and return the record kept with it: ``rule``, the
    tokenizer's own behaviour (``own``, from :func:`read_bos`; default: read from the tokenizer's
    files) and what they resolve to (``prepends_bos``, ``bos_token_id``)."""
    entry: BosRule = BOS_RULES.resolve(check_bos_rule(rule))
    facts = dict(own) if own is not None else read_bos(_own_tokenizer(model))
    if entry.always and facts["bos_token_id"] is None:
        raise ValueError(f"bos={rule!r} but the model's tokenizer has no BOS token")
    prepends = entry.prepends(facts)
    record = {
        "rule": rule,
        "tokenizer_adds_bos": bool(facts["tokenizer_adds_bos"]),
        "prepends_bos": prepends,
        "bos_token_id": facts["bos_token_id"] if prepends else None,
    }
    model.__dict__[_KEY] = record
    return dict(record)


def bos_rule(model: Any) -> dict[str, Any]:
    """The BOS record of ``model`` (see :func:`set_bos_rule`); a model that has none gets the
    default rule, ``"tokenizer"``, read once from its tokenizer's files."""
    record = model.__dict__.get(_KEY)
    if record is None:
        return set_bos_rule(model)
    return dict(record)


def bos_prefix(model: Any, text: str) -> list[int]:
    """``[bos]`` when ``model``'s BOS rule prepends one and ``text`` (e.g. a chat template) does not
    already start with it (lm-eval's ``has_bos_prefix``), else ``[]``."""
    rule = bos_rule(model)
    if not rule["prepends_bos"]:
        return []
    bos = int(rule["bos_token_id"])
    written = model.tokenizer.decode([bos])
    return [] if written and text.startswith(written) else [bos]


def prompt_ids(model: Any, text: str) -> list[int]:
    """Token ids of a prompt as cel_lens reads it: :func:`bos_prefix`, then the text's own tokens
    (no other special tokens). The one encoding of a prompt for every caller."""
    return bos_prefix(model, text) + list(model.tokenizer(text, add_special_tokens=False)["input_ids"])
