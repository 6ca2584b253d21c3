"""benchmarks/run.py's host-call rows: each the median of several processes, and the markdown
that shows their spread."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import bench_rust  # noqa: E402
import protocols  # noqa: E402
import run  # noqa: E402


def test_each_row_is_the_run_whose_ratio_is_the_median():
    runs = [
        {"a": {"amso": 90.0, "numpy": 100.0}, "b": {"amso": 50.0, "numpy": 40.0}},
        {"a": {"amso": 130.0, "numpy": 100.0}, "b": {"amso": 40.0, "numpy": 40.0}},
        {"a": {"amso": 100.0, "numpy": 100.0}, "b": {"amso": 20.0, "numpy": 40.0}},
    ]
    chosen, spread = run.median_rows(runs, run.protocol_ratio)
    assert chosen == {"a": {"amso": 100.0, "numpy": 100.0}, "b": {"amso": 40.0, "numpy": 40.0}}
    assert spread == {"a": [0.9, 1.0, 1.3], "b": [0.5, 1.0, 1.25]}


def test_an_even_count_takes_the_lower_middle_run():
    runs = [{"a": {"amso": float(t), "rust-numpy": 100.0, "PyO3 alone": 1.0}} for t in (120, 80, 100, 90)]
    chosen, spread = run.median_rows(runs, run.pair_ratio)
    assert chosen["a"]["amso"] == 90.0  # ratios 0.8, 0.9, 1.0, 1.2: never the floor column
    assert spread["a"] == [0.8, 0.9, 1.0, 1.2]


def test_the_best_peer_is_the_protocol_rows_reference():
    assert run.protocol_ratio({"amso": 100.0, "cupy": 400.0, "torch": 200.0}) == 0.5


def test_a_row_without_a_peer_is_the_first_runs_without_a_spread():
    runs = [{"device": {"amso": float(t)}, "host": {"amso": float(t), "numpy": 100.0}} for t in (90, 80, 70)]
    chosen, spread = run.median_rows(runs, run.protocol_ratio)
    assert chosen["device"] == {"amso": 90.0} and "device" not in spread
    assert chosen["host"]["amso"] == 80.0 and spread["host"] == [0.7, 0.8, 0.9]


def test_the_tables_show_the_spread_in_a_last_column():
    rows = {"__dlpack__() host": {"amso": 90.0, "numpy": 100.0}}
    text = protocols.markdown(rows, {"__dlpack__() host": [0.85, 0.9, 1.2]})
    assert "| `__dlpack__() host` | 90 | 100 | 0.90 | 0.85-1.20 |" in text
    report = {"rows": {"sum": {"amso": 99.0, "rust-numpy": 100.0}}, "missing": [], "spread": {"sum": [0.95, 0.99, 1.01]}}
    assert "| sum | 99 | 100 | 0.99 | - | 0.95-1.01 |" in bench_rust.markdown(report)
    assert "spread" not in protocols.markdown(rows)  # reports before the spread read as they did


def test_the_docs_name_the_number_of_processes():
    words = {5: "five"}
    root = Path(__file__).resolve().parents[2]
    for page in ("DEVELOPERS.md", "benchmarks/results/README.md"):
        text = " ".join((root / page).read_text().split())
        assert f"the median of {words[run.PROCESSES]} such processes" in text, page
