"""Figures: their data equals the result they draw, attention patterns match Hugging Face's own,
side effects match separately computed ablations, and files (HTML, PNG) are written."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from cel_lens import plots
from cel_lens.heads import Head, HeadSet

# --- a hand-made search result -------------------------------------------------------------------
SCORES = [
    [0.010, -0.020, 0.000],
    [0.050, 0.030, -0.040],
    [-0.010, 0.040, 0.020],
    [0.000, -0.060, 0.035],
]
POOL = ["L1H0", "L2H1", "L3H2", "L1H1"]
SUBSETS = [  # deliberately not in rank order
    {"heads": "L1H0", "dist_acc": 0.60, "dist_gain": 0.05, "score_sum": 0.05, "test_gain_posthoc": 0.02},
    {"heads": "L2H1", "dist_acc": 0.58, "dist_gain": 0.03, "score_sum": 0.04, "test_gain_posthoc": 0.01},
    {"heads": "L3H2", "dist_acc": 0.57, "dist_gain": 0.02, "score_sum": 0.035, "test_gain_posthoc": -0.01},
    {"heads": "L1H1", "dist_acc": 0.56, "dist_gain": 0.01, "score_sum": 0.03, "test_gain_posthoc": 0.00},
    {"heads": "L1H0+L2H1", "dist_acc": 0.64, "dist_gain": 0.09, "score_sum": 0.09, "test_gain_posthoc": 0.045},
    {"heads": "L1H0+L3H2", "dist_acc": 0.60, "dist_gain": 0.05, "score_sum": 0.085, "test_gain_posthoc": 0.03},
    {"heads": "L2H1+L3H2", "dist_acc": 0.62, "dist_gain": 0.07, "score_sum": 0.075, "test_gain_posthoc": 0.02},
    {"heads": "L1H1+L1H0", "dist_acc": 0.55, "dist_gain": 0.00, "score_sum": 0.08, "test_gain_posthoc": None},
]
# by hand: dist_acc descending; the 0.60 tie goes to the smaller subset (L1H0 before L1H0+L3H2)
EXPECTED_RANK = ["L1H0+L2H1", "L2H1+L3H2", "L1H0", "L1H0+L3H2", "L2H1", "L3H2", "L1H1", "L1H0+L1H1"]
NULL = [-0.03, -0.02, -0.02, -0.01, -0.01, 0.0, 0.0, 0.01, 0.01, 0.02]


def make_result() -> dict:
    return dict(
        heads="L2H1+L1H0", dist_acc_intact=0.55, dist_acc_ablated=0.64, dist_gain=0.09,
        test_acc_intact=0.50, test_acc_ablated=0.545, gain=0.045, ci_low=0.01, ci_high=0.08, p_value=0.02,
        null_gains=NULL, null_p=0.0, scores=SCORES, scorer="exact", pool=POOL, subsets=SUBSETS, k=2,
        pool_size=4, n_dist=100, n_test=200, seed=0, n_layers=4, n_heads=3,
    )


def _trace(fig, name_part: str):
    found = [t for t in fig.data if t.name and name_part in t.name]
    assert len(found) == 1, [t.name for t in fig.data]
    return found[0]


# --- gain heatmap ------------------------------------------------------------------------------------
def test_heatmap_values_are_the_scores_on_a_zero_centred_diverging_scale():
    fig = plots.plot_gain_heatmap(make_result())
    heat = [t for t in fig.data if t.type == "heatmap"]
    assert len(heat) == 1
    assert np.array_equal(np.asarray(heat[0].z, dtype=float), np.asarray(SCORES))
    assert heat[0].zmid == 0
    colours = [c[1] for c in heat[0].colorscale]
    assert colours[0] != colours[-1]  # two-ended
    assert "exact" in heat[0].hovertemplate and "gain" in heat[0].hovertemplate
    assert heat[0].customdata[3][1] == "L3H1"  # hover names the head at (layer 3, head 1)


def test_marked_cells_are_exactly_the_pool_and_the_selected_heads():
    fig = plots.plot_gain_heatmap(make_result())
    pool = _trace(fig, "candidate pool")
    sel = _trace(fig, "selected")
    pool_cells = {(y, x) for x, y in zip(pool.x, pool.y)}
    sel_cells = {(y, x) for x, y in zip(sel.x, sel.y)}
    assert sel_cells == {(1, 0), (2, 1)}
    assert pool_cells == {(3, 2), (1, 1)}  # the pool minus the selected heads
    assert pool_cells | sel_cells == {(h.layer, h.head) for h in HeadSet.parse(POOL)}


def test_subsets_are_ranked_like_the_search_and_the_selected_is_highlighted():
    assert [s["heads"] for s in plots.ranked_subsets(make_result())] == EXPECTED_RANK
    fig = plots.plot_gain_heatmap(make_result())
    panel = [t for t in fig.data if t.type == "scatter" and t.xaxis == "x2"][0]
    labels = [y.split(" ", 1)[1] for y in panel.y]
    assert labels == EXPECTED_RANK
    by_heads = {s["heads"]: s["dist_acc"] for s in SUBSETS}
    by_heads["L1H0+L1H1"] = by_heads.pop("L1H1+L1H0")
    assert list(panel.x) == [by_heads[h] for h in EXPECTED_RANK]
    colours = list(panel.marker.color)
    assert colours[0] == plots.SELECTED_COLOUR and colours.count(plots.SELECTED_COLOUR) == 1
    # the selected subset's test gain with its CI
    gain = [t for t in fig.data if t.type == "scatter" and t.xaxis == "x3"][0]
    assert gain.y[0] == pytest.approx(0.045)
    assert gain.error_y.array[0] == pytest.approx(0.08 - 0.045)
    assert gain.error_y.arrayminus[0] == pytest.approx(0.045 - 0.01)


def test_max_subsets_keeps_the_selected_one():
    fig = plots.plot_gain_heatmap(make_result(), max_subsets=3)
    panel = [t for t in fig.data if t.type == "scatter" and t.xaxis == "x2"][0]
    assert [y.split(" ", 1)[1] for y in panel.y] == EXPECTED_RANK[:3]


def test_figures_accept_a_result_object_and_a_run_directory(tmp_path: Path):
    from cel_lens.runs import load_run
    from cel_lens.search import Result

    r = make_result()
    obj = Result.from_dict(r)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "manifest.json").write_text("{}")
    (run_dir / "result.json").write_text(json.dumps(obj.to_dict()))
    for source in (obj, load_run(run_dir), run_dir, str(run_dir)):
        fig = plots.plot_gain_heatmap(source)
        heat = [t for t in fig.data if t.type == "heatmap"][0]
        assert np.array_equal(np.asarray(heat.z, dtype=float), np.asarray(SCORES))
    table = plots.format_result(obj)
    assert "L1H0+L2H1" in table and "+4.5 pp" in table and "[+1.0 pp, +8.0 pp]" in table


# --- discovery vs test --------------------------------------------------------------------------------
def test_discovery_vs_test_points_and_null_band():
    fig = plots.plot_discovery_vs_test(make_result())
    others = _trace(fig, "pool subsets")
    sel = _trace(fig, "selected")
    assert (sel.x[0], sel.y[0]) == (0.09, 0.045)
    got = sorted(zip(others.customdata, others.x, others.y))
    want = sorted(
        (str(HeadSet.parse(s["heads"])), s["dist_gain"], s["test_gain_posthoc"])
        for s in SUBSETS
        if s["test_gain_posthoc"] is not None and s["heads"] != "L1H0+L2H1"
    )
    assert got == want  # subsets without a post-hoc test gain are left out
    band = _trace(fig, "95% range")
    assert min(band.y) == pytest.approx(np.quantile(NULL, 0.025))
    assert max(band.y) == pytest.approx(np.quantile(NULL, 0.975))
    assert "Spearman" in fig.layout.title.text


# --- attention patterns -----------------------------------------------------------------------------
def test_attention_patterns_change_only_downstream_of_the_ablation(tiny_model):
    from cel_lens.tasks import Example

    from cel_lens.evaluate import encode_pair

    ex = Example(id="x", prompt="Question: What is 7 times 8?\nAnswer:", target=" 56")
    pats = plots.attention_patterns(tiny_model, ex, "L1H2")
    ctx, cont = encode_pair(tiny_model, ex.prompt, ex.target)  # what the evaluator feeds
    n = len(ctx) + len(cont)
    assert pats.intact.shape == (3, 4, n, n) and len(pats.tokens) == n
    assert torch.allclose(pats.intact.sum(-1), torch.ones(3, 4, n), atol=1e-5)
    assert torch.equal(pats.intact.triu(1), torch.zeros_like(pats.intact))  # causal
    # layers up to the ablated one cannot change; the layer after it must
    assert torch.equal(pats.ablated[:2], pats.intact[:2])
    change = plots.pattern_change(pats)
    assert torch.all(change[:2] == 0) and torch.all(change[2] > 1e-4)
    # the same patterns through TransformerLens's own cache, intact and inside ablate()
    from cel_lens.ablation import ablate

    tokens = torch.tensor([ctx + cont])
    names = lambda name: name.endswith("hook_pattern")  # noqa: E731
    _, cache = tiny_model.run_with_cache(tokens, names_filter=names)
    assert torch.allclose(pats.intact[2], cache["blocks.2.attn.hook_pattern"][0], atol=1e-6)
    with ablate(tiny_model, "L1H2"):
        _, cache = tiny_model.run_with_cache(tokens, names_filter=names)
    assert torch.allclose(pats.ablated[2], cache["blocks.2.attn.hook_pattern"][0], atol=1e-6)


def test_plot_attention_shows_ablated_and_most_changed_downstream_heads(tiny_model):
    pats = plots.attention_patterns(tiny_model, "Question: is the sky blue?\nAnswer: yes", "L0H1")
    fig = plots.plot_attention(tiny_model, None, patterns=pats, n_downstream=2)
    heat = [t for t in fig.data if t.type == "heatmap"]
    assert len(heat) == 3 * 3  # (ablated head + 2 downstream) x (intact, ablated, difference)
    change = plots.pattern_change(pats)
    change[0] = -1
    top = torch.argsort(change.flatten(), descending=True)[:2].tolist()
    want = [Head(0, 1)] + [Head(i // 4, i % 4) for i in top]
    titles = [a.text for a in fig.layout.annotations if re.fullmatch(r"L\d+H\d+ intact", a.text)]
    assert titles == [f"{h} intact" for h in want]
    for row, h in enumerate(want):
        intact, ablated, diff = heat[3 * row : 3 * row + 3]
        assert np.allclose(np.asarray(intact.z, dtype=float), pats.intact[h.layer, h.head].numpy())
        assert np.allclose(np.asarray(ablated.z, dtype=float), pats.ablated[h.layer, h.head].numpy())
        assert np.allclose(np.asarray(diff.z, dtype=float), (pats.ablated - pats.intact)[h.layer, h.head].numpy())
    assert diff.zmid == 0
    xaxis = fig.layout.xaxis
    assert list(xaxis.ticktext) == ["<|bos|>", "Question", ":", "·is", "·the", "·s", "k", "y", "·b", "l", "u", "e",
                                    "?", "⏎", "Answer", ":", "·", "y", "es"]


def test_pattern_change_figure(tiny_model):
    pats = plots.attention_patterns(tiny_model, "Question: What is 9 plus 4?\nAnswer: 13", "L1H3+L0H2")
    fig = plots.plot_pattern_change(pats)
    assert np.allclose(np.asarray(fig.data[0].z, dtype=float), plots.pattern_change(pats).numpy())
    assert np.asarray(fig.data[0].z)[0].max() == 0  # nothing above layer 0 can move layer 0
    stars = fig.data[1]
    assert sorted(zip(stars.y, stars.x)) == [(0, 2), (1, 3)]


def test_bridge_patterns_equal_hugging_face_attentions(tiny_checkpoints):
    """Intact and ablated patterns of a TransformerBridge against the Hugging Face model itself:
    eager attention weights, with heads ablated by zeroing their slices of o_proj's input."""
    from transformers import AutoModelForCausalLM

    from cel_lens.models import load_model

    path = tiny_checkpoints["qwen2"]
    bridge = load_model(path, loader="bridge", device="cpu", dtype="float32")
    hf = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager").eval()
    text = "Question: What is 12 minus 70?\nAnswer: -58"
    pats = plots.attention_patterns(bridge, text, "L0H1+L1H3")
    tokens = bridge.to_tokens(text)
    d_head = hf.config.hidden_size // hf.config.num_attention_heads

    def hf_patterns(ablate: dict[int, list[int]]) -> torch.Tensor:
        handles = []
        for layer, heads in ablate.items():
            def pre(module, args, heads=heads):  # noqa: ANN001
                x = args[0].clone()
                for h in heads:
                    x[..., h * d_head : (h + 1) * d_head] = 0
                return (x,)

            handles.append(hf.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(pre))
        try:
            with torch.no_grad():
                out = hf(tokens, output_attentions=True)
        finally:
            for handle in handles:
                handle.remove()
        return torch.stack([a[0] for a in out.attentions])

    assert torch.allclose(pats.intact, hf_patterns({}), atol=1e-5)
    assert torch.allclose(pats.ablated, hf_patterns({0: [1], 1: [3]}), atol=1e-5)
    assert plots.pattern_change(pats)[2].min() > 1e-4


