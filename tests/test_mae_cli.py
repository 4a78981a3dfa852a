"""DP-MAE's command line and its faults: one-line errors, refused resumes, checksums, empty samples."""
import errno
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from backbones.checkpoints import read_checkpoint
from backbones.mae.checkpoint import load_checkpoint, load_mae_weights, read_step_journal
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
    "epsilon 0": (["--dp", "--epsilon", "0"], "--epsilon: must be > 0, got 0"),
    "epsilon inf": (["--dp", "--epsilon", "inf"], "without --dp"),
    "unknown data": (["--data", "digitz"], "unknown data spec 'digitz'"),
    "missing folder": (["--data", "imagefolder:/no/such/dir"], "does not exist"),
    "resume without checkpoint": (["--resume"], "--resume: no checkpoint"),
    "missing init": (["--init", "/no/such/weights.pth"], "no checkpoint at '/no/such/weights.pth'"),
    "unknown size": (["--size", "huge"], "invalid choice: 'huge'"),
    "zero physical batch": (["--physical-batch", "0"], "--physical-batch: must be in [1, 1e+06], got 0"),
    "negative steps": (["--steps", "-3"], "--steps: must be in [1, 1e+07], got -3"),
    "sample rate": (["--dp", "--sample-rate", "1.5"], "--sample-rate: must be in (0, 1], got 1.5"),
    "delta": (["--dp", "--delta", "2"], "--delta: must be in (0, 1), got 2"),
    "not a number": (["--epsilon", "eight"], "expected a number, got 'eight'"),
    "threads": (["--threads", "0"], "--threads must be >= 1"),
    "negative seed": (["--seed", "-1"], "--seed: must be in [0, 9.22337e+18], got -1"),
}
#: Extreme public settings (issue: `--lr 1e36` was a torch traceback inside AdamW): each refused in one line, exit 2,
#: before a private image is read, a step is counted or a file is written.
BAD_SETTINGS = {
    "lr 1e36": (["--lr", "1e36"], "--lr: must be in (0, 10], got 1e36"),
    "lr 1e300": (["--lr", "1e300"], "--lr: must be in (0, 10]"),
    "lr inf": (["--lr", "inf"], "--lr: must be in (0, 10], got inf"),
    "lr nan": (["--lr", "nan"], "--lr: must be in (0, 10], got nan"),
    "lr 0": (["--lr", "0"], "--lr: must be in (0, 10], got 0"),
    "lr negative": (["--lr=-1e-3"], "--lr: must be in (0, 10]"),
    "min lr nan": (["--min-lr", "nan"], "--min-lr: must be in [0, 10], got nan"),
    "min lr above lr": (["--min-lr", "1", "--lr", "0.1"], "need 0 <= min_lr <= lr"),
    "weight decay nan": (["--weight-decay", "nan"], "--weight-decay: must be >= 0, finite, got nan"),
    "weight decay negative": (["--weight-decay=-0.1"], "--weight-decay: must be >= 0, finite"),
    "weight decay times lr": (["--weight-decay", "1e6", "--lr", "0.1"], "lr * weight_decay must be <= 1"),
    "sigma nan": (["--dp", "--noise-multiplier", "nan"], "--noise-multiplier: must be > 0, finite, got nan"),
    "sigma 0": (["--dp", "--noise-multiplier", "0"], "--noise-multiplier: must be > 0, finite, got 0"),
    "sigma negative": (["--dp", "--noise-multiplier=-1"], "--noise-multiplier: must be > 0, finite"),
    "sigma inf": (["--dp", "--noise-multiplier", "inf"], "--noise-multiplier: must be > 0, finite, got inf"),
    "sigma huge": (["--dp", "--noise-multiplier", "1e300", "--sample-rate", "0.01"],
                   "sigma*C/(q*N) = 1e+300*0.1/(0.01*1437) = 6.96e+297, is more than AdamW's float32"),
    "clip nan": (["--dp", "--clip", "nan"], "--clip: must be > 0, finite, got nan"),
    "clip 0": (["--dp", "--clip", "0"], "--clip: must be > 0, finite, got 0"),
    "clip inf": (["--dp", "--clip", "inf"], "--clip: must be > 0, finite, got inf"),
    "clip huge": (["--dp", "--clip", "1e30", "--noise-multiplier", "1", "--sample-rate", "0.01"],
                  "more than AdamW's float32 arithmetic holds"),
    "epsilon nan": (["--dp", "--epsilon", "nan"], "--epsilon: must be > 0, got nan"),
    "epsilon negative": (["--dp", "--epsilon=-1"], "--epsilon: must be > 0"),
    "delta nan": (["--dp", "--delta", "nan"], "--delta: must be in (0, 1), got nan"),
    "delta 0": (["--dp", "--delta", "0"], "--delta: must be in (0, 1), got 0"),
    "sample rate nan": (["--dp", "--sample-rate", "nan"], "--sample-rate: must be in (0, 1], got nan"),
    "sample rate 0": (["--dp", "--sample-rate", "0"], "--sample-rate: must be in (0, 1], got 0"),
    "batch 0": (["--batch-size", "0"], "--batch-size: must be in [1, 1e+06], got 0"),
    "batch huge": (["--batch-size", str(10**9)], "--batch-size: must be in [1, 1e+06], got 1000000000"),
    "batch float": (["--batch-size", "1.5"], "--batch-size: expected an integer, got '1.5'"),
    "physical batch huge": (["--physical-batch", str(10**12)], "--physical-batch: must be in [1, 1e+06]"),
    "steps 0": (["--steps", "0"], "--steps: must be in [1, 1e+07], got 0"),
    "steps huge": (["--steps", str(10**18)], "--steps: must be in [1, 1e+07], got 1000000000000000000"),
    "steps nan": (["--steps", "nan"], "--steps: expected an integer, got 'nan'"),
    "warmup negative": (["--warmup-steps=-1"], "--warmup-steps: must be in [0, 1e+07], got -1"),
    "seed huge": (["--seed", str(2**64)], "--seed: must be in [0, 9.22337e+18]"),
    "noise seed negative": (["--dp", "--noise-multiplier", "1", "--noise-seed=-1"], "--noise-seed: must be >= 0"),
    "ckpt every 0": (["--ckpt-every", "0"], "--ckpt-every: must be >= 1, got 0"),
    "log every 0": (["--log-every", "0"], "--log-every: must be >= 1, got 0"),
}


