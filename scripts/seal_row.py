"""Run one row of docs/real_model.md so that git history shows its configuration fixed before D_test.

    python scripts/seal_row.py results/smollm2-135m/arithmetic-plain --run-dir runs/rows/arithmetic-plain \\
        -- cel-lens search --model smollm2-135m --task arithmetic ... --out runs/rows/arithmetic-plain

The order, by construction:

1. The search starts in the background (its output goes to ``<run dir>.log``).
2. As soon as it has written ``manifest.json`` (it does when it opens its run directory, before its
   first forward pass) the search is stopped (``SIGSTOP``); the script checks that its journal holds
   no evaluation of the test split, copies the manifest into the row folder and commits it alone.
   Then the search continues (``SIGCONT``).
3. When the search exits with ``result.json``, that file is copied beside the manifest and committed.

``--seal-only`` stops after step 2 (the search is killed; its run directory resumes): a row's
configuration can be committed long before there is time to run it. Run again with the same
command it resumes the search (cel_lens run directories resume) and commits
nothing twice: a row whose committed manifest equals the run's is not sealed again, a different one is
refused. ``--finish`` only copies and commits a finished run's ``result.json`` (a search resumed
elsewhere).

A row can take longer than a machine lasts. ``--park`` commits an unfinished run's manifest and
journal (gzipped) and this machine's test-split ledger under ``ROW/parked/``; on another machine the
same search command first restores them (the run directory from the parked files, the ledger's lines
merged into the local ledger, so the reads made elsewhere still count against the seal) and resumes
where the parked journal ends. The commit of ``result.json`` removes ``parked/``.

The journal is committed only while parked, the log never (a pre-screened row's ``prescreen``
event is, as ``prescreen.json``: the first pass's score of every head). ``scripts/real_model_rows.py``
reads the row folder and checks the same order from git history and the test-split ledger's verdict.
"""

from __future__ import annotations

import fcntl
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

TEST_EVAL = re.compile(r'"split":\s*"test"')
IDENTITY = ("model", "task", "splits", "options", "examples")
"""The manifest entries that make a row what it is (a run directory compares these; the search adds
``test_seal`` and ``precision`` entries as it goes, and package versions may differ on a resume)."""


def same_row(a: Path, b: Path) -> bool:
    """Whether two manifests describe the same row (:data:`IDENTITY`), former key names read as the
    current ones (a row sealed before a rename still resumes)."""
    from cel_lens.runs.manifest import upgrade_manifest

    x, y = (upgrade_manifest(json.loads(f.read_text())) for f in (a, b))
    return all(x.get(k) == y.get(k) for k in IDENTITY)


def log(message: str) -> None:
    print(f"seal_row {time.strftime('%H:%M:%S', time.gmtime())} UTC: {message}", flush=True)


def git(args: Sequence[str], cwd: Path, tries: int = 24) -> str:
    """Run git, waiting out another writer's ``index.lock``; raise with its output on failure."""
    for _ in range(tries):
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
        if out.returncode == 0:
            return out.stdout
        if "index.lock" not in out.stderr:
            raise RuntimeError(f"git {' '.join(args)}: {out.stderr.strip()}")
        time.sleep(5)
    raise RuntimeError(f"git {' '.join(args)}: index.lock held for {5 * tries} s")


def commit(paths: Sequence[Path], message: str) -> str:
    """Add and commit ``paths`` alone (other files of the tree untouched); the new commit's sha."""
    root = Path(git(["rev-parse", "--show-toplevel"], paths[0].parent).strip())
    rel = [str(p.resolve().relative_to(root)) for p in paths]
    git(["add", "-A", "--", *rel], root)  # -A: a removed path (a parked run) is committed as removed
    git(["commit", "-m", message, "--", *rel], root)
    return git(["rev-parse", "HEAD"], root).strip()


def test_reads_in_journal(run_dir: Path) -> int:
    """Lines of the run's journal that evaluated the test split (0 before D_test is read)."""
    journal = run_dir / "evaluations.jsonl"
    return len(TEST_EVAL.findall(journal.read_text(errors="replace"))) if journal.exists() else 0


