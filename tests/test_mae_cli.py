"""DP-MAE's command line and its faults: one-line errors, refused resumes, checksums, empty samples."""
import errno
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from backbones.checkpoints import read_checkpoint
from backbones.mae.checkpoint import load_checkpoint, load_mae_weights
from backbones.mae.model import build_mae
from backbones.mae.train import TrainSettings, main, train
from test_mae import _one_thread  # noqa: F401  (autouse: one torch thread, as in test_mae)

pytestmark = [pytest.mark.filterwarnings("ignore:the training loss shown:UserWarning"),
              pytest.mark.filterwarnings("ignore:--.*-seed makes the DP:UserWarning")]
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _dp(tmp_path, name="run", **kw):
    base = dict(size="toy", data="digits", dp=True, steps=2, sample_rate=0.005, physical_batch=8, lr=1e-3,
                warmup_steps=1, seed=0, noise_seed=1, sample_seed=2, clip=0.1, noise_multiplier=2.0,
                accountant="rdp", log_every=1, ckpt_every=1, out=str(tmp_path / name))
    base.update(kw)
    return TrainSettings(**base)


MISTAKES = {
    "epsilon 0": (["--dp", "--epsilon", "0"], "epsilon must be > 0"),
    "epsilon inf": (["--dp", "--epsilon", "inf"], "without --dp"),
    "unknown data": (["--data", "digitz"], "unknown data spec 'digitz'"),
    "missing folder": (["--data", "imagefolder:/no/such/dir"], "does not exist"),
    "resume without checkpoint": (["--resume"], "--resume: no checkpoint"),
    "missing init": (["--init", "/no/such/weights.pth"], "no checkpoint at '/no/such/weights.pth'"),
    "unknown size": (["--size", "huge"], "invalid choice: 'huge'"),
    "zero physical batch": (["--physical-batch", "0"], "physical_batch must be >= 1"),
    "negative steps": (["--steps", "-3"], "steps must be >= 1"),
    "sample rate": (["--dp", "--sample-rate", "1.5"], "sample_rate must be in (0, 1]"),
    "delta": (["--dp", "--delta", "2"], "delta must be in (0, 1)"),
    "not a number": (["--epsilon", "eight"], "invalid float value: 'eight'"),
    "threads": (["--threads", "0"], "--threads must be >= 1"),
    "negative seed": (["--seed", "-1"], "seed must be >= 0"),
}


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_user_mistakes_are_one_line_errors(name, tmp_path, capsys):
    argv, expected = MISTAKES[name]
    try:
        code = main(argv + ["--size", "toy", "--steps", "1", "--out", str(tmp_path / "o"), "--no-progress"]
                    if "--size" not in argv and "--steps" not in argv else argv + ["--out", str(tmp_path / "o")])
    except SystemExit as e:  # argparse's own checks
        code = e.code
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip()]
    assert code == 2 and len(lines) == 1, err
    assert expected in lines[0] and lines[0].startswith("python -m backbones.mae.train: error:")
    assert "Traceback" not in err
    assert not os.path.exists(tmp_path / "o" / "checkpoint.pth")


def test_a_second_run_never_overwrites_a_checkpoint(tmp_path, capsys):
    argv = ["--size", "toy", "--steps", "1", "--batch-size", "2", "--out", str(tmp_path / "o"), "--no-progress"]
    assert main(argv) == 0
    before = open(tmp_path / "o" / "checkpoint.pth", "rb").read()
    assert main(argv + ["--data", "digits", "--dp"]) == 2
    assert "checkpoint.pth exists (another run): pass --resume" in capsys.readouterr().err
    assert open(tmp_path / "o" / "checkpoint.pth", "rb").read() == before


