"""Every user mistake at the command line is one line on stderr and a non-zero exit, never a traceback; a
refused job leaves the store exactly as it was."""
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from featurize.__main__ import main as featurize_cli
from stores.__main__ import main as stores_cli

from .inject import error_line, snapshot

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("touch code_ran",))


def folder_of_images(root, classes=("a", "b"), n=3):
    for c in classes:
        (root / c).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            Image.fromarray(np.full((6, 6, 3), 40 * i, np.uint8)).save(root / c / f"{i}.png")
    return root


def px(*args):
    return ["--backbone", "pixels", "--num-workers", "0", "--no-progress", *map(str, args)]


def cifar_release(root, bad=None):
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        with open(folder / name, "wb") as f:
            pickle.dump({"data": np.zeros((2, 3072), np.uint8), "labels": [0, 1]}, f, protocol=2)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [f"c{i}" for i in range(10)]}, f, protocol=2)
    if bad == "crafted":
        with open(folder / "data_batch_2", "wb") as f:
            pickle.dump({"data": _RunsCode(), "labels": [0]}, f, protocol=2)
    elif bad == "truncated":
        (folder / "data_batch_2").write_bytes((folder / "data_batch_1").read_bytes()[:100])
    return root


def mistakes(tmp_path):
    folder = folder_of_images(tmp_path / "imgs")
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "not_a_store").mkdir()
    (tmp_path / "not_a_store" / "notes.txt").write_text("mine")
    return {
        "--out is an existing file": (px("--dataset", f"imagefolder:{folder}", "--out", tmp_path / "a_file"),
                                      "is a file"),
        "--out is a folder of other files": (px("--dataset", f"imagefolder:{folder}", "--out",
                                                tmp_path / "not_a_store"), "not a feature store"),
        "crafted CIFAR pickle": (px("--dataset", "cifar10", "--data-dir", cifar_release(tmp_path / "c1", "crafted"),
                                    "--out", tmp_path / "c1.zarr"), "refusing to load global"),
        "truncated CIFAR pickle": (px("--dataset", "cifar10", "--data-dir",
                                      cifar_release(tmp_path / "c2", "truncated"), "--out", tmp_path / "c2.zarr"),
                                   "not a readable CIFAR pickle"),
        "missing imagefolder": (px("--dataset", f"imagefolder:{tmp_path / 'nope'}"), "does not exist"),
        "missing imagenet --data-dir": (px("--dataset", "imagenet", "--data-dir", tmp_path / "nope"), "nope"),
        "missing CIFAR --data-dir": (px("--dataset", "cifar10", "--data-dir", tmp_path / "nope"), "missing"),
        "unknown device": (px("--dataset", "digits", "--device", "tpu"), "--device"),
        "bad --shard": (px("--dataset", "digits", "--shard", "3/2"), "--shard"),
    }


@pytest.mark.parametrize("case", [
    "--out is an existing file", "--out is a folder of other files", "crafted CIFAR pickle", "truncated CIFAR pickle",
    "missing imagefolder", "missing imagenet --data-dir", "missing CIFAR --data-dir", "unknown device",
    "bad --shard"])
