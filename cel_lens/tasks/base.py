"""Examples, splits and tasks: stable ids, content hashes, disjoint seeded splits.

A task has an *answer type* (:data:`AnswerType`, ``Task.answer_type``) that fixes how it is scored
(see :mod:`cel_lens.evaluation`):

* ``"exact_match"``: ``Example.target`` is the continuation; correct iff every target token is the
  greedy argmax given the prompt (teacher-forced, one forward pass).
* ``"multiple_choice"``: ``Example.choices`` are continuations of a shared prompt and
  ``Example.label`` the correct index; the choice with the highest (normalised) log-likelihood wins.
* ``"generation"``: greedy generation from the prompt, judged by ``Task.judge`` (MBPP: run the
  generated code against the problem's tests in the sandbox). A generation task says how long to
  generate and where to stop in its options: ``options["max_new_tokens"]`` and ``options["stop"]``
  (an example may override the stop strings with ``meta["stop"]``); see :meth:`Split.stop_strings`.

A :class:`Task` holds its discovery split ``dist`` (D_dist) and test split ``test`` (D_test),
disjoint by content hash and by normalised prompt text (:attr:`Example.dedup_key`: two problems
worded the same are one problem, whatever their tests or answers), checked whenever a task is
built. Loaders drop D_dist candidates that share a D_test problem's text (:func:`drop_same_text`)
and record what they removed in ``Task.options["deduplication"]`` (:func:`dedup_record`).

Splits and tasks are built with ``answer_type=``; records written when it was called ``kind`` load
through :func:`current_names`, the one reader of former names (no alias lives on a class).
"""

from __future__ import annotations

import hashlib
import json
import random
import unicodedata
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Literal, Mapping, Optional, Sequence, TypeVar, overload

from cel_lens.splits import parse_subsplit, subsplit_indices
from cel_lens.tasks.answer_types import answer_type_entry

__all__ = [
    "Example",
    "Split",
    "Task",
    "TaskSpec",
    "AnswerType",
    "SplitOverlapError",
    "check_disjoint",
    "sample_disjoint",
    "without_avoided",
    "FORMER_NAMES",
    "current_names",
    "normalise_text",
    "drop_same_text",
    "dedup_record",
]

AnswerType = Literal["exact_match", "multiple_choice", "generation"]
"""How a task is scored: the argmax answer matched exactly, the best-scoring choice, or generated text judged."""


FORMER_NAMES: dict[str, str] = {"kind": "answer_type"}
"""Former key -> current key in records that describe a task's protocol (a manifest's ``task``
entry, task infos, evaluation files, calibration records): written before the rename, they say
``kind``. :func:`current_names` reads them with the current keys."""