# --- side effects ----------------------------------------------------------------------------------
def _greedy_next(model, contexts: list[list[int]], heads: HeadSet) -> list[int]:
    """Greedy next token after each context, under ``ablate`` (right padding: causal attention
    keeps the pads out of the real positions)."""
    from cel_lens.ablation import ablate

    width = max(map(len, contexts))
    tokens = torch.tensor([c + [0] * (width - len(c)) for c in contexts])
    with torch.no_grad(), ablate(model, heads):
        logits = model(tokens)
    return [int(logits[i, len(c) - 1].argmax()) for i, c in enumerate(contexts)]


def test_side_effect_matrix_matches_hand_built_tasks(tiny_model):
    """Tasks built from the model's own greedy answers: on "up" the answer is the ablated model's
    (intact wrong, ablated right: gain +1), on "down" the intact model's (gain -1)."""
    from cel_lens.evaluate import encode_pair, evaluate
    from cel_lens.tasks import Example, Split, Task

    S, S2 = HeadSet.parse("L1H0+L2H1"), HeadSet.parse("L0H3")
    tok = tiny_model.tokenizer
    prompts = [f"Question: What is {a} plus {a % 7}?\nAnswer:" for a in range(40)]
    contexts = [encode_pair(tiny_model, p, " 1")[0] for p in prompts]
    intact, ablated = _greedy_next(tiny_model, contexts, HeadSet()), _greedy_next(tiny_model, contexts, S)
    up, down = [], []
    for prompt, ctx, i, a in zip(prompts, contexts, intact, ablated):
        if i == a:
            continue
        for target_id, bucket in ((a, up), (i, down)):
            target = tok.decode([target_id])
            if target.strip() and encode_pair(tiny_model, prompt, target) == (ctx, [target_id]):
                bucket.append(Example(id=f"{len(bucket)}", prompt=prompt, target=target))
    assert len(up) >= 4 and len(down) >= 4, (len(up), len(down))

    def task(name: str, examples: list) -> Task:
        half = len(examples) // 2
        return Task(name, "exact_match", Split("dist", tuple(examples[:half])), Split("test", tuple(examples[half:])))

    tasks = {"up": task("up", up), "down": task("down", down), "other": task("other", up[:2] + down[:2])}
    matrix, labels = plots.side_effect_matrix(tiny_model, tasks, {"up": S, "other": S2})
    assert labels == ["up", "down", "other"] and matrix.shape == (3, 3)
    assert matrix[0, 0] == pytest.approx(1.0) and matrix[0, 1] == pytest.approx(-1.0)
    assert all(math.isnan(v) for v in matrix[1])  # "down" has no selection
    for j, name in enumerate(labels):  # row "other": one evaluation per head set
        split = tasks[name].test
        gain = float(evaluate(tiny_model, split, [S2], progress=False).accuracy[0]) - float(
            evaluate(tiny_model, split, None, progress=False).accuracy[0]
        )
        assert matrix[2, j] == pytest.approx(gain)
    fig = plots.plot_side_effects(matrix, labels)
    heat = fig.data[0]
    assert list(heat.y) == ["Ŝ(up)", "Ŝ(other)"]  # the row without a selection is left out
    assert np.allclose(np.asarray(heat.z, dtype=float), matrix[[0, 2]]) and heat.zmid == 0
    assert heat.text[0][1] == "-100.0"
    outlined = sorted((shape.x0 + 0.5, shape.y0 + 0.5) for shape in fig.layout.shapes)
    assert outlined == [(0, 0), (2, 1)]  # each row's own task
    with pytest.raises(ValueError, match="unknown task"):
        plots.side_effect_matrix(tiny_model, tasks, {"nope": S})


