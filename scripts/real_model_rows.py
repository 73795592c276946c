"""The rows table of docs/real_model.md, read from the committed records (no model, no forward pass).

    python scripts/real_model_rows.py results/smollm2-135m            # the markdown table
    python scripts/real_model_rows.py results/smollm2-135m --json     # the same rows as JSON
    python scripts/real_model_rows.py LABEL=RUN_DIR [LABEL=RUN_DIR ...]   # run directories
    python scripts/real_model_rows.py results/smollm2-135m --figures figures/real_model/rows  # + heatmaps

A row is a folder holding the ``manifest.json`` a search wrote when it opened its run directory and,
once the search finished, its ``result.json`` (``scripts/seal_row.py`` commits the first before the
search reads D_test and the second when it ends). A folder with only the manifest is a row that is
sealed but not run yet. Every number comes from those two files: the sizes, the scorer (a
pre-screen's recall of exact's pool from ``prescreen_recall.json`` beside them, when it was
measured on the row), Ŝ, accuracies, the gain with its interval, the exact McNemar p (one-sided,
the package's one decision, and two-sided), the selection-adjusted test, the calibrated gain, the
random-subset null with its smallest possible p, selection stability, the ablation-kind controls,
leave-one-out, the seal (the ledger's ``selected_before_test`` and its earlier reads; with git, the
order in which the two files were committed), the smallest gain the one-sided exact test detects
with 80 % power at the row's n and observed discordance
(:func:`cel_lens.stats.decision.minimum_detectable_effect`), and a conclusion computed from them.
A row the ledger does not mark as sealed is reported as such and not counted as evidence.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Iterable, Optional

from cel_lens.heads import Head
from cel_lens.selection.algorithm import RESUMED_SETS
from cel_lens.selection.calibration_text import calibrated_counts
from cel_lens.selection.result import Result
from cel_lens.selection.result_parts import known_share
from cel_lens.stats.decision import (
    gain_bounds,
    minimum_detectable_effect,
    minimum_detectable_effect_random,
    sign_test_p,
)

POWER = 0.8
"""The power at which a row states the smallest detectable gain."""
OTHER_DISCORDANCE = 0.02
"""A second discordance at which a row states what its test would detect (the observed one may be small)."""
CODE_DIRS = ("cel_lens/selection", "cel_lens/stats", "cel_lens/scoring", "cel_lens/evaluation")
"""The code a row's numbers depend on most: commits to it between a row's seal and its result are counted."""


def pct(x: Any) -> str:
    return "n/a" if x is None else f"{100 * float(x):.1f} %"


def pp(x: Any) -> str:
    return "n/a" if x is None else f"{100 * float(x):+.1f} pp"


def pp2(x: Any) -> str:
    """Percentage points to two decimals (a detectable effect or a bound: rounding must not flatter it)."""
    return "n/a" if x is None else f"{100 * float(x):+.2f} pp"


def fmt_p(x: Any) -> str:
    return "n/a" if x is None else f"{float(x):.2g}"


def _read(path: Path) -> Optional[dict[str, Any]]:
    return json.loads(path.read_text()) if path.is_file() else None


def _find(d: Any, key: str) -> Any:
    """The first value of ``key`` anywhere in a nested manifest (``None`` when absent)."""
    if isinstance(d, dict):
        if key in d:
            return d[key]
        for v in d.values():
            found = _find(v, key)
            if found is not None:
                return found
    return None


def describe(manifest: dict[str, Any]) -> str:
    """A row's label from its manifest: task, prompts (plain or chat template), where D_dist came from."""
    task = (manifest.get("task") or {}).get("name", "?")
    chat = "chat template" if _find(manifest, "chat_template") else "plain"
    dist_from = (manifest.get("task") or {}).get("options", {}).get("dist_from")
    return f"{task}, {chat}" + (f" (D_dist from {dist_from})" if dist_from else "")


