"""The README's examples run as written (issue 16): its catalog block is written to ``catalog.toml`` next to
a ``visits.duckdb`` of that shape, and every Python block runs in that folder, in order."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.DOTALL)


def _blocks(language: str) -> list[str]:
    return [code for lang, code in BLOCK.findall(README.read_text()) if lang == language]


def test_the_readme_examples_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (catalog,) = _blocks("toml")
    (tmp_path / "catalog.toml").write_text(catalog)
    with duckdb.connect(str(tmp_path / "visits.duckdb")) as con:
        con.execute(
            "CREATE TABLE visits AS SELECT i // 3 AS user_id, "
            "['food', 'rent', 'travel', 'health'][1 + i % 4] AS category, "
            "CAST((i * 37) % 500 AS DOUBLE) AS amount FROM range(6000) t(i)"
        )
    monkeypatch.chdir(tmp_path)
    python = _blocks("python")
    assert len(python) >= 3
    for code in python:
        exec(compile(code, str(README), "exec"), {"__name__": "readme"})
    printed = capsys.readouterr().out
    # the quick start's remaining budget, explain's report, the accuracy query's table and what remains of 3
    # after epsilon 1 and the accuracy query's 0.3 (the least epsilon for +-50 at 95%, from the plan alone)
    # and the synthesis' charge: the zCDP curve of rho_for(1, 1e-6) (kakeibo.synth.mst's doctest)
    markers = ("epsilon=0.75", "privacy loss: epsilon=1", "engine statement:", "n_ci_low", "epsilon=1.7")
    for marker in (*markers, "rho=0.0243559-zCDP release"):
        assert marker in printed, marker
