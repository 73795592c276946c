"""Reading task data: local files laid out like ``../shared/data``, or the Hugging Face hub.

Every task loader asks :func:`load_rows` for the rows of one split. With a data directory (the
``data_dir`` argument, else the ``CEL_LENS_DATA_DIR`` environment variable) rows come from JSON
Lines files under it and nothing touches the network; without one they come from the hub through
``datasets.load_dataset``. Either way a missing split is one actionable
:class:`DataNotFoundError` that says which file or hub id was looked for and how to provide it.

Each load also returns a *provenance* record (file path, sha256, whether the sha256 is the
officially recorded one, whether the file is a shipped fixture; or hub id, config, split and
fingerprint) that the task puts in ``Task.options`` for run manifests.

Rows remember where they came from (:class:`~cel_lens.tasks.rows.Rows`), so a row that cannot
become an example is one :class:`~cel_lens.tasks.rows.RowError` naming its file and line
(:mod:`cel_lens.tasks.rows`).

Local layout (all UTF-8 JSON Lines)::

    arithmetic/{two_digit_addition,...}.jsonl   GPT-3 raw files: context, completion
    mbpp/mbpp.jsonl                             all 974 problems (full config)
    boolq/dev.jsonl, boolq/train.jsonl          question, title, answer (bool), passage (or SuperGLUE's)
    hellaswag/hellaswag_{train,val}.jsonl       rowanz's raw schema or the hub's (label int or str)
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, TypeVar, Union

from cel_lens.tasks.rows import RowError, Rows, build_examples, require
from cel_lens.tasks.base import dedup_record, drop_same_text

__all__ = [
    "ENV_DATA_DIR",
    "FIXTURES_DIR",
    "OFFICIAL_SHA256",
    "DataNotFoundError",
    "RowError",
    "Rows",
    "require",
    "build_examples",
    "resolve_data_dir",
    "search_dirs",
    "sha256_file",
    "read_jsonl",
    "load_rows",
    "seeded_sample",
    "sample_excluding",
    "check_size",
    "check_unique_ids",
    "train_val_splits",
    "reject_options",
]

ENV_DATA_DIR = "CEL_LENS_DATA_DIR"
FIXTURES_DIR = Path(__file__).resolve().parents[1] / "data" / "fixtures"

# sha256 of the official files, as recorded independently of this project (HF ``dataset_infos.json``
# for MBPP, BoolQ and HellaSwag; lm-evaluation-harness' ``dataset_infos.json`` for Arithmetic).
OFFICIAL_SHA256: dict[str, str] = {
    "arithmetic/two_digit_addition.jsonl": "75a54b7a3db3b23369df74fe440c23025f3d3c51f664300bd3d56632b2617b3d",
    "arithmetic/two_digit_subtraction.jsonl": "da956066ff108c00b341d360567472784f5fd872d6465071b44a14291205bc03",
    "arithmetic/three_digit_addition.jsonl": "124865e30efd2abfbc1855dd34c218fc02d32d780ace970ab9b4ea3fa74c798b",
    "arithmetic/three_digit_subtraction.jsonl": "7fc6aaedcb0e2bd17c398dd4147c5585b1e608278a8e98b914e69656707d6a29",
    "arithmetic/four_digit_addition.jsonl": "459c6f75baa2e8d7cf50bdd07db6d0ca9133a6b137d95d09267db85b6e07f391",
    "arithmetic/four_digit_subtraction.jsonl": "0c47db40a10c052ef0cf732a9ef2edaa53d66377d43eb47a9c382d33a8af7102",
    "arithmetic/five_digit_addition.jsonl": "30ada42efe315b958c6e9649274005d3b720e50298e92c3a2d321f8996e58f54",
    "arithmetic/five_digit_subtraction.jsonl": "8b98ccfc943cbf9193bcf1984954aa0b1a4527016072d972a2b055cc1482ca3c",
    "arithmetic/two_digit_multiplication.jsonl": "5613d1d1cc3b2c03edc1990252247d34c10ec82944b2cdeb19e71b00f237f431",
    "arithmetic/single_digit_three_ops.jsonl": "08b34e3272a8ff1d4932d63f251519d14c485c38d582366e1e323d0b859c3925",
    "mbpp/mbpp.jsonl": "ccf64ceae9c5403bf50a044cb6d505bfd2a2963ee58338ba268fd65beab92a9f",
    "boolq/dev.jsonl": "ebc29ea3808c5c611672384b3de56e83349fe38fc1fe876fd29b674d81d0a80a",
    "boolq/train.jsonl": "cc7a79d44479867e8323a7b0c5c1d82edf516ca34912201f9384c3a3d098d8db",
    "hellaswag/hellaswag_train.jsonl": "dae5e69249868cb9fe4e23ff925c60b66169564cfb7072d793cd7356a2b69f8d",
    "hellaswag/hellaswag_val.jsonl": "0aa3b88843990f3f10a97b9575c94d7b71fb2205240ba04ae4884d9e9c992588",
}

PathLike = Union[str, "os.PathLike[str]"]
T = TypeVar("T")


class DataNotFoundError(FileNotFoundError):
    """A task's split is in neither the data directory nor (reachable on) the hub."""


