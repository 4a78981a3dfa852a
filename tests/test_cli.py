"""Every entry point follows stores.cli: a user mistake is one line on stderr and a non-zero exit, never a
traceback, and changes nothing; ``--help`` shows every default and limit; slow steps show progress.

The mistakes run in-process through each module's ``main`` (what ``python -m`` and the ``featurize`` script
call); the slow test runs one mistake per entry point in a real process."""
import argparse
import os
import subprocess
import sys

import pytest
import torch

from backbones.mae import train as mae_train
from experiments import eps_sweep, quickstart, reproduce_mehta, reproduce_randp
from featurize import __main__ as featurize_main
from privlin import audit
from privlin.ledger import __main__ as ledger_main
from stores import __main__ as stores_main
from stores import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: prog -> (main, parser factory)
ENTRY_POINTS = {
    "featurize": (featurize_main.main, featurize_main.build_parser),
    "python -m stores": (stores_main.main, stores_main.build_parser),
    "python -m privlin.audit": (audit.main, audit._audit_parser),
    "python -m privlin.ledger": (ledger_main.main, ledger_main.build_parser),
    "python -m experiments.eps_sweep": (eps_sweep.main, eps_sweep.build_parser),
    "python -m experiments.quickstart": (quickstart.main, quickstart.build_parser),
    "python -m experiments.reproduce_mehta": (reproduce_mehta.main, reproduce_mehta.build_parser),
    "python -m experiments.reproduce_randp": (reproduce_randp.main, reproduce_randp.build_parser),
    "python -m backbones.mae.train": (mae_train.main, mae_train._parser),
}


@pytest.fixture
def paths(tmp_path, make_store, blobs, request):
    """A small store (train/test), one without a test split (each made only when the case names it), a plain
    file, a missing path."""
    classes = {"classes": ["0", "1", "2"], "backbone": "toy", "dataset": "blobs"}
    wanted = " ".join(str(v) for v in getattr(request.node, "callspec", None) and request.node.callspec.params.values()
                      or ["STORE NOTEST"])
    (tmp_path / "a_file").write_text("x")
    out = {"FILE": str(tmp_path / "a_file"), "MISSING": str(tmp_path / "missing.zarr"), "TMP": str(tmp_path)}
    if "STORE" in wanted:
        out["STORE"] = make_store({"train": blobs(60, d=8, k=3), "test": blobs(30, d=8, k=3, seed=1)},
                                  attrs=classes).url
    if "NOTEST" in wanted:
        out["NOTEST"] = make_store({"train": blobs(60, d=8, k=3)}, attrs=classes).url
    return out


