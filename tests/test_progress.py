"""A sign of life on anything long (issue 37.2): privlin.fit and privlin.sweep show their stages by default once
they have run ``PRIVLIN_PROGRESS_AFTER`` seconds (set to 0 here: every stage counts as long), and nothing with
``progress=False``."""
from __future__ import annotations

import warnings

import pytest

import privlin
from privlin import progress
from privlin.sweep import sweep


@pytest.fixture
def shown_at_once(monkeypatch):
    monkeypatch.setenv(progress.AFTER_ENV, "0")


def _fit(X, y, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return privlin.fit((X, y), epsilon=2.0, classes=[0, 1], method="adam1", random_state=0, **kw)


def test_fit_shows_its_stage_by_default_and_nothing_with_progress_false(blobs, shown_at_once, capsys):
    X, y = blobs(200, d=4, k=2, seed=3)
    _fit(X, y)
    err = capsys.readouterr().err
    for stage in ("reading 200 rows into memory", "the fit on 256 rows"):  # 200 rows padded to their bucket
        assert err.count(stage) == 2  # the line when shown, and the one with its time at the end
    assert err.count("privlin: ") == 4
    _fit(X, y, progress=False)
    assert capsys.readouterr().err == ""
    _fit(X, y, verbose=False)  # the estimator's name for the same switch
    assert capsys.readouterr().err == ""


def test_streamed_sweep_shows_passes_and_evaluation_and_nothing_with_progress_false(blobs, make_store,
                                                                                   shown_at_once, capsys):
    X, y = blobs(300, d=4, k=2, seed=4)
    store = make_store({"train": (X[:200], y[:200]), "test": (X[200:], y[200:])})
    grid = {"epsilon": [2.0, 4.0], "method": "adam1", "classes": [0, 1], "memory_limit": 1, "random_state": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = sweep(store, **grid)
        err = capsys.readouterr().err
        assert "privlin: adam1 pass" in err  # a pass over the store (a tqdm bar)
        assert "privlin: evaluating 2 settings on 100 rows" in err
        quiet = sweep(store, **grid, progress=False)
    assert capsys.readouterr().err == ""
    assert [r["accuracy"] for r in quiet.records] == [r["accuracy"] for r in res.records]  # same fits, seeded


def test_the_stage_line_says_compiling_the_first_time_only():
    program = ("test_progress", object())
    first = progress.in_memory(program, [0, 1, 2], 10, 512)
    assert first == "compiling (first fit of this form only) and running settings 1-3 of 10 on 512 rows"
    assert progress.in_memory(program, [3], 10, 512) == "running settings 4-4 of 10 on 512 rows"
    assert progress.in_memory(("test_progress", object()), [0], 1, 256).endswith("running the fit on 256 rows")


def test_threshold_from_the_environment(monkeypatch):
    monkeypatch.delenv(progress.AFTER_ENV, raising=False)
    assert progress.after() == 2.0
    monkeypatch.setenv(progress.AFTER_ENV, "0.5")
    assert progress.after() == 0.5
    assert progress.bar([1, 2], None, True).disable and progress.bar([1, 2], "x", False).disable
    assert not progress.bar([1, 2], "x", True).disable
    monkeypatch.setenv(progress.AFTER_ENV, "soon")  # read while a fit runs, after its charge: never an error
    with pytest.warns(RuntimeWarning, match="PRIVLIN_PROGRESS_AFTER must be a number of seconds, not 'soon'"):
        assert progress.after() == 2.0