def current_names(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` with its former keys (:data:`FORMER_NAMES`) under their current names, where the
    current one is absent (key order kept); a record with the current names comes back equal."""
    renamed = {old: new for old, new in FORMER_NAMES.items() if old in record and new not in record}
    return {renamed.get(k, k): v for k, v in record.items()}


def _short(text: Optional[str], width: int = 60) -> str:
    """``text`` on one line, cut to ``width`` characters (for summaries)."""
    one = " ".join(str(text).split()) if text is not None else ""
    return one if len(one) <= width else one[: width - 1] + "…"


def _answer(e: "Example") -> str:
    if e.target is not None:
        return e.target
    if e.choices and e.label is not None:
        return f"{e.choices[e.label]} ({e.label + 1} of {len(e.choices)})"
    return ""


def _examples_html(examples: Sequence["Example"], n: int = 3) -> str:
    """The first ``n`` examples as an HTML table (escaped, one line each)."""
    import html

    rows = "".join(
        f"<tr><td>{html.escape(e.id)}</td><td style='text-align:left'>{html.escape(_short(e.prompt, 80))}</td>"
        f"<td style='text-align:left'>{html.escape(_short(_answer(e), 40))}</td></tr>"
        for e in list(examples)[:n]
    )
    return f"<table><tr><th>id</th><th>prompt</th><th>answer</th></tr>{rows}</table>" if rows else ""


@dataclass(frozen=True)
class Example:
    """One task example.

    ``id`` is stable across loads (e.g. ``"arithmetic/2da/17"``); ``prompt`` is the context fed to
    the model; ``target`` the exact-match continuation (with its leading space); ``choices`` and
    ``label`` the multiple-choice continuations and correct index; ``meta`` anything else the task
    needs (the arithmetic config, MBPP's tests), excluded from equality and hashing. A task whose
    prompt wraps the problem in a template that differs per example (MBPP: few-shot prefix, then the
    problem's text and its own tests) puts the bare problem statement in ``meta["text"]``: that is
    what :attr:`dedup_key` compares.
    """

    id: str
    prompt: str
    target: Optional[str] = None
    choices: tuple[str, ...] = ()
    label: Optional[int] = None
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def content_hash(self) -> str:
        """sha256 of the example's content (prompt, target, choices, label), not of its id: two
        rows with the same content collide, which is what the disjointness check must catch."""
        payload = json.dumps([self.prompt, self.target, list(self.choices), self.label], ensure_ascii=False)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    @property
    def dedup_key(self) -> str:
        """The normalised problem text (:func:`normalise_text` of ``meta["text"]`` if the task gives
        one, else of the prompt): examples with the same key are the same problem, so they may not
        sit in both splits."""
        return normalise_text(self.meta.get("text") or self.prompt)


def normalise_text(text: str) -> str:
    """``text`` as compared for duplicates: Unicode NFKC, case-folded, runs of whitespace made one
    space, stripped."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


@dataclass(frozen=True)
class Split(Sequence[Example]):
    """An ordered, immutable sequence of examples: D_dist (``name="dist"``) or D_test (``"test"``).

    ``answer_type``, ``metric`` and ``judge`` are the owning task's protocol (filled in by
    :class:`Task`), so that a split alone is enough to evaluate.
    """

    name: str
    examples: tuple[Example, ...]
    task: str = ""
    answer_type: Optional[AnswerType] = None
    metric: str = "acc"
    judge: Optional[Callable[[Example, str], bool]] = field(default=None, compare=False, repr=False)
    # the owning task's options (chat template, stop strings, sources, ...): evaluation reads them
    options: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __len__(self) -> int:
        return len(self.examples)

    @overload
    def __getitem__(self, i: int) -> Example: ...

    @overload
    def __getitem__(self, i: slice) -> "Split": ...

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return replace(self, examples=self.examples[i])
        return self.examples[i]

    def __iter__(self) -> Iterator[Example]:
        return iter(self.examples)

    @property
    def ids(self) -> list[str]:
        """Example ids, in order."""
        return [e.id for e in self.examples]

    @property
    def content_hash(self) -> str:
        """sha256 over the ordered example content hashes: identifies the split in a run manifest."""
        h = hashlib.sha256()
        for e in self.examples:
            h.update(e.content_hash.encode())
        return h.hexdigest()

    @property
    def max_new_tokens(self) -> Optional[int]:
        """A generation task's token budget (``options["max_new_tokens"]``), or ``None``."""
        value = self.options.get("max_new_tokens")
        return None if value is None else int(value)

    def stop_strings(self, example: Example) -> tuple[str, ...]:
        """Where generation for ``example`` stops (besides EOS): ``example.meta["stop"]`` if given,
        else the task's ``options["stop"]``, else nowhere."""
        stop = example.meta.get("stop")
        if stop is None:
            stop = self.options.get("stop") or ()
        return tuple(stop)

    def subset(self, n: int) -> "Split":
        """The first ``n`` examples (splits are already shuffled by their seed)."""
        return replace(self, examples=self.examples[:n])

    def __repr__(self) -> str:
        """One line: the split's name, task, size and protocol (not its examples)."""
        owner = f" of {self.task!r}" if self.task else ""
        return f"<Split {self.name!r}{owner}: {len(self)} examples, {self.answer_type or 'answer type unset'}, {self.metric}>"

    def _repr_html_(self) -> str:
        """A short summary for notebooks: the one-line description and the first examples."""
        import html

        return f"<p><code>{html.escape(repr(self))}</code></p>{_examples_html(self.examples)}"


@dataclass(frozen=True)
class Task:
    """A task with its two splits and its protocol.

    ``metric`` names the headline metric (``"acc"``, ``"acc_norm"``, ``"pass@1"``); ``judge`` scores
    a generated completion for ``"generation"`` tasks; ``options`` records how the task was
    loaded (sizes, seed, sources, chat template) for run manifests. ``answer_type`` says how it is
    scored (:data:`AnswerType`).
    """

    name: str
    answer_type: AnswerType
    dist: Split
    test: Split
    metric: str = "acc"
    judge: Optional[Callable[[Example, str], bool]] = field(default=None, compare=False)
    options: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        answer_type_entry(self.answer_type)  # an unknown answer type fails here, naming the registered ones
        check_disjoint(self.dist, self.test)
        for attr, name in (("dist", "dist"), ("test", "test")):
            split = getattr(self, attr)
            split = split if isinstance(split, Split) else Split(name, tuple(split))
            split = replace(
                split, task=self.name, answer_type=self.answer_type, metric=self.metric, judge=self.judge, options=self.options
            )
            object.__setattr__(self, attr, split)

    def split(self, name: str) -> Split:
        """``"dist"`` or ``"test"``, or a subsplit of D_dist (:func:`cel_lens.oracle.subsplit`:
        its examples, named ``"dist"``, in the subsplit's order)."""
        if parse_subsplit(name) is not None:
            idx = subsplit_indices(name, len(self.dist)).tolist()
            return replace(self.dist, examples=tuple(self.dist.examples[i] for i in idx))
        if name not in ("dist", "test"):
            raise ValueError(f"unknown split {name!r}: expected 'dist' or 'test'")
        return self.dist if name == "dist" else self.test

    def __repr__(self) -> str:
        """One line: name, protocol and split sizes (not the examples)."""
        return f"<Task {self.name!r}: {self.answer_type}, {self.metric}, dist {len(self.dist)} / test {len(self.test)} examples>"

    def _repr_html_(self) -> str:
        """A short summary for notebooks: protocol, sizes, where the data came from, first examples."""
        import html

        sources = {k: v for k, v in self.options.items() if isinstance(v, (str, int, float, bool)) and k != "seed"}
        seed = self.options.get("seed")
        details = ", ".join(f"{k}={_short(str(v), 40)}" for k, v in list(sources.items())[:6])
        return (
            f"<p><b>Task {html.escape(self.name)}</b>: {self.answer_type}, metric {html.escape(self.metric)}; "
            f"D_dist {len(self.dist)} / D_test {len(self.test)} examples (disjoint"
            f"{'' if seed is None else f', seed {html.escape(str(seed))}'})</p>"
            + (f"<p><small>{html.escape(details)}</small></p>" if details else "")
            + _examples_html(self.dist)
        )


@dataclass(frozen=True)
class TaskSpec:
    """What a task module registers: its loader, ``fn(n_dist, n_test, seed, data_dir, **options) ->
    Task``, and its ``info`` (answer type, metric, default sizes, sources, files: what listings and
    option checks read without loading). A task registry entry names one (``"module:SPEC"``)."""

    loader: Callable[..., "Task"]
    info: Mapping[str, Any] = field(default_factory=dict)


class SplitOverlapError(ValueError):
    """D_dist and D_test share examples (by content hash or by normalised prompt text)."""


def check_disjoint(dist: Sequence[Example], test: Sequence[Example]) -> None:
    """Raise :class:`SplitOverlapError` if any example content, or any normalised problem text
    (:attr:`Example.dedup_key`), occurs in both splits."""
    for what, key in (("content hash", lambda e: e.content_hash), ("normalised prompt text", lambda e: e.dedup_key)):
        seen = {key(e): e.id for e in dist}
        clashes = [(seen[key(e)], e.id) for e in test if key(e) in seen]
        if clashes:
            shown = ", ".join(f"{a}={b}" for a, b in clashes[:5])
            raise SplitOverlapError(f"discovery and test splits share {len(clashes)} example(s) by {what}: {shown}")


def drop_same_text(
    pool: Sequence[Example], reference: Sequence[Example]
) -> tuple[list[Example], list[tuple[str, str]]]:
    """``pool`` without the examples whose normalised problem text (:attr:`Example.dedup_key`)
    occurs in ``reference`` (the test split), and the ``(removed id, its twin's id)`` pairs."""
    twins = {e.dedup_key: e.id for e in reference}
    kept = [e for e in pool if e.dedup_key not in twins]
    removed = [(e.id, twins[e.dedup_key]) for e in pool if e.dedup_key in twins]
    return kept, removed


def dedup_record(removed: Sequence[tuple[str, str]], limit: int = 50) -> dict[str, Any]:
    """What ``Task.options["deduplication"]`` records: the key, how many examples were removed
    and (up to ``limit``) which, each with the twin it duplicates. Loaders add it only when
    something was removed, so tasks without duplicates keep the identity they had."""
    return {
        "key": "normalised prompt text (NFKC, case-folded, whitespace collapsed; MBPP: the problem text)",
        "removed": len(removed),
        "pairs": [list(pair) for pair in removed[:limit]],
    }


T = TypeVar("T")


def without_avoided(rows: Sequence[T], avoid: frozenset) -> list[T]:
    """``rows`` less those whose ``id`` or ``content_hash`` is in ``avoid`` (:mod:`cel_lens.tasks.avoid`)."""
    if not avoid:
        return list(rows)
    return [r for r in rows if r.id not in avoid and r.content_hash not in avoid]


def sample_disjoint(
    pool: Sequence[Example], n_dist: int, n_test: int, seed: int, avoid: frozenset = frozenset()
) -> tuple[list[Example], list[Example]]:
    """Seeded draw of two disjoint samples from one pool (e.g. Arithmetic's validation rows).

    Duplicated problems in the pool (same normalised prompt text, :attr:`Example.dedup_key`, which
    covers equal contents) are dropped first, keeping the first occurrence, so the two samples are
    disjoint by text, not only by row. D_test skips rows whose id or content hash is in ``avoid``
    (:mod:`cel_lens.tasks.avoid`); D_dist is the same draw with or without it.
    """
    unique: dict[str, Example] = {}
    for e in pool:
        unique.setdefault(e.dedup_key, e)
    rows = list(unique.values())
    if n_dist + n_test > len(rows):
        raise ValueError(f"asked for {n_dist} + {n_test} examples but the pool has {len(rows)} distinct rows")
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    rest = without_avoided([rows[i] for i in order[n_dist:]], avoid)
    if n_test > len(rest):
        raise ValueError(f"asked for {n_test} test examples but {len(rest)} rows are left after D_dist and the avoid list")
    return [rows[i] for i in order[:n_dist]], rest[:n_test]
