"""Stores and ledgers on S3, against a local S3 server (moto in server mode on 127.0.0.1, through s3fs).

Skipped when the ``s3-test`` extra (s3fs, moto[server]) is not installed or the server cannot start.  Nothing
leaves the machine: the endpoint is 127.0.0.1 and the credentials are dummies.
"""
import contextlib
import io
import json
import logging
import os
import threading
import uuid
import warnings

import numpy as np
import pytest

BUCKET = "privlin-test"


@pytest.fixture(scope="module")
def s3():
    """``s3://BUCKET`` on a moto server bound to 127.0.0.1 (environment set for this process and its children).

    Requests are served one at a time: moto checks a conditional write (If-Match, If-None-Match) and then writes,
    which real S3 does atomically; serving serially gives moto the same atomicity (concurrency between clients is
    kept: each waits for the server, as on S3)."""
    pytest.importorskip("s3fs")
    moto_server = pytest.importorskip("moto.server")
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not a line per request
    app = moto_server.DomainDispatcherApplication(moto_server.create_backend_app)
    one_at_a_time = threading.Lock()

    def serial(environ, start_response):
        with one_at_a_time:
            return list(app(environ, start_response))

    try:
        server = make_server("127.0.0.1", 0, serial, threaded=True)
    except OSError as e:
        pytest.skip(f"local S3 server cannot start: {e}")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://127.0.0.1:{server.port}", "AWS_EC2_METADATA_DISABLED": "true"}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        import s3fs

        s3fs.S3FileSystem.clear_instance_cache()
        fs = s3fs.S3FileSystem()
        try:
            if not fs.exists(BUCKET):  # moto keeps its buckets per process: another module's server made it
                fs.mkdir(BUCKET)
        except Exception as e:  # noqa: BLE001 - any failure to reach it means no server: skip, never a false pass
            server.shutdown()
            pytest.skip(f"local S3 server does not answer: {e}")
        yield fs
    server.shutdown()


def _url():
    return f"s3://{BUCKET}/{uuid.uuid4().hex}/s.zarr"


@pytest.fixture(scope="module")
def both(s3, tmp_path_factory):
    """The same store written by the same job to S3 and to a local folder: ``(s3 URL, local path)``."""
    from faults.inject import write_store

    url, local = _url(), str(tmp_path_factory.mktemp("local") / "s.zarr")
    write_store(url)
    write_store(local)
    return url, local


def test_a_store_written_to_s3_has_the_local_stores_bytes_and_verifies(s3, both):
    import stores
    from stores.__main__ import main as stores_cli

    from faults.inject import rows

    url, local = both
    files = sorted(os.path.relpath(os.path.join(d, f), local) for d, _, fs in os.walk(local) for f in fs)
    chunks = [f for f in files if not f.endswith("zarr.json")]  # zarr.json holds creation times
    assert len(chunks) > 20
    for f in chunks:
        assert s3.cat_file(url[len("s3://"):] + "/" + f) == open(os.path.join(local, f), "rb").read(), f
    X, y = stores.open(url)["train"].to_numpy()
    X0, y0, _ = rows()
    assert np.array_equal(X, X0) and np.array_equal(y, y0)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert stores_cli(["verify", url]) == 0
    assert out.getvalue().startswith("ok:")


def test_fit_and_sweep_read_an_s3_store_as_they_read_the_local_one(s3, both):
    """Same rows, same key: the same model from S3 as from disk; both stores hold the same items, so they share one
    budget in the ledger home."""
    import privlin
    from privlin.data import as_source
    from privlin.ledger.__main__ import main as ledger_main
    from privlin.sweep import sweep

    url, local = both
    remote_fit = privlin.fit(url, epsilon=1.0, method="adam1", random_state=0)
    local_fit = privlin.fit(local, epsilon=1.0, method="adam1", random_state=0)
    np.testing.assert_array_equal(remote_fit.coef_transformed_, local_fit.coef_transformed_)
    remote = sweep(url, [0.5, 2.0], method="adam1", eval_split=None, random_state=1)
    here = sweep(local, [0.5, 2.0], method="adam1", eval_split=None, random_state=1)
    for a, b in zip(remote.coef, here.coef):
        np.testing.assert_array_equal(a, b)
    led = as_source(url, "train").ledger()
    assert len(led) == 4  # two fits and two sweeps, on S3 and on disk: the same images
    assert led.spent() == as_source(local, "train").ledger().spent()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert ledger_main([url, "--split", "train"]) == 0
    assert "DPLinearClassifier/adam1" in out.getvalue() and "total" in out.getvalue()


@pytest.mark.slow  # ~25 s on 2 cores (torch, and the digits written twice); the store writer's S3 path runs by default
def test_featurize_writes_to_s3_the_store_it_writes_to_disk(s3, tmp_path):
    """``featurize --out s3://...`` (the pixels backbone on the embedded digits): the same features, labels and ids
    as the same command writing a local folder, and the S3 store verifies."""
    import stores
    from featurize.__main__ import main as featurize_cli

    url, local = _url(), str(tmp_path / "d.zarr")
    for out in (url, local):
        assert featurize_cli(["--backbone", "pixels", "--dataset", "digits", "--num-workers", "0", "--no-progress",
                              "--out", out]) == 0
    remote, here = stores.open(url), stores.open(local)
    assert remote.splits == here.splits and remote.splits
    for name in here.splits:
        X, y = remote[name].to_numpy()
        X0, y0 = here[name].to_numpy()
        assert np.array_equal(X, X0) and np.array_equal(y, y0) and len(y) > 100
        assert np.array_equal(remote[name].ids[:], here[name].ids[:])
    remote.verify()


