"""DP-MAE stops and damaged images: every noisy step taken is counted, a damaged file is refused before the run.

A stop (a non-finite noisy update, an error, a kill) after the last checkpoint loses the steps taken since; a
resumed run redoes them with fresh noise and must count them too (the step journal, written before each step
draws its noise). An image folder is pre-flighted (read and decoded in full) before the first step; a file that
changes afterwards is a null image in a DP run, and the run says so at its end without naming or counting it.
"""
import hashlib
import json
import os
import shutil

import dp_accounting
import numpy as np
import pytest
import torch
from dp_accounting.rdp import rdp_privacy_accountant

import backbones.mae.trainer as train_mod
from backbones.mae.checkpoint import STEP_JOURNAL, load_checkpoint, read_step_journal, write_step_journal
from backbones.mae.data import FolderImages, TensorImages
from backbones.mae.train import TrainSettings, main, train
from test_mae import _one_thread  # noqa: F401  (autouse: one torch thread, as in test_mae)
from test_mae_cli import _dp as _cli_dp

pytestmark = pytest.mark.filterwarnings("ignore:--.*-seed makes the DP:UserWarning")


def _dp(tmp_path, name="run", **kw):
    """test_mae_cli's seeded toy DP run on digits, 5 steps with checkpoints every 2."""
    return _cli_dp(tmp_path, name, **{"steps": 5, "ckpt_every": 2, "noise_multiplier": 1.1, **kw})


def _independent_epsilon(result, steps):
    """dp-accounting's RDP accountant, called directly, for ``steps`` Poisson-subsampled Gaussian steps."""
    event = dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(
        result["sample_rate"], dp_accounting.GaussianDpEvent(result["noise_multiplier"])), steps)
    accountant = rdp_privacy_accountant.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_SPECIAL)
    return accountant.compose(event).get_epsilon(result["delta"])


def _inf_update_at(monkeypatch, calls):
    """The noisy update of the ``calls``-th DP step from now (1-based, counting across runs) is +inf."""
    real, seen = train_mod.reduce_and_privatize, {"n": 0}

    def fake(grad_sum, **kw):
        out = real(grad_sum, **kw)
        seen["n"] += 1
        if seen["n"] in calls:
            out = {k: torch.full_like(v, float("inf")) for k, v in out.items()}
        return out
    monkeypatch.setattr(train_mod, "reduce_and_privatize", fake)


def _journal(s):
    return read_step_journal(os.path.join(s.out, STEP_JOURNAL))


def test_a_public_stop_is_counted_on_resume_and_a_second_resume_does_not_reset_it(tmp_path, monkeypatch):
    s = _dp(tmp_path)  # 5 steps, checkpoints at steps 0, 2, 4 and 5
    _inf_update_at(monkeypatch, {3, 5})  # the third noisy update overall; then the second after the resume
    with pytest.raises(FloatingPointError, match="noisy update of step 3 is not finite"):
        train(s, progress=False)
    assert load_checkpoint(os.path.join(s.out, "checkpoint.pth"))["step"] == 2 and _journal(s)["noisy_steps"] == 3
    with pytest.warns(UserWarning, match="1 noisy steps taken after the checkpoint of step 2 were lost"):
        with pytest.raises(FloatingPointError, match="noisy update of step 4 is not finite"):
            train(s, resume=True, progress=False)  # redoes step 3, stops again at step 4
    assert _journal(s)["noisy_steps"] == 5  # 3 + 2: the checkpoint is still the one of step 2
    with pytest.warns(UserWarning, match="3 noisy steps taken after the checkpoint of step 2 were lost"):
        done = train(s, resume=True, progress=False)
    # noisy steps ever taken: 3 (first run) + 2 (second) + 3 (steps 3, 4, 5 of the third) = 8
    assert done["step"] == 5 and done["dp_steps"] == 8 and done["steps_redone"] == 3
    independent = _independent_epsilon(done, 8)
    assert done["epsilon"] == pytest.approx(independent, rel=1e-3)
    assert done["epsilon"] > _independent_epsilon(done, 7)  # one step fewer reads less: every step counts
    ck = load_checkpoint(done["checkpoint"])
    assert ck["step"] == 5 and ck["accountant"]["steps"] == 8 and _journal(s)["noisy_steps"] == 8
    again = train(s, resume=True, progress=False)  # a resume of the finished run: nothing reset, nothing added
    assert again["dp_steps"] == 8 and again["epsilon"] == done["epsilon"]


