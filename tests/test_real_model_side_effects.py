"""scripts/real_model_side_effects.py on the model organism's two tasks: the grid equals separate
evaluations, it reproduces each row's own record or stops, and it never reads an unfinished row."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import cel_lens as cl
from cel_lens.evaluation.evaluator import evaluate
from cel_lens.evaluation import EvalContext
from cel_lens.evaluation.seal import SealReader
from cel_lens.heads import HeadSet
from cel_lens.model import load_model
from cel_lens.pipeline import search
from script_modules import load_script

@pytest.fixture(scope="module")
def script():
    return load_script("real_model_side_effects")


@pytest.fixture(scope="module")
def organism():
    return load_model("organism", device="cpu")


@pytest.fixture(scope="module")
def rows(organism, tmp_path_factory) -> dict[str, Path]:
    """Two finished rows (organism_a, organism_b), each folder holding what seal_row commits."""
    root = tmp_path_factory.mktemp("side")
    out = {}
    for name in ("organism_a", "organism_b"):
        task = cl.load_task(name, n_dist=60, n_test=60)
        run = search(organism, task, out=root / "runs" / name, k=1, pool_size=2, n_null=2, n_boot=200, progress=False)
        folder = root / "rows" / name
        folder.mkdir(parents=True)
        for f in ("manifest.json", "result.json"):
            shutil.copy(Path(run.path) / f, folder / f)
        out[name] = folder
    return out


def test_grid_equals_separate_evaluations_and_renders_from_its_record(script, organism, rows, tmp_path, capsys):
    record_path = tmp_path / "side_effects.json"
    assert script.main([*map(str, rows.values()), "--out", str(record_path)], model=organism) == 0
    table = capsys.readouterr().out
    record = json.loads(record_path.read_text())
    assert [r["label"] for r in record["rows"]] == list(rows)
    for i, source in enumerate(rows.values()):
        heads = HeadSet.parse(json.loads((source / "result.json").read_text())["heads"])
        for j, name in enumerate(rows):
            test = cl.load_task(name, n_dist=60, n_test=60).test
            got = evaluate(organism, test, [HeadSet(), heads], progress=False,
                           context=EvalContext.from_environment(reader=SealReader("the test's own check"))).correct
            c = record["cells"][i][j]
            assert c["acc_intact"] == pytest.approx(float(got[0].float().mean()))
            assert c["gain"] == pytest.approx(float(got[1].float().mean() - got[0].float().mean()))
            assert c["wins"] == int((got[1] & ~got[0]).sum()) and c["losses"] == int((got[0] & ~got[1]).sum())
    assert any(c["wins"] + c["losses"] for line in record["cells"] for c in line)  # not a grid of zeros
    assert script.main(["--render", str(record_path), "--figure", str(tmp_path / "grid.html")]) == 0
    assert capsys.readouterr().out == table and table.count("\n") == 4
    assert "(organism_a)" in (tmp_path / "grid.html").read_text()  # the row axis: Ŝ(label)


def test_an_unfinished_row_is_refused_before_anything_is_read(script, organism, rows, tmp_path, monkeypatch):
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    shutil.copy(rows["organism_b"] / "manifest.json", unfinished / "manifest.json")
    monkeypatch.setattr(script, "measure", lambda *a, **k: pytest.fail("measured with an unfinished row"))
    with pytest.raises(SystemExit, match="no result.json"):
        script.main([str(rows["organism_a"]), str(unfinished), "--out", str(tmp_path / "x.json")], model=organism)
    assert not (tmp_path / "x.json").exists()


def test_a_record_the_grid_does_not_reproduce_stops_it(script, organism, rows, tmp_path):
    forged = tmp_path / "organism_b"
    shutil.copytree(rows["organism_b"], forged)
    result = json.loads((forged / "result.json").read_text())
    result["test_acc_ablated"] = result["test_acc_ablated"] + 1 / 60
    (forged / "result.json").write_text(json.dumps(result))
    with pytest.raises(SystemExit, match="is not its record's"):
        script.main([str(rows["organism_a"]), str(forged), "--out", str(tmp_path / "x.json")], model=organism)
    assert not (tmp_path / "x.json").exists()


def test_other_weights_are_refused(script, tiny_model, rows, tmp_path):
    with pytest.raises(SystemExit, match="weights hash"):
        script.main([*map(str, rows.values()), "--out", str(tmp_path / "x.json")], model=tiny_model)