def _one_line_refusal(argv, tmp_path, capsys):
    out = tmp_path / "o"
    extra = [] if "--steps" in argv else ["--steps", "1"]
    try:
        code = main(["--size", "toy", "--data", "digits", "--no-progress", "--out", str(out)] + extra + argv)
    except SystemExit as e:  # argparse's own checks
        code = e.code
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip() and "Warning" not in x and "warnings.warn" not in x
             and "result = train(" not in x]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("python -m backbones.mae.train: error:")
    assert not out.exists()  # nothing written: no checkpoint, no step journal
    return lines[0]


@pytest.mark.parametrize("name", sorted(BAD_SETTINGS))
def test_extreme_settings_are_refused_in_one_line_before_anything(name, tmp_path, capsys, monkeypatch):
    import backbones.mae.trainer as train_mod

    def no_step(self):  # a refused setting never reaches a step (which would count it in the journal)
        raise AssertionError("a DP step ran")
    monkeypatch.setattr(train_mod._Run, "dp_step", no_step)
    monkeypatch.setattr(train_mod._Run, "nonprivate_step", no_step)
    argv, expected = BAD_SETTINGS[name]
    line = _one_line_refusal(argv, tmp_path, capsys)
    assert expected in line, line


@pytest.mark.parametrize("field, value", [("lr", float("nan")), ("lr", 1e36), ("clip", float("nan")),
                                          ("steps", float("nan")), ("steps", 2.5), ("batch_size", True),
                                          ("noise_multiplier", -1.0), ("beta2", 1.0), ("seed", 2**64)])