def search_dirs() -> list[Path]:
    """Where task files are looked for when neither ``data_dir`` nor ``$CEL_LENS_DATA_DIR`` is
    given: ``./data`` and ``../shared/data`` (from the working directory, e.g. the repository
    root), and ``../shared/data`` next to the repository this package was installed from."""
    here, repo = Path.cwd(), Path(__file__).resolve().parents[2]
    return list(dict.fromkeys((here / "data", here.parent / "shared" / "data", repo.parent / "shared" / "data")))


def resolve_data_dir(data_dir: Optional[PathLike], needs: Sequence[str] = ()) -> Optional[Path]:
    """``data_dir`` if given, else ``$CEL_LENS_DATA_DIR`` if set, else the first of
    :func:`search_dirs` that holds every file in ``needs`` (the task's relative paths), else None
    (use the hub). When none holds them all and the hub cannot be reached, the first that holds
    some of them: the load then fails on the file it lacks, naming that folder and that file (not
    the hub, nor a file the folder does hold)."""
    if data_dir is None:
        data_dir = os.environ.get(ENV_DATA_DIR) or None
    if data_dir is None:
        if needs:
            dirs = search_dirs()
            for path in dirs:
                if all((path / relpath).is_file() for relpath in needs):
                    return path
            partial = next((p for p in dirs if any((p / relpath).is_file() for relpath in needs)), None)
            if partial is not None and not _hub_usable():
                return partial
        return None
    path = Path(data_dir).expanduser()
    if not path.is_dir():
        raise DataNotFoundError(f"data directory {path} does not exist (from --data-dir or ${ENV_DATA_DIR})")
    return path


def _hub_usable() -> bool:
    """Whether task rows could come from the hub now (online mode and the hub answers)."""
    from cel_lens.model.hub import hub_offline, hub_reachable  # here: cel_lens.model loads transformer_lens

    return not hub_offline() and hub_reachable()


def sha256_file(path: PathLike) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_jsonl(path: PathLike) -> Rows:
    """Rows of a JSON Lines file (blank lines skipped), with their line numbers (:class:`Rows`); a
    malformed line names its file and line."""
    rows, lines, i = [], [], 0
    with open(path, encoding="utf-8") as f:
        try:
            for i, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise RowError(f"{path}:{i}: not valid JSON ({err.msg})") from None
                lines.append(i)
        except UnicodeDecodeError as err:
            raise RowError(f"{path}:{i + 1}: not UTF-8 text ({err.reason})") from None
    return Rows(rows, str(path), lines)


def _is_fixture(relpath: str, sha256: str) -> bool:
    fixture = FIXTURES_DIR / relpath
    return fixture.is_file() and sha256_file(fixture) == sha256


