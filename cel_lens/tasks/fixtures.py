"""A data directory made of the shipped fixtures (synthetic rows for the files ``../shared/data``
lacks: HellaSwag, BoolQ train), optionally merged with a real one; loads from fixture files are
flagged in ``Task.options`` and warn (:func:`cel_lens.tasks.io.load_rows`)."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Optional

from cel_lens.tasks.io import FIXTURES_DIR, DataNotFoundError, PathLike

__all__ = ["fixture_data_dir"]


def fixture_data_dir(real_data_dir: Optional[PathLike] = None, dest: Optional[PathLike] = None) -> Path:
    """A data directory with the shipped fixtures, optionally merged with a real one.

    Without arguments: the package's fixture directory (HellaSwag train/val and BoolQ train in the
    hub's schema; synthetic, see its README). With ``real_data_dir`` (e.g. ``../shared/data``):
    a directory (``dest``, default a stable folder under the system temp dir) of symbolic links to
    every file of ``real_data_dir`` plus the fixtures for the paths it lacks, so real files always
    win. Loads from fixture files are flagged in ``Task.options`` and warn.
    """
    if real_data_dir is None and dest is None:
        return FIXTURES_DIR
    files: dict[str, Path] = {
        p.relative_to(FIXTURES_DIR).as_posix(): p
        for p in sorted(FIXTURES_DIR.rglob("*.jsonl"))
    }
    real = None
    if real_data_dir is not None:
        real = Path(real_data_dir).expanduser().resolve()
        if not real.is_dir():
            raise DataNotFoundError(f"data directory {real} does not exist")
        for p in sorted(real.rglob("*")):
            if p.is_file():
                files[p.relative_to(real).as_posix()] = p.resolve()
    if dest is None:
        key = hashlib.sha256(f"{real}|{FIXTURES_DIR}".encode()).hexdigest()[:12]
        dest = Path(tempfile.gettempdir()) / f"cel_lens_data_{key}"
    out = Path(dest)
    for rel, target in files.items():
        link = out / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() and Path(os.readlink(link)) == target:
            continue
        tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
        tmp.unlink(missing_ok=True)
        try:
            os.symlink(target, tmp)
        except OSError:  # no symlinks (e.g. some Windows setups): copy instead
            tmp.write_bytes(target.read_bytes())
        os.replace(tmp, link)
    return out