# --- files -----------------------------------------------------------------------------------------
def _assert_png(path: Path, min_bytes: int = 20_000) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    assert len(data) > min_bytes, (path, len(data))


def test_png_export_names_the_fix_when_no_browser_can_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import kaleido
    from kaleido.errors import ChromeNotFoundError

    from cel_lens import export

    def no_chrome(*args, **kwargs):
        raise ChromeNotFoundError("no chrome")

    monkeypatch.setattr(kaleido, "calc_fig_sync", no_chrome)
    monkeypatch.setattr(export, "_png_server_started", None)
    with pytest.raises(RuntimeError, match="apt-get install chromium"):
        export.write_static_image(plots.plot_side_effects([[0.1]], ["a"]), tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_report_writes_html_and_png_figures(tmp_path: Path, capsys):
    from cel_lens.cli import main

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "manifest.json").write_text("{}")
    (run_dir / "result.json").write_text(json.dumps(make_result()))
    assert main(["report", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "L1H0+L2H1" in out and "McNemar p=0.02" in out
    for stem in ("gain_heatmap", "discovery_vs_test"):
        html = run_dir / "figures" / f"{stem}.html"
        assert html.stat().st_size > 5_000 and "Plotly.newPlot" in html.read_text()
        assert 'src="plotly.min.js"' in html.read_text()  # opens offline: plotly.js sits next to it
        _assert_png(run_dir / "figures" / f"{stem}.png")
    assert (run_dir / "figures" / "plotly.min.js").stat().st_size > 1_000_000

    assert main(["report", str(run_dir), "--no-figures", "--json", "--out", str(tmp_path / "none")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["heads"] == "L2H1+L1H0" and data["figures"] == [] and not (tmp_path / "none").exists()

    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "cel-lens: error:" in capsys.readouterr().err