def test_an_interrupt_before_the_noise_is_counted_as_a_kill_would_leave_it(tmp_path, monkeypatch):
    # the journal is written before a step draws its sample and noise: an interrupt (or a kill -9) inside step 2's
    # gradients leaves step 2 counted; the resumed run counts it, although its noise was never drawn (safe side)
    s = _dp(tmp_path, steps=3, ckpt_every=1)
    real, seen = train_mod.clipped_grad_sum, {"n": 0}

    def interrupted(*a, **kw):
        seen["n"] += 1
        if seen["n"] == 2:
            raise KeyboardInterrupt
        return real(*a, **kw)
    monkeypatch.setattr(train_mod, "clipped_grad_sum", interrupted)
    monkeypatch.setattr(train_mod, "poisson_sample", lambda n, q, g: torch.arange(3))  # one physical batch a step
    with pytest.raises(KeyboardInterrupt):
        train(s, progress=False)
    assert load_checkpoint(os.path.join(s.out, "checkpoint.pth"))["step"] == 1 and _journal(s)["noisy_steps"] == 2
    with pytest.warns(UserWarning, match="1 noisy steps taken after the checkpoint of step 1"):
        done = train(s, resume=True, progress=False)
    assert done["dp_steps"] == 4 and done["steps_redone"] == 1


def test_the_journal_is_required_verified_and_holds_nothing_secret(tmp_path):
    s = _dp(tmp_path, steps=2, ckpt_every=1)
    train(s, progress=False, stop_after=1)
    path = os.path.join(s.out, STEP_JOURNAL)
    doc = json.load(open(path))
    assert set(doc) == {"noisy_steps", "changed_files_read", "sha256"}  # no key, seed or generator state
    assert doc["noisy_steps"] == 1 and doc["changed_files_read"] is False
    good = open(path).read()
    # a journal that counts fewer steps than the checkpoint, a flipped digit, a deleted journal: named, refused
    for text, expected in ((good.replace('"noisy_steps": 1', '"noisy_steps": 0'), "is damaged"),
                           (json.dumps({**doc, "noisy_steps": 0, "sha256": hashlib.sha256(
                               json.dumps({"noisy_steps": 0, "changed_files_read": False}, sort_keys=True)
                               .encode()).hexdigest()}), "counts 0 noisy steps, fewer than the 1 of the checkpoint"),
                           (None, "no step journal at")):
        if text is None:
            os.remove(path)
        else:
            open(path, "w").write(text)
        with pytest.raises((ValueError, FileNotFoundError), match=expected) as err:
            train(s, resume=True, progress=False)
        assert STEP_JOURNAL in str(err.value)
    open(path, "w").write(good)
    assert train(s, resume=True, progress=False)["dp_steps"] == 2


def test_a_stopped_run_with_a_journal_is_not_overwritten_by_a_new_one(tmp_path):
    s = _dp(tmp_path, steps=1)
    train(s, progress=False)
    os.remove(os.path.join(s.out, "checkpoint.pth"))  # only the journal is left: a new run must not reset it
    with pytest.raises(FileExistsError, match=f"{STEP_JOURNAL} exists"):
        train(s, progress=False)
    # a journal that counts no step (a kill while the step-0 checkpoint was written) does not block a new run
    write_step_journal(os.path.join(s.out, STEP_JOURNAL), 0, False)
    assert train(s, progress=False)["dp_steps"] == 1


# -- image folders: pre-flight, changed files ------------------------------------------------------------------------

def _folder(tmp_path, n=6):
    from PIL import Image

    root = tmp_path / "imgs" / "class0"
    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(n):
        im = Image.fromarray(rng.integers(0, 255, (24 + i, 20, 3), dtype=np.uint8))
        im.save(root / f"{i}.jpg" if i % 2 else root / f"{i}.png", quality=90)
    return tmp_path / "imgs", sorted(str(p) for p in root.iterdir())


