"""``python -m privlin.ledger``'s text reads in 120 columns whatever was charged: the relation first, where the
ledger is on a line of its own (a path is as long as it is), then one short line per entry (a sweep of 30 fits
included: its σ's as a count and a range, each of them in ``--json`` only), then the total; ``--json`` is one line
holding every σ."""
import json

from dp_accounting import dp_event as ev

from privlin import ledger as L
from privlin.ledger.__main__ import main as ledger_main


def test_ledger_text_fits_120_columns_one_line_per_entry(ledger_home, tmp_path, capsys):
    from faults.inject import write_store

    store = str(tmp_path / ("a-long-folder-name-" * 4) / "s.zarr")
    write_store(store)
    led = L.PrivacyLedger.for_split(store, "train")
    sigmas = [0.5 + 0.123456789 * i for i in range(30)]
    sweep = ev.ComposedDpEvent([ev.GaussianDpEvent(s) for s in sigmas])
    for sigma in (3.0, 4.0, 5.0, 6.0):
        led.charge(ev.GaussianDpEvent(sigma), mechanism="DPLinearClassifier/sgd", epsilon=1.0, delta=1e-5)
    led.charge(sweep, mechanism="privlin.sweep/sgd", epsilon=40.0, delta=1e-5)
    assert ledger_main([store, "--split", "train"]) == 0
    lines = capsys.readouterr().out.splitlines()
    where = [i for i, line in enumerate(lines) if store in line]
    assert where == [1] and "neighbours]" in lines[0], lines
    assert max(len(line) for i, line in enumerate(lines) if i != 1) <= 120, lines
    entries = [line for line in lines if line.split()[0].isdigit()]
    assert len(entries) == 5 and entries[-1].split()[2] == "privlin.sweep/sgd"
    assert entries[0].endswith("σ=3") and entries[-1].endswith(f"30 σ in 0.5–{max(sigmas):.3g}"), entries
    assert lines[-2].startswith("total") and lines[-1] == "cap: none"
    assert ledger_main([store, "--split", "train", "--json"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and all(repr(s) in out or json.dumps(s) in out for s in sigmas)
