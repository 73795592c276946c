"""cli/plant.py: the kinds it offers and the refusals that need no model."""

from __future__ import annotations

import pytest

from cel_lens.cli import main


def test_help_offers_the_capability_control_on_two_choice_addition(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["plant", "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert "sums-capability" in out and "sums3-capability" in out and "--write-rows" in out


def test_write_rows_is_refused_for_the_boolq_plants() -> None:
    with pytest.raises(SystemExit, match="--write-rows is for the sums plants"):
        main(["plant", "prior", "--write-rows"])
