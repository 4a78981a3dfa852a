"""kill -9 at every phase of a featurize job (store creation, split creation, each shard's writes, finalize),
then the same command again: the store equals one clean run, bitwise.

The job is the real ``featurize.extract`` in a child process that SIGKILLs itself at the k-th file write of the
store (every write goes through zarr's local ``_put``): before the write, half-way (temporary file written, not
renamed) or just after it. Between the kill and the rerun the store must read as unfinished or as the clean
data, never as anything else.
"""
import itertools
import multiprocessing as mp
import os
import signal
import uuid

import numpy as np
import pytest
import zarr.storage._local as zarr_local
from PIL import Image

import featurize
import stores
from stores.__main__ import main as stores_cli
from stores.repair import repair

from .inject import snapshot

MODES = ("before", "partial", "after")


def make_images(root):
    rng = np.random.default_rng(1)
    for split, n in (("train", 12), ("test", 4)):
        for i in range(n):
            folder = root / split / f"c{i % 2}"
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(0, 256, (10, 12, 3), dtype=np.uint8)).save(folder / f"{i:02d}.png")
    return root


def job(folder, out):
    """What ``featurize --backbone pixels --dataset imagefolder:FOLDER --shard-rows 4 --out OUT`` runs."""
    featurize.extract("pixels", f"imagefolder:{folder}", out=str(out), num_workers=0, batch_size=3, shard_rows=4,
                      device="cpu", progress=False)


def _killed_job(folder, out, k, mode):
    import torch
    torch.set_num_threads(1)
    real, count = zarr_local._put, itertools.count(1)

    def put(path, value, exclusive=False):
        if next(count) == k:  # atomic: zarr writes from several threads
            if mode == "partial":  # what zarr leaves when killed between writing its temp file and renaming it
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path.with_suffix(f".{uuid.uuid4().hex}.partial"), "wb") as f:
                    f.write(value.as_buffer_like())
            elif mode == "after":
                try:
                    real(path, value, exclusive=exclusive)
                except FileExistsError:  # an exclusive create that lost: zarr's caller would carry on
                    pass
            os.kill(os.getpid(), signal.SIGKILL)
        return real(path, value, exclusive=exclusive)

    zarr_local._put = put
    job(folder, out)


def _count_writes(folder, out, queue):
    real, count = zarr_local._put, itertools.count(1)

    def put(path, value, exclusive=False):
        next(count)
        return real(path, value, exclusive=exclusive)

    zarr_local._put = put
    job(folder, out)
    queue.put(next(count) - 1)


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    base = tmp_path_factory.mktemp("kills")
    folder = make_images(base / "images")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "zarr", "featurize", "stores"])
    queue = ctx.Queue()
    p = ctx.Process(target=_count_writes, args=(folder, base / "clean.zarr", queue))
    p.start()
    writes = queue.get(timeout=300)
    p.join(60)
    assert p.exitcode == 0 and writes > 30
    return base, folder, base / "clean.zarr", writes, ctx


def kill_then_rerun(setting, k, mode, tmp_path):
    base, folder, clean, writes, ctx = setting
    out = tmp_path / f"k{k}{mode}.zarr"
    p = ctx.Process(target=_killed_job, args=(folder, out, k, mode))
    p.start()
    p.join(300)
    assert p.exitcode == -signal.SIGKILL

    # between the kill and the rerun: unfinished or clean, never wrong
    try:
        st = stores.open(out)
    except FileNotFoundError:
        st = None
    except stores.StoreError as e:
        pytest.fail(f"kill at write {k} ({mode}) left a store that does not open: {e}")
    for name in st.splits if st is not None else []:
        try:
            X, y = st[name].to_numpy()
        except stores.IncompleteStoreError:
            continue
        X0, y0 = stores.open(clean)[name].to_numpy()
        assert X.tobytes() == X0.tobytes() and np.array_equal(y, y0)
    if st is not None:
        assert stores_cli(["info", str(out)]) in (0, 1)  # no exception, whatever state the kill left

    job(folder, out)  # the same command again
    got, want = snapshot(out), snapshot(clean)
    leftovers = {key for key in got if key.endswith(".partial")}
    assert all(os.path.basename(key).startswith("zarr.") for key in leftovers), leftovers  # metadata temp files
    assert {key: v for key, v in got.items() if key not in leftovers} == want
    repair(out)  # removes them (no writer running)
    assert snapshot(out) == want
    stores.open(out).verify()


# (write, mode) of the job above (train: 3 shards, test: 1): store root (1), split group (3), its arrays (4-19,
# with zarr's exclusive writes of parent documents), shard 0 (20-26: claim, features, labels, ids, valid,
# manifest, done mark), finalize (41 attributes, 42 consolidated metadata), the test split (43-68)
PHASES = [(1, "partial"), (3, "after"), (8, "partial"), (25, "after"), (41, "after"), (47, "partial")]


@pytest.mark.parametrize("k, mode", PHASES)
def test_kill9_at_a_phase_then_rerun_equals_a_clean_run(setting, k, mode, tmp_path):
    kill_then_rerun(setting, setting[3] + 1 + k if k < 0 else k, mode, tmp_path)


@pytest.mark.slow
def test_kill9_at_every_write_then_rerun_equals_a_clean_run(setting, tmp_path):
    writes = setting[3]
    for k in range(1, writes + 1):
        for mode in MODES:
            kill_then_rerun(setting, k, mode, tmp_path)