def test_extreme_settings_are_refused_by_the_python_api_too(field, value):
    with pytest.raises(ValueError, match=f"^{field} must be "):
        TrainSettings(**{field: value})
    assert TrainSettings(steps=np.int64(3), lr=np.float32(1e-3)).steps == 3  # numpy scalars are numbers


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


def test_a_data_typo_is_named_with_the_settings_before_any_work(tmp_path, capsys, monkeypatch):
    """``--data digitz`` is refused where the settings are checked: no model built, no image read, at once."""
    import backbones.mae.trainer as train_mod

    for name in ("build_mae", "make_source"):
        monkeypatch.setattr(train_mod, name, lambda *a, name=name, **k: pytest.fail(f"{name} ran"))
    start = time.perf_counter()
    assert main(["--data", "digitz", "--out", str(tmp_path / "o")]) == 2
    for bad in ("Digits", "imagefolder", "imagefolder:", "folder:/tmp"):
        with pytest.raises(ValueError, match=f"^unknown data spec {bad!r}; use synthetic, digits or imagefolder:PATH"):
            TrainSettings(data=bad)
    assert time.perf_counter() - start < 1.0
    assert "unknown data spec 'digitz'" in capsys.readouterr().err


@pytest.mark.parametrize("args, expected", [
    (["--data", "digitz"], "error: unknown data spec 'digitz'; use synthetic, digits or imagefolder:PATH"),
    (["--size", "huge"], "error: argument --size: invalid choice: 'huge'"),
    (["--per-example", "vmapp"], "error: argument --per-example: invalid choice: 'vmapp'"),
    (["--dp", "--epsilon", "inf", "--data", "digits"], "error: epsilon must be > 0 and finite with --dp"),
])
def test_a_wrong_name_is_reported_before_torch_is_imported(args, expected):
    """The command line checks its arguments from public facts (sizes, data specs, methods) before the trainer and
    torch load: the error is one line with exit status 2, and torch is not in ``sys.modules`` when it is given."""
    code = ("import sys\nfrom backbones.mae.train import main\ntry:\n    code = main(sys.argv[1:])\n"
            "except SystemExit as e:\n    code = e.code\nprint(code, 'torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": REPO})
    assert r.stdout.split() == ["2", "False"], (r.stdout, r.stderr)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("python -m backbones.mae.train: ") and expected in lines[0], r.stderr
    r = subprocess.run([sys.executable, "-m", "backbones.mae.train", *args], cwd=REPO, capture_output=True, text=True,
                       timeout=300, env={**os.environ, "PYTHONPATH": REPO})
    assert r.returncode == 2 and r.stdout == "" and r.stderr.strip() == lines[0], r.stderr


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
    assert r.stderr.strip() == ("python -m backbones.mae.train: error: argument --epsilon: must be > 0, got 0 (see "
                                "python -m backbones.mae.train --help)")


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
    """``open`` for the checkpoint module: the first ``files`` files named ``<name>.tmp<PID>`` written through it fit,
    then the disk is full for them: every write fails with ENOSPC (torch.save's real write path, not a patched
    torch.save). Files of other names are written."""

    def __init__(self, files: int, name: str = "checkpoint.pth"):
        self.files, self.name = files, name

    def __call__(self, path, mode="r", *args, **kw):
        f = open(path, mode, *args, **kw)
        if "w" not in mode or not os.path.basename(path).startswith(self.name + ".tmp"):
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
    records = ["checkpoint.pth", "dp_steps.json"]
    # the step journal cannot be written: refused before the first step, nothing left
    monkeypatch.setattr(ckpt_mod, "open", _FullDisk(0, "dp_steps.json"), raising=False)
    assert main(argv) == 2
    assert f"cannot write {out / 'dp_steps.json'}: No space left on device" in _one_error_line(capsys)
    assert os.listdir(out) == []
    # checkpoints of steps 0 and 1 fit, step 2's not
    monkeypatch.setattr(ckpt_mod, "open", _FullDisk(2), raising=False)
    assert main(argv) == 2
    line = _one_error_line(capsys)
    assert line.startswith("python -m backbones.mae.train: error: ")
    assert f"cannot write {out / 'checkpoint.pth'}: No space left on device" in line
    assert sorted(os.listdir(out)) == records  # no checkpoint.pth.tmp<PID>
    assert load_checkpoint(str(out / "checkpoint.pth"))["step"] == 1  # the previous checkpoint is intact
    assert read_step_journal(str(out / "dp_steps.json"))["noisy_steps"] == 2  # step 2 was taken: counted
    for attempt in range(2):  # resuming on a still-full disk: the same line each time, nothing left behind
        monkeypatch.setattr(ckpt_mod, "open", _FullDisk(0), raising=False)
        with pytest.warns(UserWarning, match="lost at a stop: they are counted"):
            assert main(argv + ["--resume"]) == 2
        assert "cannot write" in _one_error_line(capsys) and sorted(os.listdir(out)) == records
        assert read_step_journal(str(out / "dp_steps.json"))["noisy_steps"] == 3 + attempt  # each retry's step
    # the export (and its provenance JSON) fail the same way once the checkpoint is written
    monkeypatch.setattr(ckpt_mod, "open", _FullDisk(0, "enc.pth"), raising=False)
    with pytest.warns(UserWarning, match="lost at a stop"):
        assert main(argv + ["--resume"]) == 2
    assert f"cannot write {out / 'enc.pth'}: No space left on device" in _one_error_line(capsys)
    ck = load_checkpoint(str(out / "checkpoint.pth"))
    assert sorted(os.listdir(out)) == records and ck["step"] == 2 and ck["accountant"]["steps"] == 5


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
    # seconds and memory in every trainer process. Needs privlin/__init__ to import lazily.
    code = ("import sys, backbones.mae.trainer, backbones.mae.dp; "
            "print(sorted(m for m in ('jax', 'sklearn') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": REPO})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]", r.stdout


