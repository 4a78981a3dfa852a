"""The decode paths of a featurize job (featurize.decode): JPEG draft mode on the CPU, batched decoding on the
job's device (torchvision's decoder on the CPU here, nvJPEG where CUDA exists), the PIL fallback, one worker pool
per job.

Tolerances (draft or device decoding against a full PIL decode, same resize and crop), stated here and measured in
BENCHMARKS.md: on photo-like 1024x768 JPEGs the cropped uint8 pixels differ by at most 1.5 grey levels on average
(draft: a DCT-domain block average instead of a bicubic filter over full-size pixels); shipped vip_toy features of
digits rendered as 128 px JPEGs differ by a relative L2 under 1 %, and a standardized logistic probe on all
digits (a slow test) keeps its accuracy within 1 point and >= 98 % of its test predictions. The device path
(torchvision's decoder, torch's resize) stays within 1 % relative L2 of full-decode features on the CPU; nvJPEG's
crops within 3 grey levels on average of the CPU's (looser than draft's: nvJPEG's IDCT and chroma upsampling
differ from libjpeg-turbo's).
"""
import io

import numpy as np
import pytest
import torch
from PIL import Image

import backbones
import stores
from backbones.preprocessing import geometry_transform
from backbones.registry import Preprocessing
from featurize import CorruptImageError, decode, extract, job, open_split
from hubcache import offline_hub  # noqa: F401 - a fixture

TOY = Preprocessing(resize=32, crop=32, interpolation="bicubic")
BASE = Preprocessing(resize=256, crop=224, interpolation="bicubic")  # vip_base / MAE geometry


