"""Odd inputs to the featurize job: file names that are not UTF-8, symlink loops and duplicate files, every PIL
image mode (16-bit PNGs included). Each ends in correct rows or a named error, never multiplied rows."""
import os

import numpy as np
import pytest
from PIL import Image

import stores
from featurize import DatasetError, open_split
from featurize.__main__ import main
from featurize.decode import to_rgb


def images(root, layout):
    rng = np.random.default_rng(0)
    for rel in layout:
        path = os.path.join(os.fsencode(root), rel if isinstance(rel, bytes) else os.fsencode(rel))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (6, 5, 3), dtype=np.uint8)).save(path, format="PNG")
    return root


def run(folder, out, *extra):
    return main(["--backbone", "pixels", "--dataset", f"imagefolder:{folder}", "--out", str(out), "--num-workers",
                 "0", "--no-progress", "--shard-rows", "4", *extra])


# --------------------------------------------------------------------------------------------- file names

def test_non_utf8_file_and_folder_names_are_featurized_with_escaped_ids(tmp_path, capsys):
    folder = images(tmp_path / "imgs", [b"a/ok.png", b"a/caf\xe9.png", b"b\xff/x.png", b"b\xff/y.png"])
    sp = open_split(f"imagefolder:{folder}", "train")
    assert sp.ids == ["a/caf\\xe9.png", "a/ok.png", "b\\xff/x.png", "b\\xff/y.png"] and sp.classes == ["a", "b\\xff"]
    for _ in range(2):  # a rerun resumes instead of failing again
        assert run(folder, tmp_path / "f.zarr") == 0, capsys.readouterr().err
    assert run(folder, tmp_path / "g.zarr", "--skip-bad") == 0
    st = stores.open(tmp_path / "f.zarr")
    st.verify()
    assert list(st["train"].ids[:]) == sp.ids and st.attrs["classes"] == ["a", "b\\xff"]
    X, _ = st["train"].to_numpy()
    assert X.shape[0] == 4 and np.isfinite(X.astype(np.float32)).all()


def test_writer_refuses_ids_that_are_not_text(tmp_path):
    w = stores.create_split(tmp_path / "s.zarr", "train", n_rows=2, dim=3, dtype="float32")
    with pytest.raises(ValueError, match="UTF-8 text; row 1 is"):
        w.write_shard(0, np.zeros((2, 3)), [0, 1], ["ok", "bad\udcff"])
    assert w.pending() == [0]


def test_escaped_names_that_collide_are_refused(tmp_path):
    folder = images(tmp_path / "imgs", [b"a/x\xff.png", b"a/x\\xff.png"])
    with pytest.raises(DatasetError, match="same id"):
        open_split(f"imagefolder:{folder}", "train")


# --------------------------------------------------------------------------------------------- links

@pytest.mark.parametrize("link", ["loop to the class folder", "loop to the root", "second link to a folder"])
def test_folder_links_that_repeat_images_are_refused(tmp_path, capsys, link):
    folder = images(tmp_path / "imgs", [f"a/{i}.png" for i in range(5)] + ["b/0.png"])
    target = {"loop to the class folder": folder / "a", "loop to the root": folder,
              "second link to a folder": folder / "b"}[link]
    os.symlink(target, folder / "a" / "zz_link")
    with pytest.raises(DatasetError, match="zz_link.*(loop|again)"):
        open_split(f"imagefolder:{folder}", "train")
    assert run(folder, tmp_path / "f.zarr") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "zz_link" in err and "Traceback" not in err
    assert not (tmp_path / "f.zarr").exists()  # refused before anything was written


@pytest.mark.parametrize("kind", ["symlink", "hard link", "same file in two classes"])
def test_one_file_reached_twice_is_refused(tmp_path, kind):
    folder = images(tmp_path / "imgs", ["a/0.png", "a/1.png", "b/0.png"])
    src = folder / "a" / "1.png"
    dst = folder / ("b" if kind == "same file in two classes" else "a") / "2.png"
    os.link(src, dst) if kind == "hard link" else os.symlink(src, dst)
    with pytest.raises(DatasetError, match="same file"):
        open_split(f"imagefolder:{folder}", "train")