def test_featurize_mistake_is_one_line(tmp_path, capsys, monkeypatch, case):
    monkeypatch.chdir(tmp_path)
    argv, expect = mistakes(tmp_path)[case]
    assert featurize_cli(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("featurize: error:") and err.count("\n") == 1 and expect in err, err
    assert not (tmp_path / "code_ran").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here")
def test_featurize_cuda_without_a_gpu_in_a_real_process(tmp_path):
    env = {**os.environ, "PYTHONPATH": ROOT}
    r = subprocess.run([sys.executable, "-m", "featurize", *px("--dataset", "digits", "--device", "cuda",
                                                               "--out", tmp_path / "x.zarr")],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert "no CUDA GPU" in r.stderr and not (tmp_path / "x.zarr").exists()


def test_help_shows_defaults(capsys):
    with pytest.raises(SystemExit) as e:
        featurize_cli(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "(default: 256)" in out and "(default: float16)" in out and "(default: auto)" in out


@pytest.mark.parametrize("target", ["missing", "file"])
def test_stores_cli_mistakes_are_one_line(tmp_path, capsys, target):
    path = tmp_path / "missing.zarr"
    if target == "file":
        path = tmp_path / "f.zarr"
        path.write_text("x")
    for command in ("info", "verify", "repair"):  # verify may show its progress first on a loaded box
        assert stores_cli([command, str(path)]) != 0
        assert path.name in error_line(capsys.readouterr().err)


SECOND_JOBS = {  # first job's options, second job's options (same --out)
    "another backbone": ([], ["--backbone", "vip_toy"]),
    "another head": (["--backbone", "vip_toy", "--head", "cls"], ["--backbone", "vip_toy", "--head", "gap"]),
    "another dataset": ([], ["--dataset", "OTHER"]),
    "another dtype": ([], ["--dtype", "float32"]),
    # train (6 rows) was written in one shard of 6 rows, test in shards of 1: --shard-rows 6 suits train, not test
    "another layout for the second split": (["--split", "test", "--shard-rows", "1"], ["--shard-rows", "6"]),
}


@pytest.mark.parametrize("second", list(SECOND_JOBS))
def test_a_refused_second_job_changes_nothing(tmp_path, capsys, second):
    """Nothing written, not even the root provenance: every split is checked before the first write."""
    folder_of_images(tmp_path / "imgs" / "train")
    folder_of_images(tmp_path / "imgs" / "test")
    other = folder_of_images(tmp_path / "other", classes=("x", "y", "z"))
    out = tmp_path / "s.zarr"

    def job(options):
        options = [str(other) if o == "OTHER" else o for o in options]
        if "--dataset" in options:
            options[options.index("--dataset") + 1] = f"imagefolder:{options[options.index('--dataset') + 1]}"
        argv = px("--dataset", f"imagefolder:{tmp_path / 'imgs'}", "--split", "train", "--out", out, *options)
        if "--split" in options and options.index("--split") > 0:
            argv.remove("--split"), argv.remove("train")
        return featurize_cli(argv)

    first, second_job = SECOND_JOBS[second]
    if second.endswith("second split"):
        assert job([]) == 0  # train with the default layout; the second job would add test with another one
    assert job(first) == 0
    before, raw_root = snapshot(out), (out / "zarr.json").read_bytes()
    capsys.readouterr()
    if second.endswith("second split"):
        second_job = second_job + ["--split", "train,test"]
    assert job(second_job) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nothing was written" in err, err
    why = {"another dtype": "split 'train' exists with layout", "another layout for the second split":
           "split 'test' exists with layout"}.get(second, "another extraction")
    assert why in err, err
    assert snapshot(out) == before and (out / "zarr.json").read_bytes() == raw_root


def test_xarray_sees_ids_as_a_coordinate(tmp_path):
    xr = pytest.importorskip("xarray")
    from .inject import write_store
    write_store(tmp_path / "s.zarr")
    ds = xr.open_zarr(tmp_path / "s.zarr", group="train", zarr_format=3)
    assert "ids" in ds.coords and ds["features"].dims == ("sample", "feature")
    assert list(ds["ids"].values[:2]) == ["img/0000.png", "img/0001.png"]


_HELP_PROBE = """
import runpy, sys
before = set(sys.modules)
import privlin  # the package itself (its own imports are not the command's)
package = set(sys.modules)
sys.argv = [{module!r}, "--help"]
try:
    runpy.run_module({module!r}, run_name="__main__", alter_sys=True)
except SystemExit as e:
    assert e.code == 0, e.code
heavy = {{"jax", "zarr", "dp_accounting", "torch", "numpy", "scipy"}}
new = {{m.split(".")[0] for m in set(sys.modules) - package}}
print("HEAVY", sorted(heavy & new), "jax" in package)
"""


@pytest.mark.parametrize("module", ["stores", "privlin.ledger"])
def test_help_answers_before_any_heavy_import(module):
    """``--help`` parses before NumPy, zarr, dp-accounting or JAX load (no timing asserted: the modules are)."""
    r = subprocess.run([sys.executable, "-c", _HELP_PROBE.format(module=module)], capture_output=True, text=True,
                       cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "usage:" in r.stdout and "(default:" in r.stdout or module == "stores"
    heavy, privlin_imports_jax = r.stdout.rsplit("HEAVY", 1)[1].rsplit(" ", 1)
    assert heavy.strip() == "[]", heavy
    if privlin_imports_jax.strip() == "False":  # once privlin's own __init__ is lazy, nothing loads JAX at all
        assert "jax" not in heavy


def test_stores_info_into_a_closed_pipe_is_quiet(tmp_path):
    from .inject import write_store

    write_store(tmp_path / "s.zarr")
    for reader in ("head -1", "true"):  # ``true`` never reads: every write meets a closed pipe
        r = subprocess.run(f"{sys.executable} -m stores info {tmp_path / 's.zarr'} | {reader}", shell=True,
                           capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert r.stdout.startswith("store ") and r.stdout.count("\n") == 1 or reader == "true"
        assert r.stderr == "", r.stderr  # was "python -m stores: error: [Errno 32] Broken pipe"