def photo(width, height, seed=0):
    """A photo-like image: smooth colour field, hard-edged rectangles, mild sensor noise."""
    rng = np.random.default_rng(seed)
    field = Image.fromarray(rng.integers(0, 256, (max(height // 64, 2), max(width // 64, 2), 3), dtype=np.uint8))
    px = np.asarray(field.resize((width, height), Image.BICUBIC)).astype(np.float64)
    for _ in range(12):
        x0, y0 = rng.integers(0, width - 8), rng.integers(0, height - 8)
        px[y0:y0 + rng.integers(4, height // 3), x0:x0 + rng.integers(4, width // 3)] = rng.integers(0, 256, 3)
    px += rng.normal(0, 6, px.shape)
    return Image.fromarray(np.clip(px, 0, 255).astype(np.uint8))


def jpeg_bytes(image, **kw) -> bytes:
    b = io.BytesIO()
    image.save(b, "JPEG", quality=90, **kw)
    return b.getvalue()


def crop_of(data, pre, draft):
    return geometry_transform(pre)(decode.open_rgb(data, pre, draft=draft))


def test_resized_size_is_torchvision_resize():
    for (w, h) in [(1024, 768), (768, 1024), (500, 375), (1001, 751), (33, 32), (40, 36), (300, 300)]:
        for resize in (32, 224, 256):
            got = geometry_transform(Preprocessing(resize=resize, crop=8)).transforms[0](Image.new("RGB", (w, h)))
            assert decode.resized_size(w, h, resize) == got.size


def test_draft_decodes_at_the_smallest_covering_scale_within_tolerance_of_full():
    data = [jpeg_bytes(photo(1024, 768, seed), progressive=seed == 2) for seed in range(3)]
    for pre, scaled in ((TOY, (128, 96)), (BASE, (512, 384))):  # 1/8 covers 43x32; 1/2 covers 341x256
        for d in data:
            image, original, box = decode.decode_draft(d, pre.resize)
            assert original == (1024, 768) and image.size == scaled and image.mode == "RGB"
            full, draft = crop_of(d, pre, False), crop_of(d, pre, True)
            assert draft.shape == full.shape == (3, pre.crop, pre.crop) and draft.dtype == torch.uint8
            diff = (draft.float() - full.float()).abs()
            assert 0 < diff.mean() <= 1.5, diff.mean()  # different pixels (the draft was taken), within tolerance
            assert diff.max() <= 40
    # sizes that are no multiple of 8: the last reduced pixel is part of a block; the resize takes the box
    for w, h in ((1001, 751), (500, 375)):
        d = jpeg_bytes(photo(w, h, seed=5))
        image, _, box = decode.decode_draft(d, TOY.resize)
        assert image.size == (-(-w // 8), -(-h // 8)) and box == (0, 0, w / 8, h / 8)
        assert (crop_of(d, TOY, True).float() - crop_of(d, TOY, False).float()).abs().mean() <= 1.5
    # ImageNet-size 500x375 to 256: no DCT scale covers 341x256, the draft path is the full decode, bitwise
    d = jpeg_bytes(photo(500, 375))
    assert decode.decode_draft(d, 256)[0].size == (500, 375)
    assert torch.equal(crop_of(d, BASE, True), crop_of(d, BASE, False))


def test_full_path_is_the_backbones_transform_bitwise(tmp_path):
    """``open_rgb(draft=False)`` and a reduced-then-resized image both go through the backbone's own transform; a
    full decode gives exactly what the job gave before draft mode existed (PIL open, to_rgb, transform)."""
    path = tmp_path / "a.jpg"
    photo(640, 480).save(path, quality=90)
    old = geometry_transform(TOY)(decode.to_rgb(Image.open(path)))
    assert torch.equal(crop_of(path.read_bytes(), TOY, False), old)


def digits_as_jpegs(root, split, n, side=128):
    """The first ``n`` rows of the embedded digits split as ``side`` px JPEGs in an ImageFolder tree."""
    src = open_split("digits", split)
    for i in range(n):
        d = root / split / str(src.labels[i])
        d.mkdir(parents=True, exist_ok=True)
        src.read(i).resize((side, side), Image.BICUBIC).save(d / f"{i:04d}.jpg", quality=90)


def digits_features(root, n_train, n_test, monkeypatch):
    """vip_toy ``cls`` features of digits rendered as 128 px JPEGs, by the job in ``full`` and ``draft`` mode; the
    sizes draft mode decoded at (recorded by a pass-through wrapper of :func:`decode.decode_draft`)."""
    digits_as_jpegs(root / "jpg", "train", n_train)
    digits_as_jpegs(root / "jpg", "test", n_test)
    decoded = []
    real = decode.decode_draft
    monkeypatch.setattr(decode, "decode_draft", lambda d, r: decoded.append(real(d, r)[0].size) or real(d, r))
    feats = {}
    for mode in ("full", "draft"):
        out = root / f"{mode}.zarr"
        extract("vip_toy", f"imagefolder:{root / 'jpg'}", out=out, head="cls", dtype="float32",
                num_workers=0, decode_mode=mode, progress=False)
        st = stores.open(out)
        assert st.attrs["decode"] == mode
        for split in ("train", "test"):
            feats[mode, split], feats["y", split] = st[split].to_numpy()
    return feats, decoded


def test_job_draft_mode_on_embedded_digits_is_taken_and_within_tolerance(tmp_path, monkeypatch):
    feats, decoded = digits_features(tmp_path, 100, 60, monkeypatch)
    assert len(decoded) == 160 and set(decoded) == {(32, 32)}  # draft mode taken: 128 px decoded at 1/4, only there
    a, b = feats["full", "test"], feats["draft", "test"]
    rel = np.linalg.norm(a - b, axis=1) / np.linalg.norm(a, axis=1)
    assert 0 < rel.max() < 0.01, rel.max()  # the measured spread is in BENCHMARKS.md (featurize)


@pytest.mark.slow
def test_draft_mode_leaves_a_probe_on_all_digits_unchanged(tmp_path, monkeypatch):
    """All 1797 digits (1437 train / 360 test): a standardized logistic probe on draft-decoded features keeps the
    full decode's accuracy and predictions (the measured values are in BENCHMARKS.md, featurize)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    feats, _ = digits_features(tmp_path, 1437, 360, monkeypatch)
    accuracy = {}
    for mode in ("full", "draft"):
        probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=3000))
        probe.fit(feats[mode, "train"], feats["y", "train"])
        accuracy[mode] = probe.score(feats[mode, "test"], feats["y", "test"])
        if mode == "full":
            same = np.mean(probe.predict(feats["draft", "test"]) == probe.predict(feats["full", "test"]))
    assert accuracy["full"] > 0.9 and abs(accuracy["draft"] - accuracy["full"]) <= 0.01, accuracy
    assert same >= 0.98, same


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """JPEGs (large, small, grey, progressive), a PNG, a CMYK JPEG, a bit-flipped JPEG and a truncated one."""
    root = tmp_path_factory.mktemp("mixed")
    a, b = root / "a", root / "b"
    a.mkdir()
    b.mkdir()
    for i in range(6):
        photo(320 + 40 * i, 240, seed=i).save(a / f"{i}.jpg", quality=90)
    photo(36, 40, seed=9).save(a / "small.jpg", quality=90)
    photo(200, 150, seed=7).convert("L").save(a / "grey.jpg", quality=90)
    photo(240, 180, seed=12).save(a / "progressive.jpg", quality=90, progressive=True)
    photo(200, 150, seed=8).save(b / "p.png")
    photo(200, 150, seed=10).convert("CMYK").save(b / "cmyk.jpg", quality=90)
    good = jpeg_bytes(photo(200, 150, seed=11))
    flipped = bytearray(good)
    for k in range(400, 420):
        flipped[k] ^= 0x55
    (b / "flipped.jpg").write_bytes(bytes(flipped))
    (b / "truncated.jpg").write_bytes(good[:len(good) // 2])
    return root


def toy(head="cls"):
    return backbones.load_backbone("vip_toy", head=head)


def test_device_path_on_the_cpu_decodes_jpegs_there_and_sends_the_rest_to_pil(mixed, tmp_path, monkeypatch):
    bb = toy()
    source = open_split(f"imagefolder:{mixed}", "train")
    ids = list(source.ids)
    on_device = []
    real = decode.decode_batch
    monkeypatch.setattr(decode, "decode_batch",
                        lambda j, s, p, dev, **kw: on_device.extend(s) or real(j, s, p, dev, **kw))
    with pytest.raises(CorruptImageError, match="flipped.jpg"):
        job.extract_split(bb, source, tmp_path / "err.zarr", num_workers=0, decode_mode="device", progress=False)
    on_device.clear()
    res = {m: job.extract_split(bb, source, tmp_path / f"{m}.zarr", num_workers=0, dtype="float32", skip_bad=True,
                                decode_mode=m, progress=False) for m in ("device", "draft", "full")}
    # the device took the 8 baseline JPEGs PIL reads as RGB/L with an end marker (not CMYK, not progressive, not
    # the truncated one)
    assert sorted(on_device) == sorted([(320 + 40 * i, 240) for i in range(6)] + [(36, 40), (200, 150), (200, 150)])
    for m in res:
        assert sorted(res[m]["skipped"]) == ["b/flipped.jpg", "b/truncated.jpg"]
    X = {m: stores.open(tmp_path / f"{m}.zarr")["train"] for m in res}
    valid = X["device"].valid_mask()
    assert [ids[i] for i in np.flatnonzero(~valid)] == ["b/flipped.jpg", "b/truncated.jpg"]
    F = {m: X[m].features[:] for m in X}
    pil_rows = [ids.index("b/p.png"), ids.index("b/cmyk.jpg"), ids.index("a/progressive.jpg")]
    np.testing.assert_array_equal(F["device"][pil_rows], F["draft"][pil_rows])  # PIL decoded them, draft path
    jpeg_rows = [i for i in range(len(ids)) if valid[i] and i not in pil_rows]
    rel = np.linalg.norm(F["device"][jpeg_rows] - F["full"][jpeg_rows], axis=1) / np.linalg.norm(
        F["full"][jpeg_rows], axis=1)
    assert rel.max() < 0.01, rel  # libjpeg-turbo decode, torch's antialiased bicubic vs PIL's: within tolerance
    assert (F["device"][~valid] == 0).all()


def test_a_jpeg_the_device_refuses_is_decoded_by_pil(mixed, tmp_path, monkeypatch):
    """The device decoder's refusal (one image of a batch; nvJPEG refuses what libjpeg-turbo takes, e.g. some
    progressive or odd-sampled files) is stood in for by dropping its result: PIL then decodes that row."""
    bb = toy()
    source = open_split(f"imagefolder:{mixed}", "train")
    real = decode.decode_batch
    monkeypatch.setattr(decode, "decode_batch", lambda j, s, p, dev, **kw: [None] + real(j, s, p, dev, **kw)[1:])
    job.extract_split(bb, source, tmp_path / "dev.zarr", num_workers=0, dtype="float32", skip_bad=True,
                      batch_size=64, decode_mode="device", progress=False)
    monkeypatch.setattr(decode, "decode_batch", real)
    job.extract_split(bb, source, tmp_path / "draft.zarr", num_workers=0, dtype="float32", skip_bad=True,
                      batch_size=64, decode_mode="draft", progress=False)
    first = 0  # the first JPEG of the only batch is row 0 ("a/0.jpg")
    assert source.ids[first] == "a/0.jpg"
    dev = stores.open(tmp_path / "dev.zarr")["train"].features[:]
    draft = stores.open(tmp_path / "draft.zarr")["train"].features[:]
    np.testing.assert_array_equal(dev[first], draft[first])
    assert not np.array_equal(dev[1], draft[1])  # the others did come from the device decoder


def test_decode_batch_bounds_its_resize_memory_without_changing_pixels(monkeypatch):
    datas = [jpeg_bytes(photo(320, 240, seed)) for seed in range(5)] + [jpeg_bytes(photo(240, 320, 5))]
    jpegs = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in datas]
    sizes = [decode.device_jpeg_size(d) for d in datas]
    whole = decode.decode_batch(jpegs, sizes, TOY, torch.device("cpu"))
    monkeypatch.setattr(decode, "RESIZE_PIXELS", 320 * 240 * 2)  # chunks of two same-size images
    chunked = decode.decode_batch(jpegs, sizes, TOY, torch.device("cpu"))
    assert all(a.shape == (3, 32, 32) and torch.equal(a, b) for a, b in zip(whole, chunked))
    assert (whole[-1].float() - crop_of(datas[-1], TOY, False).float()).abs().mean() <= 1.5


def test_decode_batch_in_chunks_on_threads_gives_the_same_pixels():
    """``streams=``: the batch decoded and resized in chunks, one thread each (CUDA streams on a GPU, ``None``
    here), gives the pixels of one piece, in order, a refused image still ``None`` in its place."""
    datas = [jpeg_bytes(photo(320 + 8 * (i % 3), 240, seed=i)) for i in range(7)]
    jpegs = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in datas]
    sizes = [decode.device_jpeg_size(d) for d in datas]
    jpegs.insert(3, torch.frombuffer(bytearray(b"\xff\xd8\xff\xe0 not a JPEG after all \xff\xd9"), dtype=torch.uint8))
    sizes.insert(3, (10, 10))
    whole = decode.decode_batch(jpegs, sizes, TOY, torch.device("cpu"))
    assert whole[3] is None and all(w.shape == (3, 32, 32) for j, w in enumerate(whole) if j != 3)
    for k in (2, 3, 8, 12):
        got = decode.decode_batch(jpegs, sizes, TOY, torch.device("cpu"), streams=[None] * k)
        assert len(got) == len(whole) and got[3] is None
        assert all(torch.equal(a, b) for j, (a, b) in enumerate(zip(got, whole)) if j != 3), k


@pytest.mark.parametrize("mode", ["device", "draft"])
def test_feed_options_leave_the_store_bit_equal(mixed, tmp_path, mode):
    """Feed options change how batches are prepared (a staging thread, decoding threads, the workers' prefetch),
    not what: the same features, validity and skipped ids bit for bit, PIL fallbacks and bad files included."""
    bb = toy()
    source = open_split(f"imagefolder:{mixed}", "train")

    def run(name, feed, workers):
        res = job.extract_split(bb, source, tmp_path / f"{name}.zarr", num_workers=workers, dtype="float32",
                                skip_bad=True, batch_size=4, decode_mode=mode, progress=False, feed=feed)
        split = stores.open(tmp_path / f"{name}.zarr")["train"]
        return res["skipped"], split.features[:], split.valid_mask()

    skipped, feats, valid = run("default", job.Feed(), 0)
    assert sorted(skipped) == ["b/flipped.jpg", "b/truncated.jpg"] and valid.sum() == len(source) - 2
    variants = [("ahead1", job.Feed(ahead=1), 0)]
    if mode == "device":  # decoding threads and worker processes matter where the job decodes JPEGs itself
        variants += [("ahead2_threads3", job.Feed(ahead=2, decode_threads=3, prefetch=1), 2),
                     ("threads2", job.Feed(decode_threads=2), 0)]
    for name, feed, workers in variants:
        got = run(name, feed, workers)
        assert got[0] == skipped, name
        np.testing.assert_array_equal(got[1], feats, err_msg=name)
        np.testing.assert_array_equal(got[2], valid, err_msg=name)


def test_a_failure_while_staging_ahead_is_raised_by_the_job_and_stops_the_thread(mixed, tmp_path, monkeypatch):
    import threading

    def stagers():
        return [t for t in threading.enumerate() if t.name == "featurize-stage"]

    bb = toy()
    source = open_split(f"imagefolder:{mixed}", "train")
    kw = dict(num_workers=0, batch_size=4, decode_mode="device", progress=False, feed=job.Feed(ahead=2))
    with pytest.raises(CorruptImageError, match="flipped.jpg"):  # raised in the job's loop, staging went on
        job.extract_split(bb, source, tmp_path / "bad.zarr", **kw)
    assert not stagers()

    def broken(*a, **k):
        raise RuntimeError("the device decoder failed")
    monkeypatch.setattr(decode, "decode_batch", broken)  # raised in the staging thread itself
    with pytest.raises(RuntimeError, match="the device decoder failed"):
        job.extract_split(bb, source, tmp_path / "broken.zarr", **kw)
    assert not stagers()
    assert not stores.open(tmp_path / "broken.zarr")["train"].done_mask().any()  # no shard marked done


def test_worker_every_leaves_every_nth_row_to_pil_in_the_workers(mixed, tmp_path):
    """``worker_every=3``: rows 2, 5, 8... are decoded by PIL in the workers (the draft path's features bit for
    bit), the others by the device decoder (the device path's), whatever the batches."""
    bb = toy()
    source = open_split(f"imagefolder:{mixed}", "train")
    feats = {}
    for name, mode, every in (("device", "device", 0), ("draft", "draft", 0), ("shared", "device", 3)):
        job.extract_split(bb, source, tmp_path / f"{name}.zarr", num_workers=0, dtype="float32", skip_bad=True,
                          batch_size=4, decode_mode=mode, worker_every=every, progress=False)
        feats[name] = stores.open(tmp_path / f"{name}.zarr")["train"].features[:]
    pil = [i for i in range(len(source)) if i % 3 == 2]
    dev = [i for i in range(len(source)) if i % 3 != 2]
    np.testing.assert_array_equal(feats["shared"][pil], feats["draft"][pil])
    np.testing.assert_array_equal(feats["shared"][dev], feats["device"][dev])
    assert any(not np.array_equal(feats["device"][i], feats["draft"][i]) for i in pil)  # a path did change


def test_worker_every_is_recorded_with_the_decode_path_and_refused_where_it_means_nothing(tmp_path):
    digits_as_jpegs(tmp_path / "jpg", "train", 8, side=64)
    kw = dict(out=tmp_path / "s.zarr", num_workers=0, progress=False, device="cpu")
    extract("vip_toy", f"imagefolder:{tmp_path / 'jpg'}", decode_mode="device", worker_every=2, **kw)
    assert stores.open(kw["out"]).attrs["decode"] == "device, row % 2 == 1 by PIL in the workers"
    with pytest.raises(ValueError, match='decode: store has "device, row % 2'):  # a resume may not mix paths
        extract("vip_toy", f"imagefolder:{tmp_path / 'jpg'}", decode_mode="device", **kw)
    for every, mode in ((1, "device"), (-2, "device"), (2.0, "device"), (2, "draft"), (3, "auto")):
        with pytest.raises(ValueError, match="worker_every"):
            extract("vip_toy", f"imagefolder:{tmp_path / 'jpg'}", decode_mode=mode, worker_every=every,
                    **{**kw, "out": tmp_path / "refused.zarr"})
    assert not (tmp_path / "refused.zarr").exists()


def test_webdataset_and_hf_sources_hand_their_jpeg_bytes_to_draft_and_device_decoding(request, tmp_path,
                                                                                      monkeypatch):
    """Tar shards and a Hugging Face dataset holding the image folder's JPEG files give their bytes (``raw``) to
    the draft and device paths: draft decodes them at a reduced scale, the device decoder gets every row, and the
    features equal the folder's row for row."""
    import tarfile

    datasets = pytest.importorskip("datasets")
    request.getfixturevalue("offline_hub")  # HF_HUB_OFFLINE and a cache of the test's own
    from datasources import add, digit_rows

    rows = []
    for name, label, png in digit_rows("test"):
        rows.append((name, label, jpeg_bytes(Image.open(io.BytesIO(png)).convert("RGB").resize((128, 128)))))
    for name, label, data in rows:
        (tmp_path / "folder" / "test" / str(label)).mkdir(parents=True, exist_ok=True)
        (tmp_path / "folder" / "test" / str(label) / f"{name}.jpg").write_bytes(data)
    (tmp_path / "wds").mkdir()
    with tarfile.open(tmp_path / "wds" / "test-000.tar", "w", format=tarfile.USTAR_FORMAT) as tf:
        for name, label, data in rows:
            add(tf, f"{name}.jpg", data)
            add(tf, f"{name}.cls", str(label).encode())
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(num_classes=10)})
    hf = datasets.Dataset.from_dict({"image": [{"bytes": d, "path": None} for _, _, d in rows],
                                     "label": [lab for _, lab, _ in rows]}, features=features)
    datasets.DatasetDict({"test": hf}).save_to_disk(str(tmp_path / "hf"))
    sources = {"folder": open_split(f"imagefolder:{tmp_path / 'folder'}", "test"),
               "webdataset": open_split("webdataset", "test", tmp_path / "wds"),
               "hf": open_split(f"hf:{tmp_path / 'hf'}", "test")}
    names = {"folder": lambda i: i.rsplit("/", 1)[1][:-4], "webdataset": lambda i: i.rsplit(":", 1)[1],
             "hf": lambda i: rows[int(i.rsplit(":", 1)[1])][0]}
    drafted, on_device = [], []
    real_draft, real_batch = decode.decode_draft, decode.decode_batch
    monkeypatch.setattr(decode, "decode_draft", lambda d, r: drafted.append(real_draft(d, r)[0].size) or
                        real_draft(d, r))
    monkeypatch.setattr(decode, "decode_batch", lambda j, sz, p, dev, **kw: on_device.extend(sz) or
                        real_batch(j, sz, p, dev, **kw))
    bb = toy()
    for mode in ("draft", "device"):
        feats = {}
        for kind, source in sources.items():
            drafted.clear(), on_device.clear()
            out = tmp_path / f"{kind}-{mode}.zarr"
            job.extract_split(bb, source, out, num_workers=0, dtype="float32", decode_mode=mode, progress=False)
            if mode == "draft":
                assert drafted == [(32, 32)] * len(rows), kind  # 128 px decoded at 1/4
            else:
                assert on_device == [(128, 128)] * len(rows), kind
            split = stores.open(out)["test"]
            feats[kind] = dict(zip(map(names[kind], split.ids[:]), split.features[:]))
        assert sorted(feats["folder"]) == sorted(name for name, _, _ in rows)
        for kind in ("webdataset", "hf"):
            for name in feats["folder"]:
                np.testing.assert_array_equal(feats[kind][name], feats["folder"][name], err_msg=f"{kind} {name}")


def test_feed_refuses_values_that_mean_nothing_and_parses_the_cli_flag(tmp_path, capsys):
    for bad in (dict(ahead=-1), dict(decode_threads=0), dict(prefetch=0), dict(ahead=1.5), dict(ahead=True),
                dict(pin_bytes=1)):
        with pytest.raises(ValueError, match="Feed"):
            job.Feed(**bad)
    assert job.Feed.parse("ahead=1, pin_bytes=1,prefetch=2") == job.Feed(ahead=1, pin_bytes=True, prefetch=2)
    assert job.Feed.parse(None) == job.Feed.parse("") == job.Feed()
    for bad in ("ahead", "speed=3", "ahead=x", "pin_bytes=2", "ahead=-1"):
        with pytest.raises(ValueError, match="feed|Feed"):
            job.Feed.parse(bad)
    digits_as_jpegs(tmp_path / "jpg", "train", 8, side=64)
    from featurize.__main__ import main
    cli = ["--backbone", "vip_toy", "--dataset", f"imagefolder:{tmp_path / 'jpg'}", "--device", "cpu",
           "--decode", "device", "--num-workers", "0", "--no-progress", "--out"]
    assert main(cli + [str(tmp_path / "a.zarr"), "--feed", "ahead=2,decode_threads=2", "--worker-every", "3"]) == 0
    assert stores.open(tmp_path / "a.zarr").attrs["decode"] == "device, row % 3 == 2 by PIL in the workers"
    capsys.readouterr()
    assert main(cli + [str(tmp_path / "b.zarr"), "--feed", "speed=3"]) == 2
    assert "--feed takes NAME=VALUE" in capsys.readouterr().err
    assert main(cli + [str(tmp_path / "b.zarr"), "--worker-every", "1"]) == 2
    assert "worker_every must be 0" in capsys.readouterr().err


def test_pin_bytes_asks_the_pin_memory_thread_for_the_jpeg_bytes_too(monkeypatch):
    """Page-locking needs CUDA; here the wiring is checked: which tensors ``_Batch.pin_memory`` (what the loader's
    pin-memory thread calls) asks torch to page-lock, with and without ``pin_bytes``."""
    asked = []
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda t: asked.append(t.shape) or t)
    data = jpeg_bytes(photo(64, 48))
    items = [(0, 0, "jpeg", (torch.frombuffer(bytearray(data), dtype=torch.uint8), (64, 48)), "0" * 32),
             (0, 1, "image", torch.zeros((3, 8, 8), dtype=torch.uint8), "1" * 32)]
    job._Collate(8)(items).pin_memory()
    assert asked == [(1, 3, 8, 8)]
    asked.clear()
    job._Collate(8, pin_bytes=True)(items).pin_memory()
    assert asked == [(1, 3, 8, 8), (len(data),)]


def test_one_worker_pool_serves_every_split(tmp_path, monkeypatch):
    digits_as_jpegs(tmp_path / "jpg", "train", 40, side=64)
    digits_as_jpegs(tmp_path / "jpg", "test", 24, side=64)
    made = []

    class Counting(job.DataLoader):
        def __init__(self, *a, **kw):
            made.append(kw["num_workers"])
            super().__init__(*a, **kw)

    monkeypatch.setattr(job, "DataLoader", Counting)
    res = extract("vip_toy", f"imagefolder:{tmp_path / 'jpg'}", out=tmp_path / "two.zarr", batch_size=16,
                  num_workers=1, shard_rows=16, progress=False)
    assert made == [1]
    assert [(s["split"], s["rows"], s["complete"]) for s in res["splits"]] == [("train", 40, True), ("test", 24, True)]
    single = {}
    for split in ("train", "test"):  # the same rows as each split featurized alone
        bb = toy()
        bb.model.to(memory_format=torch.channels_last)  # as extract() puts it
        job.extract_split(bb, open_split(f"imagefolder:{tmp_path / 'jpg'}", split), tmp_path / f"{split}.zarr",
                          batch_size=16, shard_rows=16, progress=False)
        single[split] = stores.open(tmp_path / f"{split}.zarr")[split].features[:]
        np.testing.assert_array_equal(stores.open(tmp_path / "two.zarr")[split].features[:], single[split])


def test_resuming_with_another_decode_path_is_refused(tmp_path):
    digits_as_jpegs(tmp_path / "jpg", "train", 8, side=64)
    from featurize.__main__ import main
    kw = dict(out=tmp_path / "s.zarr", num_workers=0, progress=False)
    cli = ["--backbone", "vip_toy", "--dataset", f"imagefolder:{tmp_path / 'jpg'}", "--out", str(kw["out"]),
           "--num-workers", "0", "--no-progress", "--decode"]
    assert main(cli + ["draft"]) == 0 and stores.open(kw["out"]).attrs["decode"] == "draft"
    with pytest.raises(ValueError, match="decode: store has \"draft\", this job \"full\""):
        extract("vip_toy", f"imagefolder:{tmp_path / 'jpg'}", decode_mode="full", **kw)
    with pytest.raises(ValueError, match="--decode must be one of"):
        extract("vip_toy", f"imagefolder:{tmp_path / 'jpg'}", decode_mode="gpu", **kw)
    with pytest.raises(SystemExit):
        main(cli + ["gpu"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (nvJPEG through torchvision)")
def test_nvjpeg_batch_matches_the_cpu_decode_within_tolerance(mixed, tmp_path):
    datas = [(mixed / "a" / f"{i}.jpg").read_bytes() for i in range(6)]
    sizes = [decode.device_jpeg_size(d) for d in datas]
    jpegs = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in datas]
    got = decode.decode_batch(jpegs, sizes, BASE, torch.device("cuda"))
    for d, g in zip(datas, got):
        assert g.is_cuda and g.shape == (3, 224, 224)
        # nvJPEG's IDCT and chroma upsampling differ from libjpeg-turbo's: a looser bound than draft's
        assert (g.cpu().float() - crop_of(d, BASE, False).float()).abs().mean() <= 3.0
    bb = toy()
    bb.model.cuda()
    source = open_split(f"imagefolder:{mixed}", "train")
    res = job.extract_split(bb, source, tmp_path / "gpu.zarr", device=torch.device("cuda"), num_workers=2,
                            skip_bad=True, decode_mode="device", progress=False)
    assert sorted(res["skipped"]) == ["b/flipped.jpg", "b/truncated.jpg"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (nvJPEG through torchvision)")
def test_feed_options_on_cuda_give_the_default_store(mixed, tmp_path):
    """On the GPU the staging thread, decoding in chunks on several streams and page-locked bytes change when work
    runs, not what it computes: the default Feed's store bit for bit (same batches, same kernels)."""
    bb = toy()
    bb.model.cuda()
    source = open_split(f"imagefolder:{mixed}", "train")

    def run(name, feed):
        job.extract_split(bb, source, tmp_path / f"{name}.zarr", device=torch.device("cuda"), num_workers=2,
                          dtype="float32", skip_bad=True, batch_size=4, decode_mode="device", progress=False,
                          feed=feed)
        split = stores.open(tmp_path / f"{name}.zarr")["train"]
        return split.features[:], split.valid_mask()

    feats, valid = run("default", job.Feed())
    for name, feed in (("ahead1", job.Feed(ahead=1)),
                       ("all", job.Feed(ahead=2, decode_threads=2, pin_bytes=True, prefetch=1))):
        got = run(name, feed)
        np.testing.assert_array_equal(got[0], feats, err_msg=name)
        np.testing.assert_array_equal(got[1], valid, err_msg=name)


def test_cli_decode_choices_are_the_decode_modes():
    import featurize.__main__ as cli
    from featurize.decode import DECODE_MODES

    assert cli.DECODE_CHOICES == DECODE_MODES