def _charge_until_refused(url, worker, sigma, cap, tries, results):
    """One writer process: ``tries`` charges on the split's S3 ledger; puts the mechanisms admitted."""
    from dp_accounting import dp_event as ev

    from privlin.ledger import PrivacyBudgetExceeded, PrivacyLedger

    admitted = []
    try:
        led = PrivacyLedger.for_split(url, "train", anchored=True, cap=cap)
        for i in range(tries):
            try:
                led.charge(ev.GaussianDpEvent(sigma), mechanism=f"w{worker}-{i}", epsilon=0.1, delta=1e-9)
                admitted.append(f"w{worker}-{i}")
            except PrivacyBudgetExceeded:
                pass
    except Exception as e:  # noqa: BLE001 - reported to the test, which fails on it
        admitted.append(f"error: {type(e).__name__}: {e}")
    results.put(admitted)


def test_processes_charging_one_s3_ledger_lose_no_entry_and_never_pass_the_cap(s3, monkeypatch):
    """Four processes charge the same split's items in a ledger home on S3 four times each under a cap that admits
    only some charges: every admitted charge is recorded exactly once, every refused one is not, and the total stays under
    the cap with no room for one more (the lease serialises writers across processes; If-Match guards the write).
    The writers are forked from this process (no second import of the library), each with its own S3 client."""
    import multiprocessing as mp

    from dp_accounting import dp_event as ev

    from privlin.ledger import PrivacyLedger

    from faults.inject import write_store

    url = _url()
    write_store(url)
    monkeypatch.setenv("PRIVLIN_LEDGER_HOME", f"s3://{BUCKET}/{uuid.uuid4().hex}/home")  # a team's home on S3
    sigma, cap = 4.0, (2.0, 1e-5)  # the cap admits 4 of the 16 charges tried (GDP: μ = √n/σ)
    ctx = mp.get_context("fork")
    results = ctx.Queue()
    procs = [ctx.Process(target=_charge_until_refused, args=(url, k, sigma, cap, 4, results)) for k in range(4)]
    with warnings.catch_warnings():  # the writers never touch JAX (imported here by other tests): no deadlock to fear
        warnings.filterwarnings("ignore", message=".*os.fork.*", category=RuntimeWarning)
        for p in procs:
            p.start()
    admitted = sorted(m for _ in procs for m in results.get(timeout=300))
    assert not [m for m in admitted if m.startswith("error")], admitted
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0] * 4
    led = PrivacyLedger.for_split(url, "train", anchored=True)
    recorded = sorted(e.mechanism for e in led.entries)
    assert recorded == admitted and len(admitted) == 4
    eps, delta = led.spent()
    assert delta == cap[1] and eps <= cap[0] * (1 + 1e-9)
    assert led.projected(ev.GaussianDpEvent(sigma))[0] > cap[0]  # the cap admitted exactly as many as fit
    assert led.path.startswith(f"s3://{BUCKET}/") and led.path.endswith("/home")


def test_a_held_lease_refuses_the_second_writer_in_one_line(s3):
    from dp_accounting import dp_event as ev

    from privlin.ledger import PrivacyLedger

    url = f"s3://{BUCKET}/{uuid.uuid4().hex}/privacy_ledger.json"
    s3.pipe_file(url[len("s3://"):] + ".lock", b'{"owner": "a killed writer"}')
    led = PrivacyLedger(url, lock_timeout=0.5)
    with pytest.raises(TimeoutError) as e:
        led.charge(ev.GaussianDpEvent(5.0), mechanism="fit", epsilon=1.0, delta=1e-5)
    assert str(e.value).count("\n") == 0 and url + ".lock" in str(e.value) and len(led) == 0
    s3.rm(url[len("s3://"):] + ".lock")
    led.charge(ev.GaussianDpEvent(5.0), mechanism="fit", epsilon=1.0, delta=1e-5)
    assert len(led) == 1 and not s3.exists(url[len("s3://"):] + ".lock")


def test_a_write_after_a_broken_lease_fails_and_writes_nothing(s3, monkeypatch):
    """A writer whose lease was broken (another wrote meanwhile) cannot overwrite the newer ledger: If-Match."""
    from dp_accounting import dp_event as ev

    from privlin.ledger import PrivacyLedger, storage

    url = f"s3://{BUCKET}/{uuid.uuid4().hex}/privacy_ledger.json"
    a = PrivacyLedger(url)
    a.charge(ev.GaussianDpEvent(5.0), mechanism="first", epsilon=1.0, delta=1e-5)
    real_write = storage.S3Object.write

    def meanwhile(self, data):  # another process charges between this writer's read and its write
        monkeypatch.setattr(storage.S3Object, "write", real_write)
        monkeypatch.setattr(storage.S3Object, "locked", lambda self: contextlib.nullcontext())
        PrivacyLedger(url).charge(ev.GaussianDpEvent(5.0), mechanism="other", epsilon=1.0, delta=1e-5)
        real_write(self, data)

    monkeypatch.setattr(storage.S3Object, "write", meanwhile)
    with pytest.raises(storage.LedgerConflict, match="changed since this writer read it"):
        a.charge(ev.GaussianDpEvent(5.0), mechanism="lost?", epsilon=1.0, delta=1e-5)
    assert [e.mechanism for e in PrivacyLedger(url).entries] == ["first", "other"]
