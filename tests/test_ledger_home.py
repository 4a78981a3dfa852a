"""One budget for the people in the data: every store, copy and route of the same images charges their items in one
ledger home; totals are per item (worst item), exact, checked against dp-accounting and the GDP closed form."""
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import textwrap

import closed_forms
import numpy as np
import pytest
from dp_accounting import NeighboringRelation
from dp_accounting import dp_event as ev
from dp_accounting.pld import pld_privacy_accountant

import privlin
import stores
from privlin.ledger import LedgerDamaged, PrivacyBudgetExceeded, PrivacyLedger
from stores import items as item_ids

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N = 200
IMAGES = [item_ids.of_bytes(f"image file {i}".encode()) for i in range(N)]  # one folder of images


def _pld(events, delta):
    acc = pld_privacy_accountant.PLDAccountant(NeighboringRelation.REPLACE_SPECIAL)
    for e in events:
        acc.compose(e)
    return acc.get_epsilon(delta)


def _store(url, dim, rows=slice(None), seed=0):
    """A store of the images ``IMAGES[rows]`` as one backbone would featurize them (its own dim and features)."""
    items = np.array(IMAGES[rows])
    n = len(items)
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    X = (rng.standard_normal((n, dim)) + y[:, None]).astype(np.float32)
    w = stores.create_split(url, "train", n_rows=n, dim=dim, dtype="float32", shard_rows=64, chunk_rows=32,
                            root_attrs={"dataset": "imagefolder:imgs", "classes": ["a", "b", "c"]})
    for s in w.pending():
        a, b = w.shard_bounds(s)
        w.write_shard(s, X[a:b], y[a:b], np.array([f"img/{i}.png" for i in range(a, b)]), items=items[a:b])
    assert w.finalize()
    return str(url)


def _fit(url, **kw):
    return privlin.fit(url, epsilon=1.0, method="adam1", **{"random_state": 0, **kw})


def _events(led):
    return [e.event for e in led.entries]


def test_two_stores_of_one_folder_compose_on_one_budget(tmp_path):
    pixels, vip = _store(tmp_path / "pixels.zarr", 12), _store(tmp_path / "vip.zarr", 20, seed=1)
    _fit(pixels)
    _fit(vip)
    for url in (pixels, vip):
        led = PrivacyLedger.for_split(url, "train")
        assert len(led.entries) == 2  # both stores' fits, whichever store is asked
        eps, delta = led.spent()
        assert eps == pytest.approx(_pld(_events(led), delta), rel=1e-6)
        assert eps > 1.3  # more than one fit's ε=1
    with pytest.raises(PrivacyBudgetExceeded, match="past the cap"):
        _fit(pixels, budget=(eps * 1.1, 1e-5))


@pytest.mark.parametrize("how", ["copy", "restored tar", "re-extraction"])
def test_a_copy_a_restored_tar_and_a_reextraction_show_the_full_spend(tmp_path, how):
    url = _store(tmp_path / "s.zarr", 12)
    with tarfile.open(tmp_path / "backup.tar", "w") as tar:
        tar.add(url, arcname="s.zarr")  # a backup before any fit
    _fit(url)
    _fit(url, random_state=1)
    full = PrivacyLedger.for_split(url, "train").spent()
    if how == "copy":
        other = str(tmp_path / "copy.zarr")
        shutil.copytree(url, other)
    elif how == "restored tar":
        shutil.rmtree(url)
        with tarfile.open(tmp_path / "backup.tar") as tar:
            tar.extractall(tmp_path, filter="data")
        other = url
    else:
        shutil.rmtree(url)
        other = _store(tmp_path / "again.zarr", 12, seed=5)
    assert PrivacyLedger.for_split(other, "train").spent() == full
    with pytest.raises(PrivacyBudgetExceeded):
        _fit(other, budget=(full[0] + 0.1, 1e-5))


def test_the_arrays_route_with_item_ids_charges_the_same_budget(tmp_path):
    url = _store(tmp_path / "s.zarr", 12)
    X, y = stores.open(url)["train"].to_numpy()
    privlin.DPLinearClassifier(epsilon=1.0, method="adam1", classes=range(3), random_state=0,
                               ledger=PrivacyLedger.for_split(url, "train")).fit(X, y)
    privlin.DPLinearClassifier(epsilon=1.0, method="adam1", classes=range(3), random_state=0,
                               ledger=PrivacyLedger.for_items(IMAGES)).fit(X, y)
    _fit(url)
    led = PrivacyLedger.for_split(url, "train")
    assert len(led.entries) == 3
    assert led.spent()[0] == pytest.approx(_pld(_events(led), led.spent()[1]), rel=1e-6)