def _truncate(path):
    blob = open(path, "rb").read()
    open(path, "wb").write(blob[: len(blob) // 2])


def test_a_truncated_jpeg_is_refused_before_the_first_step_naming_it(tmp_path, capsys, monkeypatch):
    root, files = _folder(tmp_path)
    bad = [f for f in files if f.endswith(".jpg")][1]
    _truncate(bad)
    monkeypatch.setattr(train_mod._Run, "dp_step", lambda self: pytest.fail("a DP step ran"))
    out = tmp_path / "out"
    rc = main(["--size", "toy", "--data", f"imagefolder:{root}", "--dp", "--noise-multiplier", "1", "--steps", "2",
               "--accountant", "rdp", "--no-progress", "--out", str(out)])
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert rc == 2 and len(err) == 1 and "Traceback" not in err[0], err
    assert f"{bad}: cannot be decoded" in err[0] and "nothing was trained" in err[0]
    assert not out.exists()  # no step counted, no checkpoint: nothing was spent
    other = [f for f in files if f.endswith(".png")][0]
    open(other, "wb").write(b"not an image")
    with pytest.raises(ValueError, match=f"^{other}: cannot be decoded \\(not an image PIL can identify\\) \\(and 1 "
                                         f"other files\\)"):
        FolderImages(str(root), 32).preflight(progress=False)


def test_a_file_reached_twice_through_links_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    """One image under two paths (a symlink, a hard link, a folder linked into itself) would count twice: the folder
    is refused when the source is made, by featurize's listing, before any file is read or any step runs."""
    root, files = _folder(tmp_path)
    other = root / "class1"
    other.mkdir()
    os.symlink(files[0], other / "again.png")
    with pytest.raises(ValueError, match="'class1/again.png' and 'class0/0.png' are the same file") as err:
        FolderImages(str(root), 32)
    assert "\n" not in str(err.value)
    os.remove(other / "again.png")
    os.link(files[1], other / "hard.jpg")
    monkeypatch.setattr(train_mod._Run, "dp_step", lambda self: pytest.fail("a DP step ran"))
    out = tmp_path / "out"
    rc = main(["--size", "toy", "--data", f"imagefolder:{root}", "--dp", "--noise-multiplier", "1", "--steps", "2",
               "--accountant", "rdp", "--no-progress", "--out", str(out)])
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert rc == 2 and len(err) == 1 and "are the same file" in err[0] and "hard.jpg" in err[0], err
    assert not out.exists()
    os.remove(other / "hard.jpg")
    os.symlink(root / "class0", root / "class0" / "loop")
    with pytest.raises(ValueError, match="symlink loop or a second link to one folder"):
        FolderImages(str(root), 32)
    os.remove(root / "class0" / "loop")
    assert len(FolderImages(str(root), 32)) == len(files)


def _swap_file_before_step(monkeypatch, path, step, content):
    """Replace ``path`` by ``content`` just before DP step ``step`` (0-based) of the run reads its images."""
    real = train_mod._Run.dp_step

    def dp_step(self):
        if self.step == step:
            open(path, "wb").write(content)
        return real(self)
    monkeypatch.setattr(train_mod._Run, "dp_step", dp_step)


@pytest.mark.parametrize("change", ["truncated", "another image", "deleted"])
def test_a_file_changed_during_a_dp_run_is_a_null_image_and_said_once_at_the_end(tmp_path, monkeypatch, capsys,
                                                                                  change):
    # every image in every step (fixed sample of all six); file k changes after the pre-flight, before step 0: the
    # run equals, bit for bit, the run on the pre-flight's images with image k all NaN (the null image)
    root, files = _folder(tmp_path)
    k = 3
    size = 16  # the toy MAE's image size
    reference = FolderImages(str(root), size)
    reference.preflight(progress=False)
    images = reference[np.arange(len(files))].clone()
    blob = open(files[k], "rb").read()
    new = {"truncated": blob[: len(blob) // 2], "another image": open(files[k - 1], "rb").read(),
           "deleted": None}[change]
    monkeypatch.setattr(train_mod, "poisson_sample", lambda n, q, g: torch.arange(n))
    common = ["--size", "toy", "--dp", "--noise-multiplier", "1", "--sample-rate", "0.5", "--steps", "2",
              "--accountant", "rdp", "--physical-batch", "4", "--noise-seed", "1", "--sample-seed", "2",
              "--no-progress"]
    if new is None:
        real = train_mod._Run.dp_step
        monkeypatch.setattr(train_mod._Run, "dp_step",
                            lambda self: (os.path.exists(files[k]) and os.remove(files[k]), real(self))[1])
    else:
        _swap_file_before_step(monkeypatch, files[k], 0, new)
    assert main(common + ["--data", f"imagefolder:{root}", "--out", str(tmp_path / "changed")]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert "NOTE: training files that differed from the pre-flight were read during training" in line
    assert files[k] not in line and os.path.basename(files[k]) not in line  # not named
    assert read_step_journal(str(tmp_path / "changed" / STEP_JOURNAL))["changed_files_read"] is True

    images[k] = float("nan")
    monkeypatch.setattr(train_mod, "make_source", lambda spec, size, seed=0: (TensorImages(images), True))
    monkeypatch.setattr(train_mod._Run, "dp_step", _real_dp_step)
    assert main(common + ["--data", "digits", "--out", str(tmp_path / "null")]) == 0
    assert "NOTE" not in capsys.readouterr().out
    a = load_checkpoint(str(tmp_path / "changed" / "checkpoint.pth"))["model"]
    b = load_checkpoint(str(tmp_path / "null" / "checkpoint.pth"))["model"]
    for name in a:
        assert bool(torch.isfinite(a[name]).all()) and torch.equal(a[name], b[name]), name


_real_dp_step = train_mod._Run.dp_step


def test_the_changed_file_bit_survives_a_stop_and_a_resume(tmp_path, monkeypatch, capsys):
    from PIL import Image

    root, files = _folder(tmp_path)
    s = _dp(tmp_path, data=f"imagefolder:{root}", steps=3, ckpt_every=10, sample_rate=0.5)
    monkeypatch.setattr(train_mod, "poisson_sample", lambda n, q, g: torch.arange(n))
    _swap_file_before_step(monkeypatch, files[0], 1, b"garbage")
    _inf_update_at(monkeypatch, {2})  # step 2 reads the changed file, then stops on a public value
    with pytest.raises(FloatingPointError):
        train(s, progress=False)
    assert read_step_journal(os.path.join(s.out, STEP_JOURNAL)) == {"noisy_steps": 2, "changed_files_read": True}
    # repaired while stopped with a new sound image (a copy of another file would be one item in two rows, which a
    # subsampled run refuses to charge): the resumed run's pre-flight sees a sound file
    Image.fromarray(np.full((24, 20, 3), 7, np.uint8)).save(files[0], format="PNG" if files[0].endswith("png")
                                                                       else "JPEG")
    monkeypatch.setattr(train_mod._Run, "dp_step", _real_dp_step)
    with pytest.warns(UserWarning, match="lost at a stop"):
        done = train(s, resume=True, progress=False)
    assert done["changed_files_read"] is True and done["dp_steps"] == 5


def test_a_file_changed_during_a_non_private_run_is_an_error_naming_it(tmp_path, monkeypatch):
    root, files = _folder(tmp_path)
    s = TrainSettings(size="toy", data=f"imagefolder:{root}", steps=2, batch_size=6, physical_batch=6,
                      out=str(tmp_path / "np"), warmup_steps=1)
    real = train_mod._Run.nonprivate_step

    def step(self):
        if self.step == 1:
            _truncate(files[2])
        return real(self)
    monkeypatch.setattr(train_mod._Run, "nonprivate_step", step)
    with pytest.warns(UserWarning, match="not differentially private"):
        with pytest.raises(ValueError, match=f"{files[2]} changed during training"):
            train(s, progress=False)
