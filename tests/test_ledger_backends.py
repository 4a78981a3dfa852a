"""One conformance suite for every place a ledger is stored (zarr's ``StoreTests``): a ledger file on the local disk,
on S3 (the local moto server of ``test_s3``) and under another fsspec URL, an in-memory ledger, and the ledger home
as SQLite and on S3. :class:`LedgerTests` states what each must do; a subclass per backend says only how to open
one and how to damage a stored record."""
import json
import multiprocessing
import sqlite3
import uuid
import warnings

import pytest
from dp_accounting import NeighboringRelation
from dp_accounting import dp_event as ev
from dp_accounting.pld import pld_privacy_accountant

from privlin.ledger import LedgerDamaged, PrivacyBudgetExceeded, PrivacyLedger, home, storage
from test_s3 import BUCKET, s3  # noqa: F401 - the moto S3 server fixture

FIT = ev.GaussianDpEvent(3.0)
SWEEP = ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(0.1, ev.GaussianDpEvent(1.5)), 10)
ITEMS = [f"{i:032x}" for i in range(40)]


def _pld(events, delta=1e-5):
    acc = pld_privacy_accountant.PLDAccountant(NeighboringRelation.REPLACE_SPECIAL)
    for e in events:
        acc.compose(e)
    return acc.get_epsilon(delta)


def _charge_under_cap(opener, worker, tries, results):
    """One writer process: ``tries`` charges of ``FIT``; puts how many were admitted (or the error)."""
    try:
        led, ok = opener(), 0
        for i in range(tries):
            try:
                led.charge(FIT, mechanism=f"w{worker}-{i}", epsilon=1.0, delta=1e-5)
                ok += 1
            except PrivacyBudgetExceeded:
                pass
        results.put(ok)
    except Exception as e:  # noqa: BLE001 - reported to the test, which fails on it
        results.put(f"error: {type(e).__name__}: {e}")


