"""Inputs that lie about what they are and bad inputs that must end in one line: what
featurize records is what it read, each source item read once, nothing outside the named data."""
import os
import tarfile

import pytest

from datasources import digit_rows, write_shards
from featurize import DatasetError, extract, open_split
from featurize.__main__ import main

RUN = dict(dtype="float32", batch_size=8, num_workers=0, shard_rows=8, progress=False)


def test_a_shard_reached_three_times_is_refused(tmp_path):
    root = tmp_path / "wds"
    write_shards(root / "a.tar", digit_rows("train")[:4])
    os.symlink(root / "a.tar", root / "b.tar")
    os.link(root / "a.tar", root / "c.tar")
    with pytest.raises(DatasetError, match="are the same file"):  # before: 12 rows from 4 images
        open_split("webdataset", "train", root)
    os.remove(root / "b.tar")
    with pytest.raises(DatasetError, match=r"'c.tar' and 'a.tar' are the same file"):
        extract("pixels", "webdataset", data_dir=root, out=tmp_path / "o.zarr", **RUN)
    assert not (tmp_path / "o.zarr").exists()


def test_a_shard_in_two_split_folders_is_refused(tmp_path):
    root = tmp_path / "wds"
    write_shards(root / "train" / "000.tar", digit_rows("train")[:4])
    (root / "test").mkdir()
    os.link(root / "train" / "000.tar", root / "test" / "000.tar")
    with pytest.raises(DatasetError, match="same file"):
        open_split("webdataset", "test", root)


def test_an_oversized_label_member_is_refused_before_it_is_read(tmp_path, monkeypatch):
    """A 300 MiB ``.json`` (sparse on disk) is refused from its header; nothing reads its bytes."""
    root = tmp_path / "wds"
    root.mkdir()
    path = root / "big.tar"
    name, _, png = digit_rows("train")[0]
    size = 300 << 20
    with open(path, "wb") as f:
        for member, data_size in ((f"{name}.png", len(png)), (f"{name}.json", size)):
            info = tarfile.TarInfo(member)
            info.size = data_size
            f.write(info.tobuf(format=tarfile.USTAR_FORMAT))
            if member.endswith(".png"):
                f.write(png + b"\0" * (-len(png) % 512))
            else:
                f.seek(size + (-size % 512), os.SEEK_CUR)  # a hole: no 300 MiB written
        f.write(b"\0" * 1024)
    reads = []
    real = tarfile.ExFileObject.read if hasattr(tarfile, "ExFileObject") else None
    if real is not None:
        monkeypatch.setattr(tarfile.ExFileObject, "read", lambda self, *a: reads.append(a) or real(self, *a))
    with pytest.raises(DatasetError, match=r"\.json' holds 314572800 bytes, more than"):
        open_split("webdataset", "train", root)
    assert reads == []


def test_an_empty_webdataset_folder_is_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    rc = main(["--backbone", "pixels", "--dataset", "webdataset", "--data-dir", str(tmp_path / "empty"),
               "--out", str(tmp_path / "o.zarr"), "--no-progress"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(err) == 1 and "no .tar shards" in err[0] and "Traceback" not in err[0], err
