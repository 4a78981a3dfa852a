"""DP-MAE's secrets: keys from >= 128 bits of os.urandom, never written; the relation and event it records."""
import json
import os
import pickle

import numpy as np
import pytest
import torch

import backbones.mae.trainer as train_mod
from backbones.mae.dp import SECRET_BYTES, PrivacyLeakWarning, SecretStream
from backbones.mae.train import TrainSettings, main, run_dp_event, train
from test_mae import _one_thread  # noqa: F401  (autouse: one torch thread, as in test_mae)

pytestmark = pytest.mark.filterwarnings("ignore:the training loss shown:UserWarning")


@pytest.fixture
def urandom_log(monkeypatch):
    """Every os.urandom output of the test (the real bytes, recorded)."""
    log, real = [], os.urandom

    def recording(n):
        b = real(n)
        log.append(b)
        return b

    monkeypatch.setattr(os, "urandom", recording)
    return log


def _philox_key(stream: SecretStream, step: int) -> np.ndarray:
    return stream.generator(step).bit_generator.state["state"]["key"]


def test_secret_stream_is_keyed_by_256_bits_of_os_urandom(urandom_log):
    a, b = SecretStream(), SecretStream()
    assert [len(x) for x in urandom_log] == [SECRET_BYTES, SECRET_BYTES] and SECRET_BYTES * 8 >= 128
    assert not a.seeded and SecretStream(3).seeded
    # the stream is exactly the one keyed by those bytes (no other source, nothing truncated to 32 or 64 bits)
    entropy = int.from_bytes(urandom_log[0], "little")
    for step in (0, 7):
        assert np.array_equal(a.generator(step).random(4), SecretStream(entropy).generator(step).random(4))
    for bit in (0, 63, 64, 127, 128, 200, 255):  # every bit of the 256 moves the 128-bit Philox key
        assert not np.array_equal(_philox_key(SecretStream(entropy ^ (1 << bit)), 0), _philox_key(a, 0)), bit
    key = _philox_key(a, 0)
    assert key.dtype == np.uint64 and key.shape == (2,)  # 128-bit key
    assert not np.array_equal(key, _philox_key(b, 0)) and not np.array_equal(key, _philox_key(a, 1))
    # a secret never pickles (a checkpoint cannot carry it by accident), and its repr shows no key
    with pytest.raises(TypeError, match="never pickled"):
        pickle.dumps(a)
    assert repr(a) == "SecretStream(seeded=False)"
    assert np.array_equal(SecretStream.from_words(a.to_words(), seeded=False).generator(3).random(3),
                          a.generator(3).random(3))


def _encodings(secret: bytes):
    """Ways a secret could land in a file: raw (either byte order, whole or as 64-bit words), as an int or as
    words in decimal, in hex. (8 random bytes match a few MB of files by chance with probability ~1e-13.)"""
    for b in (secret, secret[::-1]):
        yield b
        yield str(int.from_bytes(b, "little")).encode()
        yield b.hex().encode()
        for i in range(0, len(b), 8):
            yield b[i:i + 8]
            yield str(int.from_bytes(b[i:i + 8], "little")).encode()


def _all_files(root):
    for d, _, files in os.walk(root):
        for f in files:
            yield os.path.join(d, f)


def _dp(tmp_path, name, **kw):
    base = dict(size="toy", data="digits", dp=True, steps=3, sample_rate=0.01, physical_batch=8, lr=1e-3,
                warmup_steps=1, seed=0, clip=0.1, noise_multiplier=2.0, accountant="rdp", log_every=1, ckpt_every=1,
                out=str(tmp_path / name), export=str(tmp_path / name / "enc.pth"))
    base.update(kw)
    return TrainSettings(**base)


def test_sample_and_noise_keys_are_secret_never_written_and_fresh(tmp_path, urandom_log, monkeypatch):
    samples = []
    real_sample = train_mod.poisson_sample

    def recording(n, q, g):
        out = real_sample(n, q, g)
        samples.append(out.clone())
        return out

    monkeypatch.setattr(train_mod, "poisson_sample", recording)
    first = train(_dp(tmp_path, "a"), progress=False)
    run_a = list(samples)
    samples.clear()
    train(_dp(tmp_path, "b"), progress=False)  # same --seed
    run_b = list(samples)
    assert len(run_a) == len(run_b) == 3 and sum(len(s) for s in run_a) > 0
    assert any(not torch.equal(x, y) for x, y in zip(run_a, run_b)), "the sample is a function of the public seed"

    # no key, and no per-step Philox key derived from one, in any file either run wrote
    secrets = [b for b in urandom_log if len(b) >= 16]
    assert len(secrets) >= 4  # sampler + noise, two runs
    needles = []
    for b in secrets:
        needles += list(_encodings(b))
        stream = SecretStream(int.from_bytes(b, "little"))
        for step in range(3):
            key = _philox_key(stream, step)
            needles += [key.tobytes(), key.byteswap().tobytes()] + [str(int(w)).encode() for w in key]
    files = list(_all_files(tmp_path))
    assert {"checkpoint.pth", "enc.pth", "enc.json"} <= {os.path.basename(f) for f in files}
    for f in files:
        blob = open(f, "rb").read()
        for needle in needles:
            assert needle not in blob, f"a secret is in {f}"
    meta = json.load(open(tmp_path / "a" / "enc.json"))
    assert "noise_seed" not in meta["settings"] and "sample_seed" not in meta["settings"]
    assert meta["privacy"]["seeded"] is False and "os.urandom" in meta["privacy"]["randomness"]["sample"]
    ck = torch.load(first["checkpoint"], weights_only=True)
    assert ck["rng"] == {} and ck["history"] is None  # no generator state, no noise-free loss (test_mae_checkpoint)

    # a resumed run draws fresh keys: its step-2 sample is not the one the first segment's key gives
    samples.clear()
    urandom_log.clear()
    s = _dp(tmp_path, "c", steps=40, sample_rate=0.05, export=None)
    train(s, progress=False, stop_after=1)
    first_key = SecretStream(int.from_bytes([b for b in urandom_log if len(b) == SECRET_BYTES][0], "little"))
    train(s, resume=True, progress=False, stop_after=1)
    assert len(samples) == 2
    assert not torch.equal(samples[1], real_sample(1437, 0.05, first_key.generator(1)))