def test_disjoint_halves_compose_per_item():
    sigma, delta = 4.0, 1e-5
    fit = ev.GaussianDpEvent(sigma)
    first, second = PrivacyLedger.for_items(IMAGES[:N // 2]), PrivacyLedger.for_items(IMAGES[N // 2:])
    first.charge(fit, mechanism="fit on the first half", epsilon=1, delta=delta)
    second.charge(fit, mechanism="fit on the second half", epsilon=1, delta=delta)
    one = closed_forms.gdp_epsilon(1 / sigma, delta)
    assert one == pytest.approx(_pld([fit], delta), rel=1e-3)  # the closed form beside dp-accounting
    whole = PrivacyLedger.for_items(IMAGES)
    assert whole.spent(delta)[0] == pytest.approx(one, rel=1e-6)  # each item read once: one fit's ε
    assert len(whole.groups()) == 2 and len(whole.entries) == 2
    first.charge(fit, mechanism="again", epsilon=1, delta=delta)
    two = closed_forms.gdp_epsilon(math.sqrt(2) / sigma, delta)  # μ composes as √(μ₁² + μ₂²)
    assert whole.spent(delta)[0] == pytest.approx(two, rel=1e-6)
    assert second.spent(delta)[0] == pytest.approx(one, rel=1e-6)


def test_a_superset_is_checked_at_its_worst_item():
    fit, delta = ev.GaussianDpEvent(4.0), 1e-5
    tenth = PrivacyLedger.for_items(IMAGES[:N // 10])  # a quick 10% store
    for _ in range(3):
        tenth.charge(fit, mechanism="quick fit", epsilon=1, delta=delta)
    extra = [item_ids.of_bytes(b"an extra image")]
    superset = PrivacyLedger.for_items(IMAGES + extra, cap=(_pld([fit] * 3, delta) * 1.05, delta))
    assert superset.spent(delta)[0] == pytest.approx(_pld([fit] * 3, delta), rel=1e-6)
    with pytest.raises(PrivacyBudgetExceeded):  # the 10% items would pass the cap; the others would not
        superset.charge(fit, mechanism="fit on train plus extra", epsilon=1, delta=delta)
    assert len(superset.entries) == 3
    PrivacyLedger.for_items(IMAGES[N // 10:] + extra).charge(fit, mechanism="the rest", epsilon=1, delta=delta)


def test_an_image_in_two_rows_is_charged_as_the_pair_of_rows(tmp_path):
    """Byte-identical copies of one image are one item in two rows: a per-row Gaussian guarantee protects that
    image as a group of two rows (μ doubled, the GDP closed form), and the store route charges it so."""
    sigma, delta = 4.0, 1e-5
    fit = ev.GaussianDpEvent(sigma)
    copies = PrivacyLedger.for_items(IMAGES[:10] + [IMAGES[0]])
    copies.charge(fit, mechanism="fit with a duplicate", epsilon=1, delta=delta)
    entry = copies.entries[-1]
    assert entry.params["rows_per_item"] == 2
    assert entry.epsilon == pytest.approx(closed_forms.gdp_epsilon(2 / sigma, delta), rel=1e-6)
    assert copies.spent(delta)[0] == pytest.approx(closed_forms.gdp_epsilon(2 / sigma, delta), rel=1e-6)
    assert PrivacyLedger.for_items(IMAGES[:10]).spent(delta)[0] > closed_forms.gdp_epsilon(1 / sigma, delta) * 1.5
    # a subsampled mechanism's group guarantee is not computed: refused before anything is written
    sampled = ev.PoissonSampledDpEvent(0.1, ev.GaussianDpEvent(1.0))
    with pytest.raises(ValueError, match="held in 2 rows"):
        copies.charge(sampled, mechanism="DP-SGD", epsilon=1, delta=delta)
    assert len(copies.entries) == 1
    # the store route: one image featurized twice under two names
    items = np.array(IMAGES[:N - 1] + [IMAGES[0]])
    url = str(tmp_path / "dup.zarr")
    w = stores.create_split(url, "train", n_rows=N, dim=4, dtype="float32", shard_rows=64, chunk_rows=32,
                            root_attrs={"dataset": "imagefolder:imgs", "classes": ["a", "b", "c"]})
    X = np.random.default_rng(0).standard_normal((N, 4)).astype(np.float32)
    for s in w.pending():
        a, b = w.shard_bounds(s)
        w.write_shard(s, X[a:b], np.arange(a, b) % 3, np.array([f"img/{i}.png" for i in range(a, b)]),
                      items=items[a:b])
    assert w.finalize()
    model = _fit(url)
    charged = PrivacyLedger.for_split(url, "train").entries[-1]
    assert charged.params.get("rows_per_item") == 2 and charged.epsilon > model.privacy_.epsilon


def test_a_store_ledger_file_is_imported_once(tmp_path):
    from privlin.ledger.core import StoreAnchor, ledger_path

    url = _store(tmp_path / "s.zarr", 12)
    old = PrivacyLedger(ledger_path(url, "train"), anchor=StoreAnchor(url, "train"))  # as stores kept it before
    old.charge(ev.GaussianDpEvent(3.0), mechanism="an old fit", epsilon=1.5, delta=1e-5)
    old.set_cap(4.0, 1e-5)
    copy = str(tmp_path / "copy.zarr")
    shutil.copytree(url, copy)
    led = PrivacyLedger.for_split(url, "train")
    assert [e.mechanism for e in led.entries] == ["an old fit"] and led.cap == (4.0, 1e-5)
    assert [e.mechanism for e in PrivacyLedger.for_split(copy, "train").entries] == ["an old fit"]  # not twice
    assert len(led.home.records()) == 2


def test_a_damaged_home_is_one_line_and_never_a_lower_total(ledger_home):
    led = PrivacyLedger.for_items(IMAGES)
    led.charge(ev.GaussianDpEvent(3.0), mechanism="fit", epsilon=1.5, delta=1e-5)
    path = ledger_home / "ledger.sqlite"
    with sqlite3.connect(path) as db:  # an edited σ: the chain breaks
        body = db.execute("SELECT body FROM records").fetchone()[0]
        edited = body.replace('"noise_multiplier": 3.0', '"noise_multiplier": 30.0')
        db.execute("UPDATE records SET body = ?", (edited,))
    with pytest.raises(LedgerDamaged) as e:
        PrivacyLedger.for_items(IMAGES).spent()
    assert str(e.value).count("\n") == 0 and str(path) in str(e.value) and "hash chain" in str(e.value)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE records SET body = ?", (body,))
        db.execute("UPDATE sets SET items = ?", (b"\0" * 16 * N,))  # a damaged item set
    from privlin.ledger import home

    home._OPEN.clear()  # as another process sees it: no set cached
    with pytest.raises(LedgerDamaged, match="item set"):
        PrivacyLedger.for_items(IMAGES[:5]).spent()
    with open(path, "r+b") as f:
        f.write(b"garbage" * 20)
    with pytest.raises(LedgerDamaged) as e:
        PrivacyLedger.for_items(IMAGES).charge(ev.GaussianDpEvent(3.0), mechanism="fit", epsilon=1.5, delta=1e-5)
    assert str(e.value).count("\n") == 0 and str(path) in str(e.value)


def test_kill_inside_a_charge_leaves_a_consistent_home(ledger_home):
    """A process charging in a loop is killed (SIGKILL) at random moments; the home always opens, its chain holds,
    and every entry recorded is whole."""
    script = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {ROOT!r})
        from dp_accounting import dp_event as ev
        from privlin.ledger import PrivacyLedger
        led = PrivacyLedger.for_items([f"{{i:032x}}" for i in range(5000)])
        print("ready", flush=True)
        i = 0
        while True:
            led.charge(ev.GaussianDpEvent(100.0), mechanism=f"c{{i}}", epsilon=0.01, delta=1e-9)
            i += 1
    """)
    rng = np.random.default_rng(0)
    for _ in range(4):
        p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "ready"
        import time

        time.sleep(rng.uniform(0.2, 1.0))
        p.kill()
        p.wait()
        led = PrivacyLedger.for_items([f"{i:032x}" for i in range(5000)])
        entries = led.entries
        assert len({e.id for e in entries}) == len(entries)
    assert len(entries) > 0


def test_a_budget_above_a_stored_cap_is_refused_and_raises_no_cap():
    fit, delta = ev.GaussianDpEvent(4.0), 1e-5
    PrivacyLedger.for_items(IMAGES[:10]).set_cap(1.0, delta)
    with pytest.raises(PrivacyBudgetExceeded, match="above the cap"):
        PrivacyLedger.for_items(IMAGES, cap=(50.0, delta)).charge(fit, mechanism="fit", epsilon=1, delta=delta)
    assert PrivacyLedger.for_items(IMAGES[:10]).cap == (1.0, delta)
    assert PrivacyLedger.for_items(IMAGES[10:]).cap is None  # nothing recorded by the refused charge


def test_pixels_and_vip_toy_stores_of_the_digits_share_one_budget(tmp_path):
    """The real path: featurize writes each row's item (digits: their published index), so the quickstart's two
    stores of the same images are one budget."""
    import featurize

    urls = []
    for backbone in ("pixels", "vip_toy"):
        urls.append(str(tmp_path / f"{backbone}.zarr"))
        featurize.extract(backbone, "digits", splits=["train"], out=urls[-1], device="cpu", num_workers=0,
                          progress=False)
    for url in urls:
        _fit(url)
    leds = [PrivacyLedger.for_split(url, "train") for url in urls]
    assert leds[0].scope.key == leds[1].scope.key and len(leds[0].scope) == 1437
    assert len(leds[0].entries) == len(leds[1].entries) == 2
    assert leds[0].spent() == leds[1].spent()
    assert leds[0].spent()[0] == pytest.approx(_pld(_events(leds[0]), leds[0].spent()[1]), rel=1e-6)
