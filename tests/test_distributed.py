"""privlin under jax.distributed: two CPU processes on localhost, each reading its own shards of one store, train
the model one process trains on all rows, with every noise draw made once (process 0's key, broadcast)."""
import json
import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import privlin

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORKER = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {root!r})
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address="127.0.0.1:{port}", num_processes=2, process_id=int(sys.argv[1]))
    import privlin
    from privlin.data import as_source

    out = {{"n_local": as_source({store!r}, "train").n_local}}
    for name, kw in {cases!r}.items():
        m = privlin.fit({store!r}, classes=range(4), block_rows=128, **kw)
        out[name] = m.coef_transformed_.tolist()
        out[name + "/mean"] = None if m.mean_ is None else m.mean_.tolist()
    print("RESULT" + json.dumps(out), flush=True)
""")

#: The settings (ε, steps, block_rows, classes) and training rows of test_runner.py's store fits: the one-process
#: fits here compile the programs those tests run (shared within a test session).
CASES = {
    "sgd": dict(epsilon=2.0, method="sgd", steps=6, random_state=7),
    "adam1/streamed": dict(epsilon=2.0, method="adam1", random_state=7, memory_limit=0),
    "sgd/streamed": dict(epsilon=2.0, method="sgd", steps=6, random_state=7, memory_limit=0),
    "unseeded": dict(epsilon=2.0, method="adam1"),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def store(make_store, blobs):
    X, y = blobs(601, seed=0)  # test_runner.py's training rows
    valid = np.ones(601, bool)  # rows skipped at extraction, all in process 0's shards: null rows, counted in N
    valid[[3, 70, 71, 200, 319]] = False
    return make_store({"train": (X, y)}, shard_rows=64, valid={"train": valid}).url  # 10 shards: 5 per process


def test_two_processes_train_the_one_process_model(store):
    script = WORKER.format(root=ROOT, port=_free_port(), store=store, cases=CASES)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONWARNINGS": "ignore"}
    procs = [subprocess.Popen([sys.executable, "-c", script, str(i)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    try:  # the one-process models, while the two processes start and run
        alone = {name: privlin.fit(store, classes=range(4), block_rows=128, **kw)
                 for name, kw in CASES.items() if "random_state" in kw}
    finally:
        outs = [p.communicate(timeout=600) for p in procs]
    for p, (o, e) in zip(procs, outs):
        assert p.returncode == 0, e[-3000:]
    res = [json.loads(next(ln for ln in o.splitlines() if ln.startswith("RESULT"))[6:]) for o, _ in outs]
    assert [r["n_local"] for r in res] == [320, 281]  # shards 0-4 and 5-9 of 64 rows, skipped rows included
    for name, kw in CASES.items():
        np.testing.assert_array_equal(res[0][name], res[1][name])  # one model, replicated on both processes
        if "random_state" not in kw:
            continue
        coef = alone[name].coef_transformed_
        np.testing.assert_allclose(res[0][name], coef, rtol=1e-5, atol=1e-6 * np.abs(coef).max())
        np.testing.assert_allclose(res[0][name + "/mean"], alone[name].mean_, rtol=1e-5, atol=1e-7)