class LedgerTests:
    """What every ledger backend must do. A subclass defines the ``opener`` fixture (a function that opens a new
    handle on one ledger, the same one each call) and :meth:`damage` (edit a stored record behind the ledger)."""

    #: the storage class this suite runs on (``privlin.ledger.storage`` for a ledger file, ``.home`` for the home)
    backend: type
    #: whether handles in other processes share the ledger (false for memory held by one process)
    across_processes = True

    def damage(self, led) -> None:
        raise NotImplementedError

    def test_the_suite_runs_on_its_backend(self, opener):
        led = opener()
        assert type(getattr(led, "_backend", None) or led.home) is self.backend

    def test_charges_compose_as_dp_accounting(self, opener):
        opener().charge(FIT, mechanism="fit", epsilon=1, delta=1e-5)
        opener().charge(SWEEP, mechanism="sweep", epsilon=4, delta=1e-5)
        led = opener()
        assert [e.mechanism for e in led.entries] == ["fit", "sweep"] and len(led) == 2
        assert led.spent(1e-5)[0] == pytest.approx(_pld([FIT, SWEEP]), rel=1e-6)
        assert led.projected(FIT, 1e-5)[0] == pytest.approx(_pld([FIT, SWEEP, FIT]), rel=1e-6)

    def test_a_cap_refuses_and_records_nothing(self, opener):
        led = opener().request_cap((_pld([FIT]) * 1.2, 1e-5))
        led.charge(FIT, mechanism="fit", epsilon=1, delta=1e-5)
        with pytest.raises(PrivacyBudgetExceeded, match="Nothing was read"):
            opener().charge(FIT, mechanism="fit", epsilon=1, delta=1e-5)
        with pytest.raises(PrivacyBudgetExceeded):
            opener().check(FIT)
        assert len(opener()) == 1
        opener().charge(ev.GaussianDpEvent(30.0), mechanism="cheap", epsilon=0.2, delta=1e-5)  # what still fits
        assert len(opener()) == 2 and opener().spent()[0] <= _pld([FIT]) * 1.2

    def test_a_cap_is_lowered_freely_and_raised_only_with_a_note(self, opener):
        one = _pld([FIT])
        opener().set_cap(2 * one, 1e-5)
        with pytest.raises(PrivacyBudgetExceeded, match="raising a cap is an explicit act"):
            opener().request_cap((3 * one, 1e-5)).charge(FIT, mechanism="fit", epsilon=1, delta=1e-5)
        with pytest.raises(ValueError, match="needs a note"):
            opener().set_cap(3 * one, 1e-5)
        assert opener().cap == (2 * one, 1e-5) and len(opener()) == 0
        opener().set_cap(3 * one, 1e-5, note="approved by the data owner")
        opener().request_cap((1.5 * one, 1e-5)).charge(FIT, mechanism="fit", epsilon=1, delta=1e-5)
        assert opener().cap == (1.5 * one, 1e-5)

    def test_an_entry_id_is_recorded_once(self, opener):
        first = opener().charge(FIT, mechanism="fit", epsilon=1, delta=1e-5, entry_id="run-1")
        again = opener().charge(FIT, mechanism="fit", epsilon=1, delta=1e-5, entry_id="run-1")
        assert first.id == again.id == "run-1" and len(opener()) == 1

    def test_relations_that_do_not_compose_are_refused(self, opener):
        opener().charge(FIT, mechanism="a", epsilon=1, delta=1e-5, neighbouring="replace_one")
        assert opener().neighbouring == "replace_one"
        with pytest.raises(ValueError, match="do not compose"):
            opener().charge(FIT, mechanism="b", epsilon=1, delta=1e-5, neighbouring="replace_special")
        assert len(opener()) == 1

    def test_a_damaged_record_is_one_line_never_a_lower_total(self, opener):
        opener().charge(FIT, mechanism="fit", epsilon=1, delta=1e-5)
        self.damage(opener())
        with pytest.raises(LedgerDamaged) as e:
            opener().spent()
        assert str(e.value).count("\n") == 0

    def test_processes_under_a_cap_admit_exactly_what_fits(self, opener):
        if not self.across_processes:
            pytest.skip("a ledger held by one process")
        k = 5
        opener().set_cap(_pld([FIT] * k) * 1.001, 1e-5)
        ctx = multiprocessing.get_context("fork")
        results = ctx.Queue()
        procs = [ctx.Process(target=_charge_under_cap, args=(opener, w, 3, results)) for w in range(4)]
        with warnings.catch_warnings():  # the writers touch no JAX state: nothing to deadlock on
            warnings.filterwarnings("ignore", message=".*os.fork.*", category=RuntimeWarning)
            for p in procs:
                p.start()
        admitted = [results.get(timeout=300) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        assert not [a for a in admitted if isinstance(a, str)], admitted
        assert sum(admitted) == k and len(opener()) == k, admitted


def _damage_document(led):
    """Rewrite a ledger file's entry without its hash chain (what a hand edit does)."""
    data = led._backend.read()
    data["entries"][0]["event"]["noise_multiplier"] = 30.0
    led._backend.write(data)


class TestLocalFile(LedgerTests):
    backend = storage.LocalFile
    @pytest.fixture
    def opener(self, tmp_path):
        path = str(tmp_path / "privacy_ledger.json")
        return lambda: PrivacyLedger(path)

    damage = staticmethod(_damage_document)


class TestFsspecURL(LedgerTests):
    backend = storage.FsspecFile
    across_processes = False  # other fsspec URLs are serialised within one process only (storage.FsspecFile)

    @pytest.fixture
    def opener(self):
        url = f"memory://ledger-backends/{uuid.uuid4().hex}/privacy_ledger.json"
        return lambda: PrivacyLedger(url)

    damage = staticmethod(_damage_document)


class TestS3File(LedgerTests):
    backend = storage.S3Object
    @pytest.fixture
    def opener(self, s3):  # noqa: F811 - the fixture
        url = f"s3://{BUCKET}/{uuid.uuid4().hex}/privacy_ledger.json"
        return lambda: PrivacyLedger(url)

    damage = staticmethod(_damage_document)


class TestInMemory(LedgerTests):
    backend = storage.Memory
    across_processes = False

    @pytest.fixture
    def opener(self):
        led = PrivacyLedger.in_memory()
        return lambda: led

    damage = staticmethod(_damage_document)


class TestSqliteHome(LedgerTests):
    backend = home.SqliteHome
    @pytest.fixture
    def opener(self, tmp_path):
        home = str(tmp_path / "home")
        return lambda: PrivacyLedger.for_items(ITEMS, home=home)

    @staticmethod
    def damage(led):
        with sqlite3.connect(led.home.where) as db:
            db.execute("UPDATE records SET body = replace(body, '3.0', '30.0')")


class TestS3Home(LedgerTests):
    backend = home.ObjectHome
    @pytest.fixture
    def opener(self, s3):  # noqa: F811 - the fixture
        home = f"s3://{BUCKET}/{uuid.uuid4().hex}/home"
        return lambda: PrivacyLedger.for_items(ITEMS, home=home)

    @staticmethod
    def damage(led):
        h = led.home
        doc = json.loads(h.fs.cat_file(h._root + "/log.json"))
        doc["records"][0]["body"]["event"]["noise_multiplier"] = 30.0
        h.fs.pipe_file(h._root + "/log.json", json.dumps(doc).encode())


def test_every_backend_runs_the_suite():
    """A storage class added to ``storage`` or ``home`` without a suite here is a gap: each has one."""
    def backends(module):
        return {c for c in vars(module).values() if isinstance(c, type) and c.__module__ == module.__name__
                and callable(getattr(c, "records" if module is home else "read", None))}

    assert backends(storage) | backends(home) == {c.backend for c in LedgerTests.__subclasses__()}