def git_history(path: Path) -> Optional[dict[str, str]]:
    """When each record file of a row folder was first committed (``{name: "<sha> <iso time>"}``),
    or ``None`` outside a git checkout."""
    out: dict[str, str] = {}
    for name in ("manifest.json", "result.json"):
        try:
            log = subprocess.run(["git", "log", "--diff-filter=A", "--format=%H %cI", "--", name], cwd=path,
                                 capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if log.returncode != 0:
            return None
        lines = log.stdout.split()
        if lines:
            out[name] = f"{lines[-2]} {lines[-1]}"
    return out


def _is_ancestor(older: str, newer: str, cwd: Path) -> bool:
    out = subprocess.run(["git", "merge-base", "--is-ancestor", older, newer], cwd=cwd, capture_output=True, timeout=30)
    return out.returncode == 0


def _history_order(history: Optional[dict[str, str]], folder: Path) -> tuple[str, bool]:
    """What git says of the order (text), and whether it contradicts the seal (the result added in
    the manifest's commit, or in one that does not descend from it)."""
    if history is None:
        return "not in git", False
    man, res = history.get("manifest.json"), history.get("result.json")
    if man is None:
        return "manifest not committed", res is not None
    if res is None:
        return f"manifest committed ({man.split()[0][:8]})", False
    m, r = man.split()[0], res.split()[0]
    if m == r or not _is_ancestor(m, r, folder):
        return f"**result committed with or before the manifest** ({r[:8]})", True
    return f"manifest committed ({m[:8]}) before result ({r[:8]})", False


def power(result: Result) -> dict[str, Any]:
    """The one-sided exact McNemar decision recomputed from the result's discordant counts, with its
    one-sided bounds (:func:`cel_lens.stats.decision.gain_bounds`, unconditional) and the smallest gain
    it detects at :data:`POWER` at this n: at the observed count of discordant examples, with the
    discordance a rate (the count random), and at :data:`OTHER_DISCORDANCE`."""
    dec = result.test.decision  # None in results written before the decision
    wins, losses = (dec["wins"], dec["losses"]) if dec else (None, None)
    n = int(result.n_test or (dec["n"] if dec else 0) or 0)
    alpha = float(result.alpha)  # 0.05 in records written before alpha was kept, as the search then used
    if wins is None or losses is None or n <= 0:
        return {"alpha": alpha, "n": n, "wins": None, "losses": None, "p_one_sided": result.test.p_enhance,
                "discordance": None, "mde": None, "upper": None, "lower": None, "mde_random": None, "mde_other": None}
    disc = (wins + losses) / n
    lower, upper = gain_bounds(wins, losses, n, alpha)
    return {"alpha": alpha, "n": n, "wins": wins, "losses": losses, "p_one_sided": sign_test_p(wins, losses),
            "discordance": disc, "mde": minimum_detectable_effect(n, disc, alpha, POWER), "lower": lower, "upper": upper,
            "mde_random": minimum_detectable_effect_random(n, disc, alpha, POWER) if disc > 0 else None,
            "mde_other": minimum_detectable_effect(n, OTHER_DISCORDANCE, alpha, POWER)}


def code_between(history: Optional[dict[str, str]], folder: Path) -> Optional[int]:
    """How many commits touched :data:`CODE_DIRS` between a row's manifest commit and its result
    commit (``None`` outside git or without both)."""
    man, res = (history or {}).get("manifest.json"), (history or {}).get("result.json")
    if not man or not res:
        return None
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=folder, capture_output=True, text=True, timeout=30)
        out = subprocess.run(["git", "rev-list", "--count", f"{man.split()[0]}..{res.split()[0]}", "--", *CODE_DIRS],
                             cwd=top.stdout.strip() or folder, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return int(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip().isdigit() else None


def code_text(manifest: Optional[dict[str, Any]], between: Optional[int]) -> str:
    """The code version a row ran: the manifest's (commit or source hash), else how many commits to the
    statistics' code landed between its seal and its result."""
    code = ((manifest or {}).get("versions") or {}).get("cel_lens_code") or {}
    if code.get("commit"):
        return f"commit {code['commit'][:8]}{' (with uncommitted changes)' if code.get('dirty') else ''}"
    if code.get("source_sha256"):
        return f"source sha256 {code['source_sha256'][:12]}"
    if between is None:
        return "not recorded"
    return f"not recorded; {between} commit(s) to {', '.join(d.split('/')[1] for d in CODE_DIRS)} between seal and result"


def _after_manifest(seal: dict[str, Any], history: Optional[dict[str, str]]) -> str:
    """When every earlier read of D_test came after the manifest was committed (the reads are kept
    oldest first), say so: the configuration was fixed before them, though the ledger's rule (no read
    before the selection) still does not count the row."""
    import datetime as dt

    reads, man = seal["reads"], (history or {}).get("manifest.json")  # reads: the ledger's entries, untyped
    if not reads or not man or not reads[0].get("time"):
        return ""
    first, committed = dt.datetime.fromisoformat(reads[0]["time"]), dt.datetime.fromisoformat(man.split()[1])
    if first <= committed:
        return ""
    return " (every one of them after the manifest was committed)"


def sealed(result: Result, history: Optional[dict[str, str]], folder: Path) -> tuple[bool, str]:
    """Whether the row counts as evidence (the ledger says Ŝ was fixed before any read of its D_test,
    and git does not show the result committed before the manifest), and the column's text."""
    seal = result.test.seal  # None in results written before the ledger (they also lack the flag)
    order, contradicts = _history_order(history, folder)
    if seal is None:
        return False, f"**unknown** (no seal record); {order}"
    if not result.test.selected_before_test or seal["prior_test_reads"]:
        reads = seal["reads"]
        reason = (f"the ledger holds {seal['prior_test_reads']} read(s) of these D_test rows by this model before "
                  f"the selection, the first by {reads[0].get('entry')} at {str(reads[0].get('time'))[:19]}"
                  if reads else seal.get("reason") or "D_test was read before the selection")
        return False, f"**no**: {reason}{_after_manifest(seal, history)}; {order}"
    if contradicts:
        return False, f"**no**: {order}"
    return True, f"yes (ledger: no earlier read of D_test); {order}"


def parked_progress(folder: Path) -> Optional[dict[str, Any]]:
    """An unfinished row's progress from its parked journal (``scripts/seal_row.py --park``): the
    stage-1 heads journaled, their share of the scan's layer passes (a head of layer l runs the
    ``n_layers - l`` layers from l on) and the head leading stage 1 so far (D_dist only)."""
    import gzip

    path = folder / "parked" / "evaluations.jsonl.gz"
    if not path.exists():
        return None
    lines = [json.loads(x) for x in gzip.decompress(path.read_bytes()).splitlines()]
    start = next((x for x in lines if x.get("event") == "search_started"), {})
    evals = [x for x in lines if x.get("type") == "eval" and x.get("split") == "dist"]
    L, H = start.get("n_layers", 0), start.get("n_heads", 0)
    stage1 = {x.get("heads"): x["acc"] for x in evals if x.get("stage") == "stage1"}
    passes = sum(L - Head.parse(h).layer for h in stage1)
    lead = max(stage1, key=lambda h: (stage1[h], -Head.parse(h).layer, -Head.parse(h).head), default=None)
    return {"stage1": len(stage1), "heads": H * L, "layer_share": passes / (H * L * (L + 1) // 2) if H * L else None,
            "dist_acc_intact": next((x["acc"] for x in evals if x.get("stage") == "intact"), None),
            "leader": lead, "leader_dist_acc": stage1.get(lead)}


def conclusion(rec: dict[str, Any]) -> str:
    """The row's conclusion, computed from its seal, decision, power and controls."""
    if rec["status"] != "finished":
        park = rec["parked"]
        if park is None:
            return "not run yet: the manifest is sealed, the search has not finished"
        lead = "" if park.get("leader") is None else f"; leading so far: {park['leader']}, {pct(park['leader_dist_acc'])}"
        return (f"not finished: parked with {park['stage1']} of {park['heads']} stage-1 heads journaled "
                f"({pct(park.get('layer_share'))} of stage 1's layer passes; intact D_dist accuracy "
                f"{pct(park['dist_acc_intact'])}{lead})")
    pw, alpha = rec["power"], rec["power"]["alpha"]
    prefix = "" if rec["evidence"] else "NOT SEALED, not counted as evidence: "
    if pw["p_one_sided"] is not None and pw["p_one_sided"] <= alpha:
        text = (f"Ŝ raised D_test accuracy by {pp(rec['gain'])}, at least {pp2(pw['lower'])} (one-sided exact p "
                f"{fmt_p(pw['p_one_sided'])}, one-sided {1 - alpha:.0%} bound)")
        cal = rec["calibration"]
        if cal and cal["applies"] and not cal.get("survives"):  # survives: only where calibration applies
            text += "; the gain is not shown to survive calibration" + _prior_clause(cal)
        if rec["null_min_p"] is not None and rec["null_min_p"] > alpha:
            text += f"; its null is too small to compare (smallest possible p {fmt_p(rec['null_min_p'])} > α)"
        elif rec["null_p"] is not None and rec["null_p"] > alpha:
            text += f"; random head sets of its size do as well (null p {fmt_p(rec['null_p'])})"
        return prefix + text
    if pw["wins"] is None:
        return prefix + "no decision record in this result (written before results carried one): power not computed"
    tested = f"only Ŝ and {rec['null_sets']} random head sets of its size met D_test"
    if pw["mde"] is None:
        return prefix + (f"no gain shown for Ŝ (one-sided exact p {fmt_p(pw['p_one_sided'])}), and too few discordant "
                         f"examples ({pw['wins']} + {pw['losses']} of {pw['n']}) to detect any gain at {POWER:.0%} power; "
                         f"{tested}")
    caveat = (" (its pool from a pre-screen whose recall of exact's pool was not measured on this row)"
              if rec["scorer"].startswith("pre-screen (recall") else "")
    random = "" if pw["mde_random"] is None else f", {pp2(pw['mde_random'])} with the discordance a rate"
    other = ("" if pw["mde_other"] is None else
             f", {pp2(pw['mde_other'])} at {OTHER_DISCORDANCE:.0%} discordance")
    return prefix + (f"no gain shown for Ŝ (one-sided exact p {fmt_p(pw['p_one_sided'])}){caveat}: its gain is at most "
                     f"{pp2(pw['upper'])} (one-sided {1 - alpha:.0%} bound); its test detects {pp2(pw['mde'])} with "
                     f"{POWER:.0%} power at n = {pw['n']} and the observed {pw['wins'] + pw['losses']} discordant examples"
                     f"{random}{other}; {tested}, so nothing is said of other head sets")


def _prior_clause(cal: dict[str, Any]) -> str:
    """What is known of the answer prior: moved only when the test of the prior shift rejects
    (``p_prior``/``moves_prior``: only in records whose calibration tested it)."""
    if "p_prior" not in cal:
        return " (whether the answer prior moved was not tested)"
    if cal.get("moves_prior"):
        return f", and the answer prior moves (prior-shift test p {fmt_p(cal['p_prior'])})"
    return f" (no shift of the answer prior shown either: p {fmt_p(cal['p_prior'])})"


def prescreen_agreement(result: Result, screen: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """A pre-screened row's first pass against exact stage 1 on the heads it kept (the only heads
    with exact scores): Spearman's rho over them (a restricted range: the first pass's best), and
    how many heads were kept of how many."""
    if not screen or not result.discovery.scores:
        return None
    from scipy.stats import spearmanr

    first = [x for row in screen.get("first_scores") or [] for x in row]
    exact = [x for row in result.discovery.scores for x in row]
    pairs = [(f, e) for f, e in zip(first, exact) if e is not None and e == e]
    rho = float(spearmanr([p[0] for p in pairs], [p[1] for p in pairs]).statistic) if len(pairs) > 2 else None
    return {"kept": len(pairs), "heads": len(exact), "spearman_kept": rho, "first_pass": screen.get("pass")}


def _scorer(result: Result, recall: Optional[dict[str, Any]], agree: Optional[dict[str, Any]] = None) -> str:
    name = result.scorer
    if name != "prescreen":
        return name
    kept = (f"; {agree['first_pass']} kept {agree['kept']} of {agree['heads']} heads, Spearman with exact on them "
            f"{agree['spearman_kept']:.2f}" if agree and agree.get("spearman_kept") is not None else "")
    if recall is None:
        return f"pre-screen (recall of exact's pool not measured on this row{kept})"
    return f"pre-screen, recall of exact's pool {recall.get('recall')} (measured on this row{kept})"


def _null(result: Result) -> tuple[str, Optional[float]]:
    null = result.null.gains or []
    if not null:
        return "n/a", None
    p = result.null.p
    text = (f"{len(null)} sets: mean {pp(sum(null) / len(null))}, max {pp(max(null))}; p {fmt_p(p)} "
            f"(smallest possible {fmt_p(result.null.min_p)})")
    return text, p


def _calibrated(result: Result) -> str:
    """The one calibrated comparison (each model at its best constant prior on D_test), its bounds,
    p and verdict, and both models against always giving the majority answer (not tested)."""
    cal = result.calibration
    if not cal:
        return "n/a"
    if not cal["applies"]:
        return "does not apply (free-form answers)"
    if "gain_best" not in cal:  # the calibrated keys are NotRequired: which a record holds depends on its version
        return f"{pp(cal.get('gain_cal'))}, p {fmt_p(cal.get('p_value_cal'))} (recorded before the best-prior comparison)"
    n = result.n_test
    counts = calibrated_counts(cal, n) if isinstance(n, int) else None
    bounds = "" if counts is None else " [{}, {}]".format(*(pp2(x) for x in gain_bounds(*counts, n, float(result.alpha))))
    verdict = "survives" if cal.get("survives") else "not shown to survive"
    text = (f"best prior on D_test: {pct(cal.get('test_acc_intact_best'))} → {pct(cal.get('test_acc_ablated_best'))}: "
            f"{pp2(cal['gain_best'])}{bounds}, p {fmt_p(cal.get('p_value_cal'))}, **{verdict}**")
    if cal.get("majority_rate") is not None:
        text += (f"; always answering {(cal['majority_answer'] or 'the majority answer').strip()}: {pct(cal['majority_rate'])} "
                 "(the difference not tested)")
    return text


def _loo(result: Result) -> str:
    loo = result.controls.leave_one_out
    if not loo:
        return "n/a"
    parts = ", ".join(f"{h['head']} Holm p {fmt_p(h['p_holm'])}" for h in loo["heads"])
    return f"supports {', '.join(loo['supported']) or 'none'} ({parts})"


def search_minutes(timings: dict[str, Any]) -> dict[str, Any]:
    """The search's stage seconds in minutes: those of its last process, which did not time the
    evaluations it resumed from its run directory (:data:`RESUMED_SETS`, counted beside them)."""
    resumed = int(timings.get(RESUMED_SETS) or 0)
    return {"minutes": sum(float(v) for k, v in timings.items() if k.endswith("_s")) / 60,
            "minutes_cover": "the last process" if resumed else "the whole search", "resumed_sets": resumed}


def record(label: str, folder: Path) -> dict[str, Any]:
    """Everything a row shows, computed from its folder's records (JSON-ready): a finished row's
    ``result.json`` read through its typed parts (:meth:`cel_lens.selection.result.Result.from_dict`)."""
    manifest, raw = _read(folder / "manifest.json"), _read(folder / "result.json")
    if manifest is None and raw is None:
        raise FileNotFoundError(f"{folder}: neither manifest.json nor result.json")
    history = git_history(folder)
    result = None if raw is None else Result.from_dict(raw)
    rec: dict[str, Any] = {"row": label, "path": str(folder), "description": describe(manifest or {}),
                           "status": "finished" if result is not None else "sealed, not run",
                           "history": history}
    splits = (manifest or {}).get("splits") or {}  # a row not run yet: the sizes its manifest holds
    rec["n_dist"] = result.n_dist if result is not None else (splits.get("dist") or {}).get("n")
    rec["n_test"] = result.n_test if result is not None else (splits.get("test") or {}).get("n")
    if result is None:
        opts = (manifest or {}).get("options") or {}
        rec.update(evidence=False, sealed=_history_order(history, folder)[0],
                   scorer=f"{opts.get('scorer', '?')}, {opts.get('k', '?')}, {opts.get('pool_size', '?')} (planned)",
                   parked=parked_progress(folder))
        rec["conclusion"] = conclusion(rec)
        return rec
    recall = _read(folder / "prescreen_recall.json")
    agree = prescreen_agreement(result, _read(folder / "prescreen.json"))
    rec["scorer_agreement"] = _read(folder / "agreement.json")  # scripts/scorer_agreement.py, on an exact row
    evidence, seal_text = sealed(result, history, folder)
    stab = result.stability.selection or {}
    null_text, null_p = _null(result)
    dist, test, adjusted = result.discovery, result.test, result.discovery.adjusted
    rec.update(
        scorer=_scorer(result, recall, agree), prescreen_agreement=agree, heads=result.heads, k=result.k,
        pool=result.pool_size, dist_acc=[dist.acc_intact, dist.acc_ablated], test_acc=[test.acc_intact, test.acc_ablated],
        gain=test.gain, ci=[test.ci_low, test.ci_high],
        ci_method=raw.get("ci_method"),  # missing (null) in records written before it; the typed part says "bootstrap"
        p_two_sided=test.p_value, adjusted_p=adjusted["p_value"] if adjusted else None,
        calibration=result.calibration, calibrated=_calibrated(result), null=null_text, null_p=null_p,
        null_min_p=result.null.min_p,
        stability={k: stab[k] for k in ("selected_frequency", "upper", "unknown", "incomplete", "n_resamples") if k in stab}
        or None, null_sets=len(result.null.gains or []), code=code_text(manifest, code_between(history, folder)),
        controls={k: v["gain"] for k, v in (result.controls.kinds or {}).items()},
        leave_one_out=_loo(result), evidence=evidence, sealed=seal_text, power=power(result),
        **search_minutes(result.timings or {}),
    )
    rec["conclusion"] = conclusion(rec)
    return rec


def stability_text(stab: Optional[dict[str, Any]]) -> str:
    """How often redoing the selection on bootstrap resamples of D_dist picks Ŝ, as the result states
    it: of the resamples whose winner is known, and not estimated when most are not known."""
    if not stab or stab.get("selected_frequency") is None:
        return "n/a"
    n, incomplete = stab.get("n_resamples"), float(stab.get("incomplete") or 0.0)
    if not stab.get("unknown") and not incomplete:
        return f"{100 * float(stab['selected_frequency']):.0f} %"
    share = known_share(float(stab["selected_frequency"]), incomplete)
    known = round(n * (1 - incomplete))
    if share is None:
        return f"not estimated ({n - known} of {n} resamples needed a subset never evaluated)"
    return f"{100 * share:.0f} % of the {known} of {n} resamples whose winner is known"


COLUMNS = ("row", "n_dist / n_test", "scorer, k, pool", "Ŝ", "D_dist acc, intact → ablated",
           "D_test acc, intact → ablated", "Δ [one-sided 95 % bounds]", "one-sided exact McNemar p",
           "selection-adjusted p (D_dist)", "calibrated Δ (one comparison: best prior on D_test)", "random-subset null",
           "selection stability", "Δ under other ablation kinds", "leave-one-out", "sealed (counted as evidence)",
           "code version", f"smallest gain Ŝ's test detects at {POWER:.0%} power", "conclusion")


def markdown_row(rec: dict[str, Any]) -> str:
    """One markdown row (a sealed row that has not run shows its sizes, seal and what is left)."""
    sizes = f"{rec['n_dist']} / {rec['n_test']}"
    if rec["status"] != "finished":
        cells = [f"{rec['row']} ({rec['description']})", sizes, rec["scorer"]] + ["not run"] * 11 + [
            rec["sealed"], "n/a", "n/a", rec["conclusion"]]
        return "| " + " | ".join(str(c) for c in cells) + " |"
    pw = rec["power"]
    mde = ("none (too few discordant examples)" if pw["mde"] is None
           else f"{pp2(pw['mde'])} (n {pw['n']}, observed discordance {pw['wins'] + pw['losses']} of {pw['n']}); "
                f"{pp2(pw['mde_random'])} with the discordance a rate")
    bounds = "n/a" if pw["lower"] is None else f"[{pp2(pw['lower'])}, {pp2(pw['upper'])}]"
    cells = [
        f"{rec['row']} ({rec['description']})", sizes, f"{rec['scorer']}, {rec['k']}, {rec['pool']}", rec["heads"],
        f"{pct(rec['dist_acc'][0])} → {pct(rec['dist_acc'][1])}", f"{pct(rec['test_acc'][0])} → {pct(rec['test_acc'][1])}",
        f"{pp(rec['gain'])} {bounds}",
        fmt_p(pw["p_one_sided"]), fmt_p(rec["adjusted_p"]), rec["calibrated"],
        rec["null"], stability_text(rec["stability"]),
        "; ".join(f"{k} {pp(v)}" for k, v in rec["controls"].items()) or "n/a", rec["leave_one_out"],
        rec["sealed"], rec["code"], mde, rec["conclusion"],
    ]
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _exact_basis(agree: dict[str, Any]) -> tuple[float, str, str]:
    """Exact stage 1's seconds in an agreement, what they are (``"none"``, ``"flop"``: extrapolated
    from a scan measured elsewhere, ``"own"``: the row's own timing, ``"given"``) and their source text."""
    seconds = float(agree.get("exact_stage1_s") or 0)
    source = str(agree.get("exact_stage1_source") or "")
    if not seconds:
        return seconds, "none", source
    if agree.get("exact_scan_gflop"):
        return seconds, "flop", source
    return seconds, "own" if source.startswith("the row's own") else "given", source


def exact_cost_text(agree: dict[str, Any]) -> str:
    """Exact stage 1's seconds that an agreement's cost ratios divide by, and where they come from:
    the row's own timing, a scan measured elsewhere scaled by FLOP count (an extrapolation), or a
    figure given by hand (its source in ``agreement.json``)."""
    seconds, basis, source = _exact_basis(agree)
    if basis == "none":
        return "not timed (no ratio)"
    if basis == "flop":
        return f"{seconds:,.0f}, extrapolated: a scan measured elsewhere, scaled by FLOP count"
    if basis == "own":
        return f"{seconds:,.0f}, the row's own timing ({'wall' if 'wall' in source else 'CPU'} seconds)"
    return f"{seconds:,.0f}, given: {source}"


def cost_ratio(scorer: dict[str, Any], agree: dict[str, Any]) -> str:
    """A scorer's cost against exact stage 1's, like against like: wall against wall when exact's
    seconds are the row's own wall timing, CPU against CPU when they are CPU seconds extrapolated from
    a scan measured elsewhere (labelled so), else the figure given, labelled."""
    seconds, basis, source = _exact_basis(agree)
    if basis == "none":
        return "n/a"
    if basis == "flop":
        return f"{scorer['cpu_s'] / seconds:.3f} (CPU ÷ exact's CPU extrapolated by FLOP count)"
    if basis == "own" and "wall" in source and scorer.get("wall_s"):
        return f"{scorer['wall_s'] / seconds:.3f} (wall ÷ exact's wall, one thread each)"
    return f"{scorer['cpu_s'] / seconds:.3f} (CPU ÷ seconds given: {source or 'unstated'})"


def selected_rank(rec: dict[str, Any], scorer: str) -> str:
    """Where the row's Ŝ (its heads, each) ranks among all heads by an approximate scorer's scores
    (``approx_scores.json`` beside the row; 1 = the scorer's best), or ``n/a``."""
    approx = _read(Path(rec["path"]) / "approx_scores.json") or {}
    scores = ((approx.get("scorers") or {}).get(scorer) or {}).get("scores")
    if not scores or not rec.get("heads"):  # a row not run yet has no heads
        return "n/a"
    flat = [(x, i) for i, x in enumerate(v for row in scores for v in row)]
    order = [i for _, i in sorted(flat, key=lambda t: (-t[0], t[1]))]
    ranks = []
    for name in str(rec["heads"]).split("+"):
        head = Head.parse(name)
        ranks.append(f"{name} {order.index(head.layer * len(scores[0]) + head.head) + 1}")
    return ", ".join(ranks)


def agreement_table(records: list[dict[str, Any]]) -> str:
    """Approximate scorers against an exact row's stage 1 on its own D_dist (``agreement.json``):
    Spearman over every head, recall of exact's top 6 and 12 (being in a pool is not being selected:
    stage 2 was not run on an approximate pool), where Ŝ ranks by the scorer, and the cost against
    exact stage 1's like against like; empty when no row has one."""
    lines = []
    for rec in records:
        agree = rec.get("scorer_agreement") or {}  # only a finished row's record has one
        for s in agree.get("scorers", []):
            lines.append(f"| {rec['row']} | {s['scorer']} | {s['spearman']:.2f} | {s.get('recall@6', float('nan')):.2f} | "
                         f"{s.get('recall@12', float('nan')):.2f} | {selected_rank(rec, s['scorer'])} | {s['cpu_s']:.0f} | "
                         f"{s.get('wall_s', float('nan')):.0f} | {cost_ratio(s, agree)} | {exact_cost_text(agree)} |")
    if not lines:
        return ""
    head = ("| row | scorer | Spearman with exact (every head) | recall of exact's top 6 | of its top 12 | Ŝ's rank by "
            "this scorer | CPU s | wall s | ÷ exact stage 1 (like against like) | exact stage 1's seconds, from |\n"
            "|---|---|---|---|---|---|---|---|---|---|")
    return "\n\n" + "\n".join([head, *lines])


def markdown(records: Iterable[dict[str, Any]]) -> str:
    """The table: a header and one row per record (then the scorer agreement table, if any)."""
    records = list(records)
    head = "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS)
    return "\n".join([head, *(markdown_row(r) for r in records)]) + agreement_table(records)


def rows_of(items: Iterable[str]) -> list[tuple[str, Path]]:
    """``(label, folder)`` per row: ``LABEL=DIR``; a folder holding a manifest or result (its name the
    label); or a folder of such folders (each one a row, in name order)."""
    out: list[tuple[str, Path]] = []
    for item in items:
        label, sep, path = item.partition("=")
        folder = Path(path if sep else item)
        if not sep and not (folder / "manifest.json").is_file() and not (folder / "result.json").is_file():
            subs = sorted(p for p in folder.iterdir() if (p / "manifest.json").is_file() or (p / "result.json").is_file())
            if not subs:
                raise FileNotFoundError(f"{folder}: no row records (manifest.json / result.json) in it or below it")
            out += [(p.name, p) for p in subs]
        else:
            out.append((label if sep else folder.name, folder))
    return out


def figures(items: list[str], out: Path, formats: Iterable[str] = ("png", "html")) -> list[Path]:
    """Each finished row's gain heatmap, drawn from its ``result.json`` alone: ``out/<row>.<fmt>``."""
    from cel_lens.report import plot_gain_heatmap
    from cel_lens.report.save import save_figure

    written: list[Path] = []
    for label, folder in rows_of(items):
        result = _read(folder / "result.json")
        if result is not None:
            fig = plot_gain_heatmap(result, title=f"SmolLM2-135M-Instruct, {label}")
            written += save_figure(fig, out / label, tuple(formats), include_plotlyjs="cdn")
    return written


def main(items: list[str], as_json: bool = False) -> str:
    records = [record(label, folder) for label, folder in rows_of(items)]
    return json.dumps(records, indent=2, default=str) if as_json else markdown(records)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rows", nargs="+", metavar="FOLDER | LABEL=DIR",
                        help="a folder of row folders (results/smollm2-135m), a row folder, or LABEL=RUN_DIR")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of a markdown table")
    parser.add_argument("--figures", type=Path, metavar="DIR", help="also draw each finished row's gain heatmap into DIR")
    parser.add_argument("--formats", default="png,html", help="figure formats (default: png,html)")
    args = parser.parse_args()
    print(main(args.rows, args.json))
    if args.figures:
        for path in figures(args.rows, args.figures, args.formats.split(",")):
            print(f"wrote {path}")
