"""What a reader sees: numbers without scientific notation, sentences that say the table's numbers, figures that
fit a notebook."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from dqnlab import experiments as ex


@pytest.mark.parametrize(("value", "text"), [
    (689246.177, "689,246"), (116009.374, "116,009"), (1.408204, "1.41"), (0.554464, "0.554"), (12.345, "12.3"),
    (0.0005, "0.0005"), (0.99, "0.99"), (1.0, "1.00"), (2_000, "2,000"), (0, "0"), (5e-9, "0"), (math.nan, "–"),
    (None, "–"), ("sync=sum", "sync=sum"), (True, "True"),
])
def test_numbers_for_a_reader(value, text):
    assert ex.fmt_number(value) == text


def test_a_readable_table_has_no_scientific_notation():
    table = pd.DataFrame({"run": ["a", "b"], "env_steps/s": [1.1e6, 2e-5], "greedy score": [123456.7, math.nan],
                          "wide": [1, 2]})
    html = ex.readable(table, ["run", "env_steps/s", "greedy score"]).to_html()
    assert "1,100,000" in html and "e+06" not in html and "e-05" not in html and "wide" not in html


def _table():
    rows = [dict(scheme="serial", options="", variant="", workers=1, seeds=2, env_steps_per_s=100.0,
                 mean_at_end=50_000.0, **{"x serial to 2048 in half": 1.0, "x serial to 4096 in half": 1.0}),
            dict(scheme="independent", options="sync=sum", variant="", workers=2, seeds=2, env_steps_per_s=150.0,
                 mean_at_end=40_000.0, **{"x serial to 2048 in half": 1.2, "x serial to 4096 in half": 1.408}),
            dict(scheme="independent", options="", variant="", workers=2, seeds=2, env_steps_per_s=50.0,
                 mean_at_end=30_000.0, **{"x serial to 2048 in half": 3.0, "x serial to 4096 in half": math.nan}),
            dict(scheme="sharded", options="", variant="", workers=2, seeds=2, env_steps_per_s=5.0,
                 mean_at_end=20_000.0, **{"x serial to 2048 in half": math.nan, "x serial to 4096 in half": math.nan})]
    return pd.DataFrame(rows)


def test_the_sentences_say_the_tables_numbers():
    text = ex.versus_serial_text(_table(), "independent").splitlines()
    assert text == [
        "independent (sync=sum) x2 reached 4096 in half the games in 1.41x serial's time; mean score at the end "
        "40,000 (serial 50,000); env steps/s 1.50x serial's.",
        "independent (sync=periodic) x2 reached 2048 in half the games in 3.00x serial's time, but did not reach "
        "4096 in half the games in every seed; mean score at the end 30,000 (serial 50,000); env steps/s 0.5x "
        "serial's."]
    assert ex.versus_serial_text(_table(), "sharded").startswith(
        "sharded x2 did not reach 4096 in half the games in every seed;")
    assert ex.versus_serial_text(_table().iloc[1:], None) == "No serial run in this table: nothing to compare with."


def test_the_figure_fits_a_notebook(tmp_path):
    from test_scheme_learning import _row

    rows = [_row("serial", "", s, m, 20_000 * m, 0.4, 0.3 * m) for s in (1, 2) for m in (1.0, 2.0)]
    rows += [_row(scheme, "", s, m, 10_000 * m, 0.4, 0.2 * m) for scheme in ("shared", "sharded", "averaged",
                                                                           "actors", "independent")
             for s in (1, 2) for m in (1.0, 2.0)]
    fig = ex.versus_serial_figure({"rows": rows}, ("score_mean",))
    width, _ = fig.get_size_inches()
    assert width <= 10.5
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible() and ax.get_title()]
    assert len(titles) == 5 and titles[0].startswith("shared (lock=True)")
    plt.close(fig)


def test_a_readable_table_has_short_headers_text_on_the_left_and_a_plain_variant():
    table = pd.DataFrame({"variant": ["", "prioritized"], "seed": [0, 1], "final_score_mean": [4716.2, 5254.0],
                          "minutes_to_2048_in_half": [math.nan, 1.5]})
    styler = ex.readable(table)
    assert list(styler.data.columns) == ["variant", "seed", "mean score at end", "min to 2048 in half"]
    assert list(styler.data["variant"]) == ["plain", "prioritized"]
    html = styler.to_html()
    assert "th.col0 {\n  text-align: left;" in html and "col1 {\n  text-align: left" not in html


def test_the_versus_serial_table_and_text_go_scheme_by_scheme_serial_first():
    table = _table().iloc[[1, 3, 0, 2]].assign(  # independent, sharded, serial, independent
        **dict.fromkeys(("min to 10,000", "min to 2048 in half", "min to 4096 in half"), 1.0))
    assert list(ex.versus_serial_table(table)["configuration"]) == [
        "serial", "independent (sync=sum) x2", "independent (sync=periodic) x2", "sharded x2"]
    assert [line.split(" ")[0] for line in ex.versus_serial_text(table).splitlines()] == \
        ["independent", "independent", "sharded"]