@pytest.mark.slow  # three CLI processes, ~1 min on a 2-core box
def test_kill9_then_resume_equals_one_clean_run_and_leaves_no_temporary_file(tmp_path):
    # a seeded DP run killed (SIGKILL) after some checkpoint, resumed: bit for bit the uninterrupted run (the masks
    # are keyed by seed and step, the sample and noise by the seeds and step), its accountant counting the step the
    # kill interrupted; a kill's temporary file is removed
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
    begun = read_step_journal(str(out / "dp_steps.json"))["noisy_steps"]  # counted before each step's noise
    assert 3 <= step < 8 and step <= begun <= step + 1
    stale = out / f"checkpoint.pth.tmp{proc.pid}"
    stale.write_bytes(b"half a checkpoint")  # as a kill in the middle of a write leaves it
    resumed = subprocess.run(argv + ["--out", str(out), "--resume"], cwd=REPO, env=env, capture_output=True,
                             text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(os.listdir(out)) == ["checkpoint.pth", "dp_steps.json"]
    a, b = load_checkpoint(str(tmp_path / "clean" / "checkpoint.pth")), load_checkpoint(str(out / "checkpoint.pth"))
    assert a["step"] == b["step"] == 8 and a["accountant"]["steps"] == 8
    # the step the kill interrupted (if it had begun) is counted: its noise may have been drawn and lost
    assert b["accountant"]["steps"] == 8 + (begun - step) and b["accountant"]["epsilon"] >= a["accountant"]["epsilon"]
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