def test_a_symlink_to_a_distinct_file_is_one_row(tmp_path):
    folder = images(tmp_path / "imgs", ["a/0.png"])
    images(tmp_path / "elsewhere", ["x.png"])
    os.symlink(tmp_path / "elsewhere" / "x.png", folder / "a" / "1.png")
    os.symlink(tmp_path / "missing.png", folder / "a" / "2.png")  # dangling: a row whose decoding names it
    sp = open_split(f"imagefolder:{folder}", "train")
    assert sp.ids == ["a/0.png", "a/1.png", "a/2.png"]
    with pytest.raises(OSError):
        sp.read(2)


# --------------------------------------------------------------------------------------------- image modes

def gradient16():
    return (np.arange(20 * 30, dtype=np.float64).reshape(20, 30) * 65535 / 599).round().astype(np.uint16)


def test_16bit_png_keeps_its_brightness(tmp_path):
    g = gradient16()
    (tmp_path / "imgs" / "a").mkdir(parents=True)
    Image.fromarray(g).save(tmp_path / "imgs" / "a" / "g16.png")
    assert Image.open(tmp_path / "imgs" / "a" / "g16.png").mode == "I;16"
    px = np.asarray(open_split(f"imagefolder:{tmp_path / 'imgs'}", "train").read(0))
    expected = np.rint(g / 257.0).astype(np.uint8)  # 0..65535 onto 0..255
    assert px.dtype == np.uint8 and np.array_equal(px[..., 0], expected) and np.array_equal(px[..., 2], expected)
    assert (px == 255).mean() < 0.01  # before: 97% of pixels saturated to white


def test_16bit_pgm_and_float_tiff(tmp_path):
    g = gradient16()
    with open(tmp_path / "g.pgm", "wb") as f:
        f.write(b"P5\n30 20\n65535\n" + g.astype(">u2").tobytes())
    assert Image.open(tmp_path / "g.pgm").mode == "I"
    assert np.array_equal(np.asarray(to_rgb(Image.open(tmp_path / "g.pgm")))[..., 1], np.rint(g / 257.0))
    unit = g.astype(np.float32) / 65535
    Image.fromarray(unit).save(tmp_path / "f.tif")
    assert Image.open(tmp_path / "f.tif").mode == "F"
    got = np.asarray(to_rgb(Image.open(tmp_path / "f.tif")))[..., 0].astype(int)
    assert np.abs(got - np.rint(unit * 255)).max() <= 1
    Image.fromarray(unit * 255).save(tmp_path / "f255.tif")  # floats on the 0..255 scale
    assert np.abs(np.asarray(to_rgb(Image.open(tmp_path / "f255.tif")))[..., 0] - np.rint(unit * 255)).max() <= 1
    nan = unit.copy()
    nan[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        to_rgb(Image.fromarray(nan))


@pytest.mark.parametrize("mode", ["L", "P", "LA", "PA", "La", "RGB", "RGBA", "RGBa", "RGBX", "CMYK", "YCbCr",
                                  "LAB", "HSV"])
def test_every_8bit_mode_decodes_to_the_same_gray(mode):
    gray = Image.new("RGB", (4, 3), (100, 100, 100))
    im = gray.convert("RGBA").convert(mode) if mode in ("La", "RGBa") else gray.convert(mode)
    out = to_rgb(im)
    assert out.mode == "RGB"
    assert np.abs(np.asarray(out).astype(int) - 100).max() <= 3, (mode, np.asarray(out)[0, 0])


def test_bilevel_images_are_black_and_white():
    px = np.asarray(to_rgb(Image.fromarray(np.array([[0, 1], [1, 0]], bool))))
    assert px[0, 0].tolist() == [0, 0, 0] and px[0, 1].tolist() == [255, 255, 255]
