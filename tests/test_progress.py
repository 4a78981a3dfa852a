"""A sign of life on anything long: privlin.fit and privlin.sweep show their stages by default once
they have run ``PRIVLIN_PROGRESS_AFTER`` seconds (set to 0 here: every stage counts as long), and nothing with
``progress=False``."""
from __future__ import annotations

import warnings

import pytest

import privlin
from privlin import compilation, fit_groups, progress
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
    assert err.count("reading 200 rows into memory") == 2  # the line when shown, and the one with its time at the end
    lines = err.splitlines()
    assert all(line.startswith("privlin: the fit on 256 rows") for line in lines[2:])  # 200 rows padded to a bucket
    assert " 0/1 done (0%)" in lines[2] and lines[-1].endswith(" s") and "done" not in lines[-1]
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


def _fits_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if " rows: " in line and " done (" in line]


def test_the_fits_line_advances_with_a_fraction_and_an_estimate(blobs, shown_at_once, monkeypatch, capsys):
    monkeypatch.setattr(fit_groups, "CALL_WORK", 1.0)  # every setting its own call: the line moves between them
    X, y = blobs(200, d=6, k=3, seed=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sweep((X, y), epsilon=[1.0, 2.0, 4.0], method="sgd", steps=5, classes=[0, 1, 2], random_state=0)
    lines = _fits_lines(capsys.readouterr().err)
    done = [int(line.split(" rows: ", 1)[1].split("/")[0]) for line in lines]
    assert done == sorted(done) and {0, 1, 2, 3} <= set(done), lines  # the fraction advances, never back
    assert all(line.startswith("privlin: 3 settings on 256 rows: ") and "/3 done (" in line for line in lines)
    assert all(" left;" in line for line in lines if " 0/3 done" not in line)  # an estimate once one ran
    assert "estimate after the first settings run" in lines[0]


def test_compiling_is_said_only_while_compiling(blobs, shown_at_once, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(compilation, "programs_dir", lambda: tmp_path)  # an empty store of programs
    monkeypatch.setattr(compilation, "_programs", {})
    X, y = blobs(200, d=7, k=2, seed=6)

    def phases():
        _fit(X, y)
        return {line.rsplit("; ", 1)[1].rsplit(" ", 2)[0] for line in _fits_lines(capsys.readouterr().err)
                if "; " in line}

    assert "compiling (first fit of this form only)" in phases()  # nothing stored yet: built here
    monkeypatch.setattr(compilation, "_programs", {})  # a new process: the program is stored
    again = phases()
    assert "loading" in again and not any("compil" in p for p in again), again
    assert not any("compil" in p or "loading" in p for p in phases())  # this process's program: it only runs


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


def test_the_estimate_counts_down_while_a_program_runs(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: clock[0])
    line = progress.Fits(total=4, rows=256, enabled=False, work=4.0)
    line.phase("running")
    clock[0] += 60.0
    line.done(1, 60.0, 1.0)  # a minute per setting: three left, three minutes
    line.phase("running")
    assert "1/4 done (25%), ~3 min left; running 0 s" in line.line()
    clock[0] += 100.0
    assert "~80 s left; running 100 s" in line.line()  # the next setting has run 100 s of the 180 s left
    clock[0] += 200.0
    assert "~0 s left; running 300 s" in line.line()  # past the estimate: never negative
    line.phase("compiling")
    assert "~3 min left; compiling (first fit of this form only)" in line.line()  # a compile is not counted