def test_no_traceback_from_the_real_command_line():
    r = subprocess.run([sys.executable, "-m", "backbones.mae.train", "--dp", "--epsilon", "0", "--size", "toy"],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == ("python -m backbones.mae.train: error: epsilon must be > 0 and finite with --dp "
                                "(train without --dp for a non-private run), got 0.0")


def test_help_shows_every_default(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    for default in ("(default: vip_toy)", "(default: synthetic)", "(default: 1000)", "(default: 0.1)",
                    "(default: ghost)", "(default: pld)", "(default: runs/mae)", "(default: 8.0)"):
        assert default in out, default


@pytest.mark.parametrize("change", [dict(epsilon=4.0, noise_multiplier=None), dict(noise_multiplier=3.0),
                                    dict(delta=1e-6), dict(accountant="pld")])
def test_resume_refuses_other_privacy_settings(tmp_path, change):
    s = _dp(tmp_path)
    train(s, progress=False, stop_after=1)
    other = _dp(tmp_path, **change)
    with pytest.raises(ValueError, match="cannot resume .* was started with"):
        train(other, resume=True, progress=False)
    assert train(s, resume=True, progress=False)["step"] == 2  # the same settings resume


def _flip_inside(path, needle: bytes):
    blob = bytearray(open(path, "rb").read())
    at = blob.find(needle)
    assert at >= 0
    blob[at + len(needle) // 2] ^= 0x10
    open(path, "wb").write(bytes(blob))


def test_flipped_byte_in_checkpoint_or_export_is_an_error_naming_the_file(tmp_path):
    res = train(_dp(tmp_path, export=str(tmp_path / "enc.pth")), progress=False)
    ck = load_checkpoint(res["checkpoint"])
    enc = torch.load(tmp_path / "enc.pth", weights_only=True)
    assert set(enc) == {"model", "tensor_sha256"}
    assert json.load(open(tmp_path / "enc.json"))["tensor_sha256"] == enc["tensor_sha256"]
    read_checkpoint(tmp_path / "enc.pth")  # intact: reads
    _flip_inside(res["checkpoint"], ck["model"]["blocks.0.attn.qkv.weight"].numpy().tobytes())
    with pytest.raises(ValueError, match=r"checkpoint.pth' is damaged"):
        load_checkpoint(res["checkpoint"])
    with pytest.raises(ValueError, match="is damaged"):
        train(_dp(tmp_path), resume=True, progress=False)
    _flip_inside(tmp_path / "enc.pth", enc["model"]["blocks.0.mlp.fc1.weight"].numpy().tobytes())
    with pytest.raises(ValueError, match=r"enc.pth' is damaged"):
        read_checkpoint(tmp_path / "enc.pth")  # the registry's loader
    with pytest.raises(ValueError, match=r"enc.pth' is damaged"):
        load_mae_weights(build_mae("toy"), str(tmp_path / "enc.pth"))  # --init
    open(tmp_path / "trunc.pth", "wb").write(open(res["checkpoint"], "rb").read()[:1000])
    with pytest.raises(ValueError, match="trunc.pth' is damaged or not"):
        load_checkpoint(str(tmp_path / "trunc.pth"))


def test_empty_poisson_samples_are_noise_only_steps_on_an_image_folder(tmp_path):
    from PIL import Image

    root = tmp_path / "imgs" / "class0"
    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(3):
        Image.fromarray(rng.integers(0, 255, (20, 20, 3), dtype=np.uint8)).save(root / f"{i}.png")
    s = _dp(tmp_path, data=f"imagefolder:{tmp_path / 'imgs'}", steps=4, sample_rate=0.01, sample_seed=None)
    torch.manual_seed(0)  # the run's own initialization (--seed 0)
    before = build_mae("toy").state_dict()
    res = train(s, progress=False, stop_after=2)
    res = train(s, resume=True, progress=False)
    assert res["step"] == 4 and res["dp_steps"] == 4  # every step accounted, empty or not
    after = load_checkpoint(res["checkpoint"])["model"]
    assert not torch.equal(after["decoder_pred.weight"], before["decoder_pred.weight"])  # noise was added


class _FullDisk:
    """``open`` for the checkpoint module: the first ``files`` files written through it fit, then the disk is full:
    every write fails with ENOSPC (torch.save's real write path, not a patched torch.save)."""

    def __init__(self, files: int):
        self.files = files

    def __call__(self, path, mode="r", *args, **kw):
        f = open(path, mode, *args, **kw)
        if "w" not in mode:
            return f
        self.files -= 1
        return f if self.files >= 0 else _Full(f)


class _Full:
    def __init__(self, f):
        self._f = f

    def write(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


def _one_error_line(capsys):
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_full_disk_is_one_line_naming_the_file_and_leaves_no_temporary_file(tmp_path, capsys, monkeypatch):
    from backbones.mae import checkpoint as ckpt_mod

    out = tmp_path / "o"
    argv = ["--size", "toy", "--data", "digits", "--dp", "--noise-multiplier", "2", "--accountant", "rdp",
            "--steps", "2", "--sample-rate", "0.005", "--physical-batch", "8", "--ckpt-every", "1", "--out", str(out),
            "--export", "enc.pth", "--no-progress"]
    monkeypatch.setattr(ckpt_mod, "open", _FullDisk(1), raising=False)  # step 1's checkpoint fits, step 2's not
    assert main(argv) == 2
    line = _one_error_line(capsys)
    assert line.startswith("python -m backbones.mae.train: error: ")
    assert f"cannot write {out / 'checkpoint.pth'}: No space left on device" in line
    assert sorted(os.listdir(out)) == ["checkpoint.pth"]  # no checkpoint.pth.tmp<PID>
    assert load_checkpoint(str(out / "checkpoint.pth"))["step"] == 1  # the previous checkpoint is intact
    for attempt in range(2):  # resuming on a still-full disk: the same line each time, nothing left behind
        monkeypatch.setattr(ckpt_mod, "open", _FullDisk(0), raising=False)
        assert main(argv + ["--resume"]) == 2
        assert "cannot write" in _one_error_line(capsys) and sorted(os.listdir(out)) == ["checkpoint.pth"]
    # the export (and its provenance JSON) fail the same way once the checkpoint is written
    monkeypatch.setattr(ckpt_mod, "open", _FullDisk(1), raising=False)
    assert main(argv + ["--resume"]) == 2
    assert f"cannot write {out / 'enc.pth'}: No space left on device" in _one_error_line(capsys)
    assert sorted(os.listdir(out)) == ["checkpoint.pth"] and load_checkpoint(str(out / "checkpoint.pth"))["step"] == 2


def test_export_bare_name_goes_under_out_and_a_path_is_honoured(tmp_path, monkeypatch, capsys):
    from backbones.mae.train import export_path

    monkeypatch.chdir(tmp_path)
    base = ["--size", "toy", "--steps", "1", "--batch-size", "2", "--no-progress"]
    assert main(base + ["--out", "runs/a", "--export", "enc.pth"]) == 0
    assert os.path.isfile("runs/a/enc.pth") and os.path.isfile("runs/a/enc.json") and not os.path.exists("enc.pth")
    assert main(base + ["--out", "runs/b", "--export", "elsewhere/enc.pth"]) == 0  # relative, with a folder
    assert os.path.isfile("elsewhere/enc.pth") and os.path.isfile("elsewhere/enc.json")
    assert not os.path.exists("runs/b/elsewhere")
    assert main(base + ["--out", "runs/c", "--export", str(tmp_path / "abs" / "enc.pth")]) == 0  # absolute
    assert os.path.isfile(tmp_path / "abs" / "enc.pth")
    assert main(base + ["--out", "runs/d", "--export", "./enc.pth"]) == 0  # an explicit folder part: as given
    assert os.path.isfile("enc.pth")
    assert export_path(TrainSettings(out="o", export="x.pth")) == os.path.join("o", "x.pth")
    assert "export runs/a/enc.pth" in capsys.readouterr().out  # the final line says where it went


def test_the_torch_trainer_loads_neither_jax_nor_scikit_learn():
    # DP-MAE needs privlin's accounting and event codec only; JAX and scikit-learn (privlin's estimator) would cost
    # seconds and memory in every trainer process. Needs privlin/__init__ to import lazily (issue 35.6).
    code = ("import sys, backbones.mae.train, backbones.mae.dp; "
            "print(sorted(m for m in ('jax', 'sklearn') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": REPO})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]", r.stdout


@pytest.mark.slow  # three CLI processes, ~1 min on a 2-core box
def test_kill9_then_resume_equals_one_clean_run_and_leaves_no_temporary_file(tmp_path):
    # a seeded DP run killed (SIGKILL) after some checkpoint, resumed: bit for bit the uninterrupted run (the masks
    # are keyed by seed and step, the sample and noise by the seeds and step); a kill's temporary file is removed
    import signal
    import time

    argv = [sys.executable, "-m", "backbones.mae.train", "--size", "toy", "--data", "digits", "--dp", "--steps", "8",
            "--sample-rate", "0.01", "--physical-batch", "4", "--noise-multiplier", "2", "--accountant", "rdp",
            "--noise-seed", "1", "--sample-seed", "2", "--ckpt-every", "1", "--threads", "1", "--no-progress"]
    env = dict(os.environ, PYTHONPATH=REPO)
    clean = subprocess.run(argv + ["--out", str(tmp_path / "clean")], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=300)
    assert clean.returncode == 0, clean.stderr
    out = tmp_path / "killed"
    proc = subprocess.Popen(argv + ["--out", str(out)], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if (out / "checkpoint.pth").exists() and load_checkpoint(str(out / "checkpoint.pth"))["step"] >= 3:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    step = load_checkpoint(str(out / "checkpoint.pth"))["step"]
    assert 3 <= step < 8
    stale = out / f"checkpoint.pth.tmp{proc.pid}"
    stale.write_bytes(b"half a checkpoint")  # as a kill in the middle of a write leaves it
    resumed = subprocess.run(argv + ["--out", str(out), "--resume"], cwd=REPO, env=env, capture_output=True,
                             text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(os.listdir(out)) == ["checkpoint.pth"]
    a, b = load_checkpoint(str(tmp_path / "clean" / "checkpoint.pth")), load_checkpoint(str(out / "checkpoint.pth"))
    assert a["step"] == b["step"] == 8 and a["accountant"] == b["accountant"]
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k


def test_stale_temporaries_of_dead_writers_only_are_removed(tmp_path):
    from backbones.mae.checkpoint import remove_stale_temporaries

    path = str(tmp_path / "checkpoint.pth")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for pid in (dead.pid, os.getpid(), os.getppid()):
        open(f"{path}.tmp{pid}", "wb").close()
    open(f"{path}.tmpnotapid", "wb").close()
    assert remove_stale_temporaries(path) == [f"{path}.tmp{dead.pid}"]
    assert sorted(os.listdir(tmp_path)) == sorted(f"checkpoint.pth.tmp{p}" for p in (os.getpid(), os.getppid(),
                                                                                      "notapid"))