# (prog, argv, what the line must say, exit code); STORE, NOTEST, FILE, MISSING, TMP are replaced by paths
MISTAKES = [
    ("featurize", "--backbone pixels --dataset digits --out FILE --no-progress", "is a file", 2),
    ("featurize", "--backbone pixels --dataset digits --batch-size 0", "--batch-size: must be >= 1, got 0", 2),
    ("featurize", "--backbone pixels --dataset nosuch --no-progress", "unknown dataset 'nosuch'", 2),
    ("featurize", "--backbone nosuch --dataset digits", "unknown backbone 'nosuch'", 2),
    ("featurize", "--backbone pixels", "the following arguments are required: --dataset", 2),
    ("python -m stores", "info MISSING", "no feature store", 2),
    ("python -m stores", "verify FILE", "is a file", 2),
    ("python -m stores", "info FILE", "is a file", 2),
    ("python -m stores", "check STORE", "invalid choice: 'check'", 2),
    ("python -m privlin.audit", "--epsilon 0", "--epsilon: must be > 0, finite, got 0", 2),
    ("python -m privlin.audit", "--epsilon one", "--epsilon: expected a number, got 'one'", 2),
    ("python -m privlin.audit", "--delta 0", "--delta: must be in (0, 1), got 0", 2),
    ("python -m privlin.audit", "--runs 0", "--runs: must be >= 16, got 0", 2),
    ("python -m privlin.audit", "--confidence 1.5", "--confidence: must be in (0, 1), got 1.5", 2),
    ("python -m privlin.audit", "--method gaussian_sum --one-run", "--method gaussian_sum is for the canary", 2),
    ("python -m privlin.audit", "--method minibatch", "--method minibatch is for --one-run", 2),
    ("python -m privlin.ledger", "STORE --delta 0", "--delta: must be in (0, 1), got 0", 2),
    ("python -m privlin.ledger", "STORE --split nosuch", "no split 'nosuch'", 2),
    ("python -m privlin.ledger", "MISSING", "no store, split or privacy ledger", 2),
    ("python -m privlin.ledger", "FILE", "is a file, not a feature store", 2),
    ("python -m privlin.ledger", "TMP", "no feature store at", 2),
    ("python -m experiments.eps_sweep", "MISSING", "no feature store", 2),
    ("python -m experiments.eps_sweep", "STORE --eps 0", "--eps: must be in (0, inf], got 0", 2),
    ("python -m experiments.eps_sweep", "STORE --split nosuch", "--split 'nosuch': no such split", 2),
    ("python -m experiments.eps_sweep", "STORE --eval-split val", "--eval-split 'val': no such split", 2),
    ("python -m experiments.eps_sweep", "STORE --val-split nosuch", "--val-split 'nosuch': no such split", 2),
    ("python -m experiments.eps_sweep", "STORE --val-split train", "must be held out", 2),
    ("python -m experiments.eps_sweep", "STORE --out FILE/sub", "is not a folder", 2),
    ("python -m experiments.eps_sweep", "STORE --draws 0", "--draws: must be >= 1", 2),
    ("python -m experiments.quickstart", "--seeds 0", "--seeds: must be >= 1, got 0", 2),
    ("python -m experiments.quickstart", "--backbones pixels,nosuch --out TMP/qs", "unknown backbone 'nosuch'", 2),
    ("python -m experiments.quickstart", "--backbones vip_base --out TMP/qs", "ckpt-vip-laion233m-base.pth", 2),
    ("python -m experiments.quickstart", "--out FILE", "is not a folder", 2),
    ("python -m experiments.reproduce_mehta", "--cifar10 MISSING", "--cifar10 MISSING: no feature store there", 2),
    ("python -m experiments.reproduce_mehta", "--cifar10 NOTEST", "has no test/val split", 2),
    ("python -m experiments.reproduce_randp", "--imagenet NOTEST", "has no test/val split", 2),
    ("python -m experiments.reproduce_randp", "--seed x", "--seed: invalid int value: 'x'", 2),
    ("python -m backbones.mae.train", "--data digitz --out TMP/m", "digitz", 2),
    ("python -m backbones.mae.train", "--dp --epsilon 0 --data digits --out TMP/m", "epsilon", 2),
    ("python -m backbones.mae.train", "--resume --out TMP/none", "no checkpoint", 2),
    ("python -m backbones.mae.train", "--size huge", "invalid choice: 'huge'", 2),
]


def _argv(text: str, paths: dict) -> list[str]:
    words = text.split()
    for name, value in sorted(paths.items(), key=lambda kv: -len(kv[0])):
        words = [w.replace(name, value) for w in words]
    return words


def _ledgers(root: str) -> dict:
    """Every privacy ledger under ``root`` and its bytes (a refused command must leave them as they were)."""
    found = {}
    for folder, _, files in os.walk(root):
        for f in files:
            if f == "privacy_ledger.json":
                path = os.path.join(folder, f)
                found[path] = open(path, "rb").read()
    return found