def load_rows(
    *,
    what: str,
    data_dir: Optional[Path],
    relpath: str,
    hub_id: str,
    hub_split: str,
    hub_config: Optional[str] = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows of one split and their provenance record.

    ``what`` names the split in errors (``"BoolQ train"``); ``relpath`` is its file under a data
    directory; ``hub_id``/``hub_config``/``hub_split`` its place on the hub, used only when
    ``data_dir`` is None.
    """
    if data_dir is not None:
        path = data_dir / relpath
        if not path.is_file():
            raise DataNotFoundError(
                f"{what} not found in {data_dir}: pass --data-dir with {relpath} "
                f"or connect to the Hugging Face hub ({hub_id}) without a data dir"
            )
        digest = sha256_file(path)
        official = OFFICIAL_SHA256.get(relpath)
        fixture = _is_fixture(relpath, digest)
        if fixture:
            warnings.warn(
                f"{what} comes from the test fixture {relpath} (synthetic rows, not the real data set)",
                UserWarning,
                stacklevel=3,
            )
        record = {
            "split": what,
            "kind": "file",
            "path": relpath,
            "data_dir": str(data_dir),
            "sha256": digest,
            "official": None if official is None else digest == official,
            "fixture": fixture,
        }
        return read_jsonl(path), record
    return _hub_rows(what=what, relpath=relpath, hub_id=hub_id, hub_config=hub_config, hub_split=hub_split)


def _hub_rows(
    *, what: str, relpath: str, hub_id: str, hub_config: Optional[str], hub_split: str
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    hint = (
        f"{what} not found: pass --data-dir DIR (or set ${ENV_DATA_DIR}) with {relpath}, "
        f"or connect to the Hugging Face hub ({hub_id})"
    )
    from cel_lens.model.hub import hub_offline, hub_reachable  # here: cel_lens.model loads transformer_lens

    if not hub_offline() and not hub_reachable():  # fail at once, not after the hub client's retries
        raise DataNotFoundError(f"{hint}; the hub is not reachable, and {', '.join(map(str, search_dirs()))} lack it")
    try:
        import datasets
    except ImportError as err:  # pragma: no cover - datasets is a dependency
        raise DataNotFoundError(f"{hint}; the 'datasets' package is not installed ({err})") from None
    try:
        ds = datasets.load_dataset(hub_id, hub_config, split=hub_split)
    except Exception as err:  # noqa: BLE001 - any hub failure becomes one actionable error
        detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise DataNotFoundError(f"{hint} ({type(err).__name__}: {detail})") from err
    record = {
        "split": what,
        "kind": "hub",
        "hub_id": hub_id,
        "config": hub_config,
        "hub_split": hub_split,
        "fingerprint": getattr(ds, "_fingerprint", None),
        "fixture": False,
    }
    return Rows((dict(r) for r in ds), f"{hub_id} {hub_split}"), record


def seeded_sample(rows: Sequence[T], n: int, seed: int, salt: str) -> list[T]:
    """``n`` rows drawn without replacement, in a seeded random order.

    ``salt`` (e.g. ``"boolq/dist"``) gives each split its own stream, so changing one split's size
    never reshuffles another. String seeds are hashed with sha512 by ``random``, so the draw is the
    same in every process and Python version.
    """
    order = list(range(len(rows)))
    random.Random(f"cel_lens/{salt}/{seed}").shuffle(order)
    return [rows[i] for i in order[:n]]


def sample_excluding(
    pool: Sequence[Any],
    n: Optional[int],
    default: int,
    seed: int,
    salt: str,
    exclude: Iterable[str],
    what: str,
    source: str,
    *,
    same_text_as: Sequence[Any] = (),
) -> tuple[list[Any], int, list[tuple[str, str]]]:
    """Seeded sample of ``n`` examples (``default`` if None) from ``pool``, skipping any whose
    content hash is in ``exclude`` (the test split) and any worded like an example of
    ``same_text_as`` (the test split again: same normalised prompt text,
    :func:`~cel_lens.tasks.base.drop_same_text`), so that D_dist drawn from a training split is
    disjoint from D_test by construction. Returns the sample, how many pool rows were equal to a
    test row, and the ``(removed id, test twin id)`` pairs of the others left out.
    """
    banned = set(exclude)
    eligible = [e for e in pool if e.content_hash not in banned]
    skipped = len(pool) - len(eligible)
    eligible, same_text = drop_same_text(eligible, same_text_as)
    left_out = [f"{skipped} rows equal to test rows"] * bool(skipped)
    left_out += [f"{len(same_text)} worded like a test row"] * bool(same_text)
    note = f" after leaving out {' and '.join(left_out)}" if left_out else ""
    n = check_size(n, default, len(eligible), what, source, note)
    return seeded_sample(eligible, n, seed, salt), skipped, same_text


def check_size(n: Optional[int], default: int, available: int, what: str, source: str, note: str = "") -> int:
    """The number of examples to draw: ``n`` (``default`` if None), checked against ``available``."""
    n = default if n is None else n
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"{what}: size must be a non-negative integer, got {n!r}")
    if n > available:
        raise ValueError(f"asked for {n} {what} examples but {source} has {available}{note}")
    return n


def reject_options(task: str, options: Mapping[str, Any]) -> None:
    """Raise ValueError naming any loader option a task does not know (never ignore one silently)."""
    if options:
        raise ValueError(f"{task}: unknown option(s) {', '.join(sorted(options))}")


def check_unique_ids(examples: Iterable[Any], task: str) -> None:
    """Raise ValueError if two examples of a task (both splits together) share an id."""
    seen: set[str] = set()
    dupes = []
    for e in examples:
        if e.id in seen:
            dupes.append(e.id)
        seen.add(e.id)
    if dupes:
        raise ValueError(f"{task}: duplicate example ids: {', '.join(dupes[:5])}")


def train_val_splits(
    *,
    task: str,
    label: str,
    data_dir: Optional[PathLike],
    hub_id: str,
    val_relpath: str,
    train_relpath: str,
    val_name: str,
    make_example: Callable[[Mapping[str, Any], str, int], Any],
    n_dist: Optional[int],
    n_test: Optional[int],
    n_dist_default: int,
    seed: int,
    hub_config: Optional[str] = None,
    splits: Sequence[str] = ("dist", "test"),
) -> tuple[list[Any], list[Any], dict[str, Any]]:
    """D_dist sampled from a train split and D_test = the validation split (HellaSwag, BoolQ).

    D_test is the whole validation split (a seeded sample if ``n_test`` is smaller); D_dist is a
    seeded sample of ``n_dist`` (default ``n_dist_default``) train rows, never one equal to a
    validation row, nor one with a validation row's normalised prompt text (those are recorded in
    the options' ``deduplication`` entry when there are any). Returns both and the options to
    record (seed, sizes, sources). ``hub_config``: the hub dataset's configuration, if it has several.
    ``splits=("test",)`` reads the validation rows alone and returns no D_dist (the
    train file is not needed); the validation rows are read either way, since D_dist is defined by
    what it must not share with them. D_test is the same whichever splits are asked for.
    """
    root = resolve_data_dir(data_dir, needs=(val_relpath, train_relpath) if "dist" in splits else (val_relpath,))
    val_rows, val_src = load_rows(
        what=f"{label} validation", data_dir=root, relpath=val_relpath, hub_id=hub_id, hub_split="validation",
        hub_config=hub_config,
    )
    val = build_examples(val_rows, lambda r, i: make_example(r, val_name, i))
    val_where = f"{label} validation ({val_src.get('path', hub_id)})"
    n_t = check_size(n_test, len(val), len(val), f"{label} D_test", val_where)
    test = seeded_sample(val, n_t, seed, f"{task}/test")
    if "dist" not in splits:
        return [], test, {"seed": seed, "n_dist": 0, "n_test": n_t, "sources": [val_src], "splits": ["test"]}
    train_rows, train_src = load_rows(
        what=f"{label} train", data_dir=root, relpath=train_relpath, hub_id=hub_id, hub_split="train",
        hub_config=hub_config,
    )
    train = build_examples(train_rows, lambda r, i: make_example(r, "train", i))
    train_where = f"{label} train ({train_src.get('path', hub_id)})"
    banned = (e.content_hash for e in val)
    dist, skipped, same_text = sample_excluding(
        train, n_dist, n_dist_default, seed, f"{task}/dist", banned, f"{label} D_dist", train_where, same_text_as=val
    )
    check_unique_ids([*dist, *test], task)
    options = {
        "seed": seed,
        "n_dist": len(dist),
        "n_test": n_t,
        "train_rows_equal_to_test": skipped,
        "sources": [val_src, train_src],
    }
    if same_text:
        options["deduplication"] = dedup_record(same_text)
    return dist, test, options