def seal_manifest(row: Path, run_dir: Path, label: str) -> Optional[str]:
    """Copy and commit the run's manifest (the search is stopped meanwhile); ``None`` when the same
    manifest was committed before (a resumed run). Refuses a different manifest, or a journal
    that already holds a test-split evaluation."""
    source, target = run_dir / "manifest.json", row / "manifest.json"
    if target.exists():
        if same_row(source, target):
            log(f"{target} already holds this row's manifest: not sealed again")
            return None
        raise RuntimeError(f"{target} holds another configuration's manifest: use a new row folder")
    reads = test_reads_in_journal(run_dir)
    if reads:
        raise RuntimeError(f"{run_dir} already evaluated D_test ({reads} journal lines): it cannot be sealed now")
    row.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    sha = commit([target], f"Real-model row {label}: its manifest (configuration, split seed, D_test content hash) "
                         "committed before the search reads D_test")
    log(f"manifest committed as {sha[:10]}, before any read of D_test")
    return sha


def prescreen_record(run_dir: Path) -> Optional[dict]:
    """The journal's ``prescreen`` event (the first pass's score of every head, the heads kept for the
    exact scan), without its checksum: a pre-screened row's record of what it screened out."""
    journal = run_dir / "evaluations.jsonl"
    if not journal.exists():
        return None
    for line in journal.read_text(errors="replace").splitlines():
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if obj.get("type") == "event" and obj.get("event") == "prescreen":
            return {k: v for k, v in obj.items() if k not in ("type", "check", "crc", "checksum")}
    return None


def commit_result(row: Path, run_dir: Path, label: str) -> str:
    """Copy and commit a finished run's ``result.json`` beside its committed manifest, and the run's
    final manifest over it (the same row, with the entries the search added: the seal's verdict, the
    precision record); the commit that first added the manifest stays the seal in history."""
    manifest, result = row / "manifest.json", run_dir / "result.json"
    if not manifest.exists() or not same_row(run_dir / "manifest.json", manifest):
        raise RuntimeError(f"{manifest} is missing or differs from {run_dir}'s: the row was not sealed by this run")
    if not result.exists():
        raise RuntimeError(f"{run_dir} has no result.json: the search has not finished")
    shutil.copyfile(result, row / "result.json")
    shutil.copyfile(run_dir / "manifest.json", manifest)
    files = [row / "result.json", manifest]
    if (row / PARKED).exists():
        shutil.rmtree(row / PARKED)
        files.append(row / PARKED)
    screen = prescreen_record(run_dir)
    if screen is not None:
        (row / "prescreen.json").write_text(json.dumps(screen, indent=1) + "\n")
        files.append(row / "prescreen.json")
    sha = commit(files,
                 f"Real-model row {label}: its result (and the run's final manifest), after the manifest sealed before D_test")
    log(f"result committed as {sha[:10]}")
    return sha


PARKED = "parked"
"""The row folder's subfolder that holds an unfinished run (:func:`park`)."""


def _complete_lines(data: bytes) -> bytes:
    """``data`` up to its last newline (a journal copied while its search appends)."""
    return data[: data.rfind(b"\n") + 1]


def park(row: Path, run_dir: Path, label: str) -> str:
    """Commit an unfinished run under ``row/parked/``: its manifest, its journal (gzipped, whole lines
    only) and every file of this machine's test-split ledger, so that another machine resumes it
    (:func:`restore`) with the reads made here. The search may keep running meanwhile."""
    from cel_lens.evaluation.seal import ledger_dir

    manifest, journal = run_dir / "manifest.json", run_dir / "evaluations.jsonl"
    if (run_dir / "result.json").exists():
        raise RuntimeError(f"{run_dir} has finished: commit its result (--finish) instead of parking it")
    if not (row / "manifest.json").exists() or not manifest.exists() or not same_row(manifest, row / "manifest.json"):
        raise RuntimeError(f"{run_dir} is not the run sealed in {row}: nothing parked")
    target = row / PARKED
    shutil.rmtree(target, ignore_errors=True)
    (target / "ledger").mkdir(parents=True)
    shutil.copyfile(manifest, target / "manifest.json")
    lines = _complete_lines(journal.read_bytes()) if journal.exists() else b""
    (target / "evaluations.jsonl.gz").write_bytes(gzip.compress(lines, mtime=0))
    for f in sorted(ledger_dir().glob("*.jsonl")) if ledger_dir().is_dir() else []:
        (target / "ledger" / f"{f.name}.gz").write_bytes(gzip.compress(_complete_lines(f.read_bytes()), mtime=0))
    n = lines.count(b"\n")
    sha = commit([target], f"Real-model row {label}: parked unfinished ({n} journal lines), so that another machine resumes it")
    log(f"parked as {sha[:10]}: {n} journal lines")
    return sha


