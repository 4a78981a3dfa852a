"""The featurize job end to end: store contents, provenance, kill -9 + resume, two ranks, corrupt images."""
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
import zarr
from PIL import Image

import backbones
import stores
from featurize import CorruptImageError, ShardAssignment, extract, open_split
from featurize.__main__ import main
from featurize.job import shard_batches

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N_PER_CLASS = 32


def make_folder(root, n_per_class=N_PER_CLASS):
    rng = np.random.default_rng(0)
    for cls in ("a", "b"):
        (root / cls).mkdir(parents=True, exist_ok=True)
        for i in range(n_per_class):
            Image.fromarray(rng.integers(0, 256, (36, 40, 3), dtype=np.uint8)).save(root / cls / f"img_{i:03d}.png")
    return root


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A 64-image ImageFolder, test-made vip_toy weights, and one clean CLI run to compare against."""
    base = tmp_path_factory.mktemp("featurize")
    folder = make_folder(base / "clean")
    torch.manual_seed(0)
    net = backbones.build_architecture(backbones.get_config("vip_toy"))
    torch.save({"model": {k: v.half() for k, v in net.state_dict().items()}}, base / "toy.pth")
    clean = base / "clean.zarr"
    # the CLI's main in this process (what `featurize` runs; the real processes are the kill -9 and two-rank
    # tests below, which must each reproduce this store bitwise); no loader workers: no fork of this process,
    # which has JAX's threads (workers run in test_workers_start_from_a_fork_server... and the two-rank test)
    assert main(cli_args(base, folder, clean, "--num-workers", "0")) == 0
    return base, folder, base / "toy.pth", clean


def cli_args(base, folder, out, *extra):
    return ["--backbone", "vip_toy", "--weights", str(base / "toy.pth"), "--dataset", f"imagefolder:{folder}",
            "--split", "train", "--head", "blocks", "--out", str(out), "--batch-size", "8", "--shard-rows", "8",
            "--no-progress", *extra]


def cli_env():
    return {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}


def assert_same_store(a, b, split="train"):
    ga, gb = zarr.open_group(str(a), mode="r")[split], zarr.open_group(str(b), mode="r")[split]
    for name in ("features", "labels", "ids", "valid", "done"):
        x, y = ga[name][:], gb[name][:]
        assert x.dtype == y.dtype and x.shape == y.shape, name
        if x.dtype.kind == "f":
            assert x.tobytes() == y.tobytes(), f"{name} differs bitwise"
        else:
            np.testing.assert_array_equal(x, y)


# ----------------------------------------------------------------------------------------------- in-process

def test_store_holds_backbone_features_labels_ids_and_provenance(data, tmp_path):
    base, folder, weights, _ = data
    out = tmp_path / "f.zarr"
    res = extract("vip_toy", f"imagefolder:{folder}", weights=weights, head="gap", out=out, dtype="float32",
                  batch_size=16, num_workers=0, shard_rows=16, progress=False)
    assert res["splits"][0]["complete"] and res["splits"][0]["shards"] == 4
    st = stores.open(out)
    st.verify()
    sp = st["train"]
    X, y = sp.to_numpy()
    source = open_split(f"imagefolder:{folder}", "train")
    bb = backbones.load_backbone("vip_toy", head="gap", weights=weights)
    with torch.no_grad():
        direct = bb.model(torch.stack([bb.transform(source.read(i)) for i in range(len(source))])).numpy()
    np.testing.assert_allclose(X, direct, rtol=1e-5, atol=1e-5)
    assert list(y) == [0] * N_PER_CLASS + [1] * N_PER_CLASS
    assert list(sp.ids[:2]) == ["a/img_000.png", "a/img_001.png"]
    attrs = st.attrs
    assert attrs["backbone"] == "vip_toy" and attrs["head"] == "gap" and attrs["dim"] == 128
    assert attrs["weights_sha256"] == backbones.sha256_file(weights)
    assert attrs["preprocessing"] == {"resize": 32, "crop": 32, "interpolation": "bicubic",
                                      "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
    assert attrs["backbone_config"]["arch_kwargs"]["depth"] == 6 and attrs["classes"] == ["a", "b"]
    assert sp.attrs["dataset"] == f"imagefolder:{folder}" and sp.attrs["split"] == "train"
    assert "torch" in sp.attrs["versions"] and sp.attrs["created"]

    with pytest.raises(ValueError, match="another extraction"):  # resuming with other settings would mix features
        extract("vip_toy", f"imagefolder:{folder}", weights=weights, head="cls", out=out, num_workers=0,
                progress=False)


def test_workers_start_from_a_fork_server_once_cuda_is_initialized(data, tmp_path, monkeypatch):
    """Workers forked from a CUDA process abort on the first inherited CUDA tensor they free:
    once CUDA is initialized they come from a fork server, and the store is the same as with forked workers."""
    base, folder, weights, _ = data
    kw = dict(weights=weights, head="gap", dtype="float32", batch_size=16, num_workers=2, shard_rows=16,
              progress=False)
    extract("vip_toy", f"imagefolder:{folder}", out=tmp_path / "forked.zarr", **kw)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    from featurize.job import worker_context
    assert worker_context().get_start_method() == "forkserver"
    extract("vip_toy", f"imagefolder:{folder}", out=tmp_path / "server.zarr", **kw)
    assert_same_store(tmp_path / "forked.zarr", tmp_path / "server.zarr")


def test_corrupt_image_is_an_error_or_skipped_and_listed(data, tmp_path, capsys):
    base, _, weights, _ = data
    folder = make_folder(tmp_path / "imgs", n_per_class=5)
    (folder / "b" / "img_002.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    args = cli_args(base, folder, tmp_path / "bad.zarr", "--num-workers", "0")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "img_002.png" in err and "--skip-bad" in err
    with pytest.raises(CorruptImageError, match="b/img_002.png"):
        extract("vip_toy", f"imagefolder:{folder}", weights=weights, out=tmp_path / "bad2.zarr", num_workers=0,
                progress=False)

    assert main(cli_args(base, folder, tmp_path / "skip.zarr", "--num-workers", "0", "--skip-bad")) == 0
    sp = stores.open(tmp_path / "skip.zarr")["train"]
    assert sp.attrs["complete"] and sp.attrs["n_skipped"] == 1 and sp.attrs["skipped_ids"] == ["b/img_002.png"]
    assert len(sp) == 9 and "b/img_002.png" not in set(sp.ids[:][sp.valid_mask()])


def test_cli_missing_weights_and_bad_arguments(capsys, monkeypatch):
    monkeypatch.delenv(backbones.WEIGHTS_DIR_ENV, raising=False)
    assert main(["--backbone", "vip_base", "--dataset", "digits", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "ckpt-vip-laion233m-base.pth" in err and "PRIVLIN_WEIGHTS_DIR" in err
    assert main(["--backbone", "vip_bse", "--dataset", "digits"]) == 2
    assert "known backbones" in capsys.readouterr().err
    assert main(["--backbone", "pixels", "--dataset", "digits", "--shard", "2/2"]) == 2
    assert "--shard" in capsys.readouterr().err


def test_shard_assignment_and_batches(monkeypatch):
    assert ShardAssignment.parse("1/4") == ShardAssignment(1, 4)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert ShardAssignment.parse(None).writer_id == "3/8"
    assert shard_batches([(0, 5), (10, 13)], 2) == [[0, 1], [2, 3], [4], [10, 11], [12]]


def test_pixels_on_digits_all_splits(tmp_path):
    res = extract("pixels", "digits", out=tmp_path / "px.zarr", num_workers=0, batch_size=512, progress=False)
    assert [s["split"] for s in res["splits"]] == ["train", "test"]
    st = stores.open(tmp_path / "px.zarr")
    X, y = st["test"].to_numpy(dtype=np.float32)
    assert X.shape == (360, 3072) and X.min() >= -1 and X.max() <= 1 and len(st["train"]) == 1437


# ----------------------------------------------------------------------------------------------- processes

def _done(out):
    try:
        return int(np.sum(zarr.open_group(str(out), mode="r")["train/done"][:]))
    except Exception:  # noqa: BLE001 - not created yet
        return 0


def test_kill9_then_resume_equals_one_clean_run(data, tmp_path):
    base, clean_folder, _, clean_store = data
    folder = tmp_path / "killed"
    shutil.copytree(clean_folder, folder)
    blocker = folder / "b" / "img_016.png"  # row 48: shards 0-5 (rows 0-47) finish, shard 6 blocks on it
    blocker.unlink()
    os.mkfifo(blocker)  # opening a FIFO with no writer blocks: the job is frozen mid-shard, deterministically
    out = tmp_path / "killed.zarr"
    cmd = [sys.executable, "-m", "featurize", *cli_args(base, folder, out, "--num-workers", "0")]
    proc = subprocess.Popen(cmd, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while _done(out) < 6 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read().decode()
        assert _done(out) == 6
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    with pytest.raises(stores.IncompleteStoreError):
        stores.open(out)["train"].to_numpy()

    blocker.unlink()
    shutil.copy(clean_folder / "b" / "img_016.png", blocker)
    resumed = subprocess.run(cmd, env=cli_env(), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "16 images in 2 shards" in resumed.stderr  # only the two unfinished shards were computed
    assert_same_store(out, clean_store)
    stores.open(out).verify()


def test_two_ranks_fill_one_store_equal_to_single_run(data, tmp_path):
    base, folder, _, clean_store = data
    out = tmp_path / "ranks.zarr"
    procs = [subprocess.Popen([sys.executable, "-m", "featurize",
                               *cli_args(base, folder, out, "--shard", f"{r}/2", "--num-workers", "1")],
                              env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    assert all("32 images in 4 shards" in o[1] for o in outs)
    assert_same_store(out, clean_store)
    sp = stores.open(out)["train"]
    assert sp.attrs["complete"] and len(sp) == 2 * N_PER_CLASS


def test_default_out_names_the_folder_of_every_dataset_kind(tmp_path):
    from featurize import default_out

    (tmp_path / "my shards").mkdir()
    (tmp_path / "saved").mkdir()
    got = [default_out("vip_toy", "cls", d, data) for d, data in (
        ("digits", None), ("imagenet", "/data/imagenet"), (f"imagefolder:{tmp_path / 'pets'}/", None),
        ("webdataset", tmp_path / "my shards"), ("webdataset", None), (f"hf:{tmp_path / 'saved'}", None),
        ("hf:org/name#label=fine", None))]
    assert got == [os.path.join("features", f"vip_toy_cls_{name}.zarr") for name in (
        "digits", "imagenet", "imagefolder-pets", "webdataset-my-shards", "webdataset", "hf-saved",
        "hf-org-name-label-fine")]
