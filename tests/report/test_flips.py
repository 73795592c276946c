"""The flips figure and text from data alone: counts, rows by kind, a JSON round trip."""

from __future__ import annotations

import json

from cel_lens.report.flips import FlippedExample, Flips, HeadView, format_flips, plot_flips

VIEW = HeadView("L0H0", (("u+@1", 0.4), ("=@11", 0.2)), 1.5, 3.25)
FLIPS = Flips(
    heads="L0H0", task="organism_a", split="test", n=100, n_fixed=7, n_broken=2,
    examples=(
        FlippedExample("a/1", "fixed", "u+ v- =", " pos", "skip", "pos", "skip", (VIEW,)),
        FlippedExample("a/2", "broken", "<s> v+ =", " neg", "neg", "pos", "pos", (VIEW,)),
    ),
)


def test_round_trip_and_net_gain():
    assert Flips.from_dict(json.loads(json.dumps(FLIPS.to_dict()))) == FLIPS
    assert FLIPS.net_gain == 0.05
    assert FLIPS.summary() == "ablating L0H0 on organism_a/test (n=100): fixes 7, breaks 2, net +5.00 pp"


def test_text_and_table_show_every_example_and_head():
    text = format_flips(FLIPS)
    assert "[fixed] a/1" in text and "[broken] a/2" in text
    assert "L0H0: attends to u+@1 0.40, =@11 0.20; direct effect on logit(answer) - logit('skip') +3.25" in text
    fig = plot_flips(FLIPS)
    table = fig.data[0]
    assert table.type == "table" and len(table.cells.values[0]) == 2
    assert list(table.cells.values[0]) == ["fixed", "broken"]
    assert table.cells.values[1][1] == "&lt;s&gt; v+ ="  # escaped: plotly would read <s> as a tag
    html = FLIPS._repr_html_()
    assert "&lt;s&gt;" in html and html.count("<tr") == 3
    assert "no example changes" in format_flips(Flips("L0H0", "t", "test", 10, 0, 0))


def test_the_table_writes_answers_alike_and_names_the_rival():
    """The table showed ``' pos'`` beside ``'pos'`` and "+3.25 (answer +1.50)" without saying
    against which token the margin is taken."""
    table = plot_flips(FLIPS).data[0]
    answers, intact = list(table.cells.values[2]), list(table.cells.values[3])
    assert answers == ["&#x27;pos&#x27;", "&#x27;neg&#x27;"] and intact[1] == "&#x27;neg&#x27;"  # no leading space
    assert table.cells.values[6][0] == "+3.25 vs &#x27;skip&#x27; (answer alone +1.50)"
    assert "direct effect on answer vs rival" in table.header.values[6]