def restore(row: Path, run_dir: Path) -> bool:
    """Recreate ``run_dir`` from ``row/parked/`` when it does not exist here, and merge the parked
    ledger's lines into this machine's ledger (lines already present are not added again); whether
    the run directory was restored."""
    from cel_lens.evaluation.seal import ledger_dir

    parked = row / PARKED
    if not parked.is_dir():
        return False
    for f in sorted((parked / "ledger").glob("*.jsonl.gz")):
        local = ledger_dir() / f.name[: -len(".gz")]
        local.parent.mkdir(parents=True, exist_ok=True)
        with open(local, "a+b") as out:
            fcntl.flock(out.fileno(), fcntl.LOCK_EX)  # as the ledger's writers do
            out.seek(0)
            old = out.read()
            have = set(old.splitlines())
            new = [line for line in gzip.decompress(f.read_bytes()).splitlines() if line and line not in have]
            if new:  # a cut last line here stays a line of its own, which readers skip
                out.write((b"\n" if old and not old.endswith(b"\n") else b"") + b"".join(x + b"\n" for x in new))
                out.flush()
                os.fsync(out.fileno())
        if new:
            log(f"ledger {local.name}: {len(new)} line(s) from the parked run merged")
    if (run_dir / "manifest.json").exists():
        log(f"{run_dir} exists here: resumed from it, not from {parked}")
        return False
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "evaluations.jsonl").write_bytes(gzip.decompress((parked / "evaluations.jsonl.gz").read_bytes()))
    shutil.copyfile(parked / "manifest.json", run_dir / "manifest.json")
    log(f"{run_dir} restored from {parked}")
    return True


def run(row: Path, run_dir: Path, command: Sequence[str], poll_s: float = 0.2, seal_only: bool = False) -> int:
    """Start the search, seal its manifest the moment it exists, and commit its result at the end
    (``seal_only``: stop the search once the manifest is committed; the same command resumes it)."""
    label = row.name
    logfile = run_dir.parent / f"{run_dir.name}.log"
    logfile.parent.mkdir(parents=True, exist_ok=True)
    restore(row, run_dir)
    with open(logfile, "a") as out:
        proc = subprocess.Popen(list(command), stdout=out, stderr=subprocess.STDOUT)
        log(f"search started (pid {proc.pid}), output in {logfile}")
        while not (run_dir / "manifest.json").exists():
            if proc.poll() is not None:
                log(f"the search exited ({proc.returncode}) before writing its manifest; see {logfile}")
                return proc.returncode or 1
            time.sleep(poll_s)
        proc.send_signal(signal.SIGSTOP)
        try:
            seal_manifest(row, run_dir, label)
        except Exception:
            proc.kill()
            raise
        finally:
            if seal_only:
                proc.kill()  # a stopped process dies on SIGKILL; its run directory resumes
            proc.send_signal(signal.SIGCONT)
        code = proc.wait()
    if seal_only:
        log("sealed only: the search was killed once its manifest was committed; the same command resumes it")
        return 0
    if code != 0:
        log(f"the search exited with {code}; rerun the same command to resume it")
        return code
    commit_result(row, run_dir, label)
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     usage="%(prog)s ROW --run-dir RUN_DIR [--finish | --park | --seal-only] [-- SEARCH COMMAND ...]")
    parser.add_argument("row", type=Path, help="the row folder under results/ (its name labels the commits)")
    parser.add_argument("--run-dir", type=Path, required=True, help="the search's run directory (its --out)")
    parser.add_argument("--finish", action="store_true", help="only commit a finished run's result.json")
    parser.add_argument("--park", action="store_true",
                        help="commit the unfinished run (manifest, journal, this machine's ledger) under ROW/parked/")
    parser.add_argument("--seal-only", action="store_true",
                        help="commit the manifest, then stop the search (run the same command later to resume it)")
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args, command = parser.parse_args(argv[:split]), argv[split + 1:]
    args.command = command
    if args.finish:
        commit_result(args.row, args.run_dir, args.row.name)
        return 0
    if args.park:
        park(args.row, args.run_dir, args.row.name)
        return 0
    if not args.command:
        parser.error("give the search command after --")
    outs = [args.command[i + 1] for i, a in enumerate(args.command[:-1]) if a == "--out"]
    if not outs or Path(outs[-1]).resolve() != args.run_dir.resolve():
        parser.error(f"the command must write to --out {args.run_dir} (the run directory watched)")
    if (args.row / "result.json").exists():
        parser.error(f"{args.row} already holds a result: nothing to run")
    return run(args.row, args.run_dir, args.command, seal_only=args.seal_only)


if __name__ == "__main__":
    sys.exit(main())
