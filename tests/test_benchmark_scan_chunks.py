"""benchmarks/scan_chunks.py: a scan saved chunk by chunk resumes with the same decisions and the
seconds each chunk took when it ran; tallies add up as a run records them."""

from __future__ import annotations

import pytest
import torch

from benchmarks.scan_chunks import cpu_description, machine_id, scan, sum_tallies, tally_delta


SETS = [f"L{i // 3}H{i % 3}" for i in range(8)]


class Flaky:
    """Decisions from a fixed table; raises on the call numbered ``fail_at`` (an interrupted run)."""

    def __init__(self, fail_at: int = -1) -> None:
        self.calls, self.fail_at = [], fail_at
        self.table = torch.rand(len(SETS), 5, generator=torch.Generator().manual_seed(0)) > 0.5

    def __call__(self, sets):
        if len(self.calls) == self.fail_at:
            raise KeyboardInterrupt
        self.calls.append(list(sets))
        return self.table[[SETS.index(s) for s in sets]]


def test_an_interrupted_scan_resumes_from_its_saved_chunks(tmp_path):
    whole = scan(Flaky(), SETS, 3)
    first = Flaky(fail_at=2)
    with pytest.raises(KeyboardInterrupt):
        scan(first, SETS, 3, folder=tmp_path, key="abc-bf16")
    assert len(list(tmp_path.glob("*.pt"))) == 2 and not list(tmp_path.glob("*.tmp"))
    again = Flaky()
    out = scan(again, SETS, 3, folder=tmp_path, key="abc-bf16")
    assert again.calls == [SETS[6:]]  # only the chunk that was not saved
    assert torch.equal(out["bits"], whole["bits"]) and out["chunks_resumed"] == 2
    saved = [torch.load(p) for p in sorted(tmp_path.glob("*.pt"))]
    assert out["cpu_s"] == pytest.approx(sum(s["cpu_s"] for s in saved))


def test_another_key_does_not_borrow_saved_decisions(tmp_path):
    scan(Flaky(), SETS, 3, folder=tmp_path, key="abc-bf16")
    other = Flaky()
    scan(other, SETS, 3, folder=tmp_path, key="abc-float32")
    assert len(other.calls) == 3


def test_chunks_measured_on_another_cpu_are_not_resumed(tmp_path):
    """Seconds from two kinds of CPU do not add up to one scan's (nor divide into a precision's
    ratio): a scan on another CPU re-runs every chunk, and keeps the other CPU's files."""
    scan(Flaky(), SETS, 3, folder=tmp_path, key="abc-bf16", machine="aaaa0000")
    here = Flaky()
    out = scan(here, SETS, 3, folder=tmp_path, key="abc-bf16", machine="bbbb1111")
    assert len(here.calls) == 3 and out["chunks_resumed"] == 0 and out["machine"] == "bbbb1111"
    assert len(list(tmp_path.glob("abc-bf16-aaaa0000-*.pt"))) == 3 and len(list(tmp_path.glob("*.pt"))) == 6
    again = Flaky()
    assert scan(again, SETS, 3, folder=tmp_path, key="abc-bf16", machine="bbbb1111")["chunks_resumed"] == 3 and not again.calls


def test_the_machine_id_names_the_cpu_model_and_its_speed_flags(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu avx2 avx512f avx512_bf16\n")
    assert cpu_description(str(info)) == "Some CPU (avx2, avx512f, avx512_bf16)"
    amx = tmp_path / "cpuinfo_amx"
    amx.write_text("model name\t: Some CPU\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n")
    assert machine_id(cpu_description(str(info))) != machine_id(cpu_description(str(amx)))
    assert cpu_description(str(tmp_path / "absent")) == "unknown"


def test_a_chunk_file_of_other_heads_is_refused(tmp_path):
    scan(Flaky(), SETS, 3, folder=tmp_path, key="k")
    path = next(tmp_path.glob(f"k-*-{SETS[0]}-3.pt"))
    saved = torch.load(path)
    saved["heads"] = ["L9H9", *saved["heads"][1:]]
    torch.save(saved, path)
    with pytest.raises(ValueError, match="other heads"):
        scan(Flaky(), SETS, 3, folder=tmp_path, key="k")


def test_tallies_subtract_per_chunk_and_add_up():
    before = {"dist": {"decisions": 10, "recomputed": 2, "pair_check": {"observed": 1, "widened": 0, "largest_change": 0.1}}}
    after = {"dist": {"decisions": 25, "recomputed": 5, "pair_check": {"observed": 3, "widened": 1, "largest_change": 0.2}}}
    delta = tally_delta(before, after)
    assert delta["dist"]["decisions"] == 15 and delta["dist"]["recomputed"] == 3
    assert delta["dist"]["pair_check"]["observed"] == 2 and delta["dist"]["pair_check"]["widened"] == 1
    total = sum_tallies([tally_delta({}, before), delta])
    assert total["dist"]["decisions"] == 25 and total["dist"]["recomputed"] == 5
    assert total["dist"]["share"] == pytest.approx(0.2)
    assert total["dist"]["pair_check"]["observed"] == 3 and total["dist"]["pair_check"]["largest_change"] == pytest.approx(0.2)


def test_the_benchmark_scan_resumed_equals_one_run(tmp_path):
    from benchmarks.smollm2_speed import exact_scan
    from cel_lens.testing import planted_task, tiny_hooked_transformer

    model = tiny_hooked_transformer(n_layers=2, n_heads=4, seed=0)
    task = planted_task(model, n=12, heads="L1H2", name="planted")
    whole = exact_scan(model, task, "bf16")
    exact_scan(model, task, "bf16", tmp_path)
    resumed = exact_scan(model, task, "bf16", tmp_path)
    assert resumed["chunks_resumed"] == 1 and torch.equal(resumed["bits"], whole["bits"])
    assert resumed["recompute"]["dist"]["decisions"] == whole["recompute"]["dist"]["decisions"] == 9 * 12


def test_the_quick_part_runs_last_whatever_its_place():
    """Its extra torch threads outlive it and would be counted in the parts after it."""
    from benchmarks.smollm2_speed import ordered_parts

    assert ordered_parts("quick,arith,boolq") == ["arith", "boolq", "quick"]
    assert ordered_parts("plans") == ["plans"]
    with pytest.raises(SystemExit, match="unknown part"):
        ordered_parts("arith,quik")