def test_seeded_run_is_labelled_and_its_seeds_withheld(tmp_path, monkeypatch):
    out = tmp_path / "s"
    monkeypatch.setattr("sys.argv", ["-m", "--noise-seed", "987654321", "--sample-seed=123456789"])
    with pytest.warns(PrivacyLeakWarning, match="--noise-seed makes the DP noise reproducible"):
        with pytest.warns(PrivacyLeakWarning, match="--sample-seed makes the DP sample reproducible"):
            train(_dp(tmp_path, "s", steps=1, noise_seed=987654321, sample_seed=123456789), progress=False)
    text = open(out / "enc.json").read()
    meta = json.loads(text)
    assert meta["privacy"]["seeded"] is True and meta["privacy"]["randomness"]["noise"].startswith("SEEDED")
    assert "987654321" not in text and "123456789" not in text
    assert meta["command"].endswith("--noise-seed <withheld> --sample-seed=<withheld>")
    assert torch.load(out / "checkpoint.pth", weights_only=True)["config"]["seeded"] == {"sample": True,
                                                                                          "noise": True}


def test_relation_event_and_delta_recorded_and_reproduced_by_dp_accounting(tmp_path):
    import dp_accounting
    from dp_accounting.rdp import rdp_privacy_accountant

    res = train(_dp(tmp_path, "r", steps=2, noise_multiplier=1.1, sample_rate=0.02), progress=False)
    meta = json.load(open(tmp_path / "r" / "enc.json"))
    priv = meta["privacy"]
    # the ledger entry (named by a random run id) and not the hash of the item set: that is a function of exactly
    # which images were read, so it would tell two neighbouring data sets apart
    assert priv["ledger_entry"].startswith("dpmae-") and "items_set" not in priv
    assert res["ledger"]["items_set"] not in open(tmp_path / "r" / "enc.json").read()
    assert priv["neighboring_relation"] == "REPLACE_SPECIAL" == dp_accounting.NeighboringRelation.REPLACE_SPECIAL.name
    assert priv["neighbouring"] == "zero-out (replace one image by a null image; N public)"
    assert priv["delta"] == 1e-5 <= 1 / (10 * 1437) and priv["n_private"] == 1437
    # the event is dp-accounting's own, rebuilt from JSON; ε follows from it under REPLACE_SPECIAL
    expected = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(0.02, dp_accounting.GaussianDpEvent(1.1)), 2)
    assert run_dp_event(tmp_path / "r" / "enc.json") == expected == run_dp_event(res["checkpoint"])
    assert priv["dp_event"]["type"] == "SelfComposedDpEvent"  # privlin's one event codec: a ledger reads it
    from privlin.ledger import LedgerEntry

    entry = LedgerEntry("DP-MAE", run_dp_event(priv), priv["epsilon"], priv["delta"], "replace_special")
    assert LedgerEntry.from_dict(entry.to_dict()).event == expected
    special = rdp_privacy_accountant.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_SPECIAL).compose(expected)
    assert priv["epsilon"] == pytest.approx(special.get_epsilon(priv["delta"]), rel=1e-9)
    # a record whose event disagrees with its own numbers is refused, not trusted
    bad = dict(priv, steps=3)
    with pytest.raises(ValueError, match="damaged"):
        run_dp_event(bad)
    with pytest.raises(ValueError, match="unknown DpEvent type"):
        run_dp_event(dict(priv, dp_event={"type": "os.system", "command": 1}))


def test_delta_at_least_one_over_n_warns_with_privlins_warning(tmp_path):
    with pytest.warns(PrivacyLeakWarning, match=r"delta=0.001 >= 1/N"):
        train(_dp(tmp_path, "d", steps=1, delta=1e-3, export=None), progress=False)


def test_cli_noise_seed_flag_is_documented(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "--sample-seed" in out and "os.urandom" in out