@pytest.mark.parametrize("prog, args, says, code", MISTAKES, ids=[f"{m[0].split()[-1]} {m[1]}" for m in MISTAKES])
def test_a_mistake_is_one_line_and_changes_nothing(prog, args, says, code, paths, capsys, monkeypatch):
    monkeypatch.delenv("PRIVLIN_WEIGHTS_DIR", raising=False)
    monkeypatch.delenv(cli.TRACEBACK_ENV, raising=False)
    monkeypatch.chdir(paths["TMP"])
    main, _ = ENTRY_POINTS[prog]
    before = _ledgers(paths["TMP"])
    try:
        got = main(_argv(args, paths))
    except SystemExit as e:  # argparse's usage errors exit (with the one line)
        got = e.code
    err = capsys.readouterr().err
    assert got == code, err
    assert err.count("\n") == 1 and err.startswith(f"{prog}: error: ") and "Traceback" not in err, err
    assert _argv(says, paths)[0] in err or says in err, err
    assert _ledgers(paths["TMP"]) == before  # nothing charged
    assert not os.path.exists(os.path.join(paths["TMP"], "qs"))  # nothing written


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here")
def test_featurize_cuda_without_a_gpu_is_one_line(paths, capsys):
    assert featurize_main.main(["--backbone", "pixels", "--dataset", "digits", "--device", "cuda", "--no-progress",
                                "--out", paths["TMP"] + "/x.zarr"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no CUDA GPU" in err and not os.path.exists(paths["TMP"] + "/x.zarr")


@pytest.mark.parametrize("prog", list(ENTRY_POINTS))
def test_help_shows_every_default_and_limit(prog):
    parser = ENTRY_POINTS[prog][1]()
    formatter = parser._get_formatter()
    for action in parser._actions:
        text = " ".join(formatter._format_action(action).split())
        if action.option_strings and action.nargs != 0 and action.default is not None:
            assert "(default: " in text, text
        if isinstance(action.type, cli.Interval):
            assert f"({action.type})" in text, text


def test_ledger_of_an_existing_split_with_nothing_charged_is_empty_not_an_error(paths, capsys):
    assert ledger_main.main([paths["STORE"], "--split", "test"]) == 0
    assert "(no mechanisms recorded)" in capsys.readouterr().out


# ----------------------------------------------------------------------------- the convention itself


def test_interval_parses_checks_and_describes_itself():
    unit = cli.Interval(float, 0, 1, closed="neither")
    assert unit("0.5") == 0.5 and str(unit) == "in (0, 1)"
    for bad, why in [("0", "must be in (0, 1), got 0"), ("1", "must be in (0, 1)"), ("nan", "must be"),
                     ("x", "expected a number, got 'x'")]:
        with pytest.raises(argparse.ArgumentTypeError, match=why.replace("(", r"\(").replace(")", r"\)")):
            unit(bad)
    runs = cli.Interval(int, 16)
    assert runs("16") == 16 and str(runs) == ">= 16"
    with pytest.raises(argparse.ArgumentTypeError, match="expected an integer"):
        runs("16.5")
    eps = cli.Interval(float, 0, float("inf"), closed="right")
    assert eps("inf") == float("inf") and str(eps) == "in (0, inf]"
    assert str(cli.Interval(float, 0, float("inf"), closed="neither")) == "> 0, finite"


def test_entry_point_catches_only_the_listed_mistakes(capsys, monkeypatch):
    monkeypatch.delenv(cli.TRACEBACK_ENV, raising=False)

    @cli.entry_point("prog", (ValueError,))
    def main(argv):
        raise {"user": cli.UserError("nothing there", code=1), "value": ValueError("bad\n  value"),
               "bug": TypeError("a bug")}[argv[0]]

    assert main(["user"]) == 1 and capsys.readouterr().err == "prog: error: nothing there\n"
    assert main(["value"]) == 2 and capsys.readouterr().err == "prog: error: bad value\n"
    with pytest.raises(TypeError):  # a bug keeps its traceback
        main(["bug"])
    monkeypatch.setenv(cli.TRACEBACK_ENV, "1")
    with pytest.raises(ValueError):  # asked for: the traceback of a user error
        main(["value"])


def test_output_folder_refuses_files(tmp_path):
    (tmp_path / "f").write_text("x")
    assert cli.output_folder(str(tmp_path / "new" / "deeper")) == str(tmp_path / "new" / "deeper")
    for bad in (tmp_path / "f", tmp_path / "f" / "sub"):
        with pytest.raises(argparse.ArgumentTypeError, match="is not a folder"):
            cli.output_folder(str(bad))


def test_status_is_silent_for_quick_steps_and_timed_for_slow_ones(capsys):
    import time

    with cli.status("quick step", after=5.0):
        pass
    assert capsys.readouterr().err == ""
    with cli.status("slow step", after=0.05):
        time.sleep(0.3)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "slow step ..." and err[1].startswith("slow step: ") and err[1].endswith(" s")
    assert 0.3 <= float(err[1].split()[-2]) < 5


# ----------------------------------------------------------------------------- in real processes


REAL = [("featurize", "-m featurize --backbone pixels --dataset digits --batch-size 0"),
        ("python -m stores", "-m stores info MISSING"),
        ("python -m privlin.audit", "-m privlin.audit --confidence 1.5"),
        ("python -m privlin.ledger", "-m privlin.ledger STORE --split nosuch"),
        ("python -m experiments.eps_sweep", "-m experiments.eps_sweep STORE --eps 0"),
        ("python -m experiments.quickstart", "-m experiments.quickstart --backbones nosuch"),
        ("python -m experiments.reproduce_mehta", "-m experiments.reproduce_mehta --cifar10 MISSING"),
        ("python -m experiments.reproduce_randp", "-m experiments.reproduce_randp --imagenet MISSING"),
        ("python -m backbones.mae.train", "-m backbones.mae.train --resume --out MISSING")]


@pytest.mark.slow  # eight interpreters importing torch/jax: ~60 s on a 2-core CPU
@pytest.mark.parametrize("prog, args", REAL, ids=[r[0] for r in REAL])
def test_a_mistake_in_a_real_process_has_no_traceback(prog, args, paths):
    r = subprocess.run([sys.executable, *_argv(args, paths)], capture_output=True, text=True, cwd=paths["TMP"],
                       env={**os.environ, "PYTHONPATH": ROOT}, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("featurize: error:" if prog == "featurize" else f"{prog}: error:"), r.stderr
