"""Benchmark (issue 37.1, 37.5): how long a user waits for a first fit, a refit, a grid search; what a sweep costs.

    .venv/bin/python benchmarks/bench_first_fit.py                 # both parts, writes the two results sections
    .venv/bin/python benchmarks/bench_first_fit.py --part first     # breast_cancer and digits rows only
    .venv/bin/python benchmarks/bench_first_fit.py --part first --baseline /tmp/main   # beside another checkout
    .venv/bin/python benchmarks/bench_first_fit.py --part options   # XLA compile options: compile and run times

Part ``first`` (benchmarks/results/privlin.md, section ``bench_first_fit``): breast_cancer (569 × 30) and README's
digits example (the `pixels` store, 1437 × 3072: the estimator on its arrays, and ``privlin.fit`` on the store,
``--data``), each row in a fresh subprocess whose persistent compilation cache (:mod:`privlin.compilation`) is a
new empty directory (cold) or the one the cold process filled (warm); every time is against the same process's
scikit-learn ``LogisticRegression().fit`` (the unit). Rows: ``import privlin`` + JAX; the first ``DPLinearClassifier`` fit; a
refit at another ε that makes the same releases (2 → 4) and one that makes another (2 → 1: ε=1 adds a
re-centering, run by the same program on rows this few, :func:`privlin.fit_groups.with_rounds`);
``PrivateGridSearchCV`` over 2 ε × 2 methods × 3 folds (+ the refit); and where a warm first fit's time goes
(JAX's monitoring: tracing, lowering, loading the executable).

Part ``options`` (benchmarks/results/privlin.md, section ``bench_first_fit_options``): the default fit's program
compiled with XLA's defaults and with :data:`privlin.compilation.QUICK_OPTIONS`, compile and run time per size
(``--sizes``), in fresh processes without a persistent cache: what ``privlin.defaults.QUICK_COMPILE_ELEMENTS`` is
chosen from.

Part ``sweep`` (benchmarks/results/sweep.md, section ``bench_first_fit_sweep``): a 10-ε ``adam1`` sweep vs one
``adam1`` fit, both with the default preprocessing, on synthetic float16 stores (one row per ``--n``, × ``--d``,
k=10; 120 000 × 512 is issue 37's size), compiled programs warmed first; and the split of the first sweep's cost:
how many compiled programs its plans need (:func:`privlin.fit_groups.shared_form`), how many vmapped calls run, what a
setting adds to a call, and what is not the call (reading the store, planning, accounting).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

EPS10 = [0.25, 0.5, 1, 2, 3, 4, 6, 8, 12, 16]

# ----------------------------------------------------------------------------- part "first": in a fresh process

CHILD = r"""
import json, os, sys, time, warnings
warnings.simplefilter("ignore")
data, first_eps, other_eps, grid = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "grid"
streamed = sys.argv[5] == "store"  # README's section 2: privlin.fit(store, epsilon=...) instead of the estimator
t = time.perf_counter()
import numpy as np
from sklearn.linear_model import LogisticRegression
if data == "breast_cancer":
    from sklearn.datasets import load_breast_cancer
    X, y = load_breast_cancer(return_X_y=True)
    classes = [0, 1]
else:  # README's estimator example: a store's train split as arrays, fitted with the split's ledger
    import stores
    X, y = stores.open(data)["train"].to_numpy()
    classes = list(range(10))
LogisticRegression().fit(X, y)  # sklearn's own first-call costs out of the unit (its defaults, as users run it)
units = []
for _ in range(7 if data == "breast_cancer" else 2):  # digits: a fit takes seconds
    t0 = time.perf_counter(); LogisticRegression().fit(X, y); units.append(time.perf_counter() - t0)
unit = min(units)  # the fastest: the least disturbed by other jobs on a shared box
t0, c0 = time.perf_counter(), time.process_time()
import jax
import privlin
from privlin import DPLinearClassifier, compilation
from privlin.ledger import PrivacyLedger
from privlin.model_selection import PrivateGridSearchCV
out = {"unit": unit, "import": [time.perf_counter() - t0, time.process_time() - c0]}
ledger = None if data == "breast_cancer" else PrivacyLedger.for_split(data, "train")
store = {"load": 0.0, "key": 0.0}  # the fit program: loading it from programs/, hashing its jaxpr to name it
def timed(name, f):
    def g(*a, **k):
        t = time.perf_counter(); r = f(*a, **k); store[name] += time.perf_counter() - t; return r
    return g
compilation._load = timed("load", compilation._load)
compilation.program_key = timed("key", compilation.program_key)
durs, fit_program = {}, {}
def listen(ev, s, **kw):
    durs[ev] = durs.get(ev, 0) + s
    if "train_many" in str(kw.get("fun_name", "")):  # the fit program itself
        fit_program[ev] = fit_program.get(ev, 0) + s
jax.monitoring.register_event_duration_secs_listener(listen)
def fit(eps):  # wall and CPU seconds of this process (its threads)
    t0, c0 = time.perf_counter(), time.process_time()
    if streamed:
        privlin.fit(data, epsilon=eps, progress=False)
    else:
        DPLinearClassifier(epsilon=eps, classes=classes, ledger=ledger).fit(X, y)
    return [time.perf_counter() - t0, time.process_time() - c0]
out["first"] = fit(first_eps)
out["split"], out["fit_program"] = dict(durs), dict(fit_program)
out["store"], out["stats"] = dict(store), dict(compilation.STATS)
out["refit_other"] = fit(other_eps)
out["refit_same"] = fit(first_eps)  # the first fit's program, run again
if grid:
    t0, c0 = time.perf_counter(), time.process_time()
    PrivateGridSearchCV(DPLinearClassifier(classes=classes), {"epsilon": [1.0, 2.0], "method": ["adam1", "sgd"]},
                        cv=3).fit(X, y)
    out["grid"] = [time.perf_counter() - t0, time.process_time() - c0]
out["load"] = os.getloadavg()[0]
print(json.dumps(out))
"""


def child_env(cache_home: str, root: str = ROOT) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE", "PRIVLIN_COMPILATION", "XLA_FLAGS"))}
    env.update(XDG_CACHE_HOME=cache_home, PYTHONPATH=root, JAX_PLATFORMS="cpu",
               PRIVLIN_LEDGER_HOME=os.path.join(cache_home, "ledger"))
    return env


def run_child(cache_home: str, data: str, first: float, other: float, grid: bool, store: bool = False,
              root: str = ROOT) -> dict:
    """One child process (:data:`CHILD`) importing privlin from ``root`` (this checkout, or ``--baseline``'s)."""
    out = subprocess.run([sys.executable, "-c", CHILD, data, str(first), str(other), "grid" if grid else "-",
                          "store" if store else "arrays"],
                         env=child_env(cache_home, root), capture_output=True, text=True, cwd=root, check=False)
    if out.returncode:
        raise SystemExit(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


DESCRIBED = {"breast_cancer": "breast_cancer: 569 × 30, k = 2",
             "digits": "digits: README's estimator example, the `pixels` store's train split (1437 × 3072, k = 10) "
                       "fitted with its ledger",
             "digits store": "digits store: README's section 2, `privlin.fit(store, epsilon=…)` on the same store "
                             "(the rows read from the store in the fit, charged to its ledger)"}
#: (ε of the first fit, ε of the refit that makes other releases): ε ≤ 1 adds re-centering rounds
FIRST_CASES = [(1.0, 2.0), (2.0, 1.0)]


def part_first(repeat: int, datasets, baseline: str | None = None, baseline_label: str = "baseline") -> str:
    """Per dataset and first ε (:data:`FIRST_CASES`): ``repeat`` cold/warm process pairs, each pair on a new cache;
    with ``baseline`` (another checkout), each pair of this checkout follows one of the baseline's (one sitting,
    interleaved) and the rows show both."""
    rows, notes, loads = [], [], []
    roots = ([(baseline_label, baseline)] if baseline else []) + [("this", ROOT)]
    for name, data in datasets:
        for first, other in FIRST_CASES:
            runs = {label: [] for label, _ in roots}
            for _ in range(repeat):
                for label, root in roots:
                    with tempfile.TemporaryDirectory() as home:
                        grid, store = name == "breast_cancer" and first == 2.0, name.endswith(" store")
                        runs[label].append(tuple(run_child(home, data, first, other, grid, store, root) for _ in "cw"))
            loads += [r[i]["load"] for v in runs.values() for r in v for i in (0, 1)]
            rows += _first_rows(name, first, other, runs["this"], runs.get(baseline_label), baseline_label)
            if name == "breast_cancer" and first == 2.0:
                notes.append(_first_notes(runs["this"]))
    header = (f"### First fit, refit, grid search (fresh processes; `python benchmarks/bench_first_fit.py --part "
              f"first`; {_machine()}; load {min(loads):.1f}–{max(loads):.1f} at the children's ends; {_when()})\n\n"
              f"{'One cold/warm pair' if repeat == 1 else f'Median of {repeat} cold/warm pairs'} per dataset and "
              "first ε, each pair on a new cache. Cold: an empty persistent compilation cache; warm: a second process "
              "on the cache the first filled. Wall time, the process's CPU time (all its threads) in brackets, and × "
              "the same process's scikit-learn `LogisticRegression().fit` (the fastest of 7, of 2 on digits, its "
              "wall time) in parentheses: on a shared 2-core box the wall time is up to (load / 2)× the CPU time. "
              + "; ".join(DESCRIBED[name] for name, _ in datasets) + ".\n\n"
              + (f"Each cell: `{baseline_label}`'s time (a checkout of it, each of its cold/warm pairs run right "
                 "before this branch's, one sitting) → this branch's.\n\n" if baseline else "")
              + "| data | what | cold cache | warm cache | goal (issue 47) |\n|---|---|---:|---:|---|")
    return header + "\n" + "\n".join(rows) + "\n" + "\n".join(notes)


def _first_rows(name, first, other, runs, base=None, base_label="baseline") -> list:
    rows = []

    def cell(runs, field, i):
        r = sorted(runs, key=lambda pair: pair[i][field][0])[len(runs) // 2][i]  # the median pair's
        wall, cpu = r[field]
        x = wall / r["unit"]
        return f"{wall:.2f} s [{cpu:.2f}] ({f'{x:.0f}×' if x >= 100 else f'{x:.3g}×'})"

    def row(what, field, goal):
        cells = [cell(runs, field, i) for i in (0, 1)]
        if base:
            cells = [f"{base_label}: {cell(base, field, i)} → **{c}**" for i, c in enumerate(cells)]
        rows.append(f"| {name} | {what} | {cells[0]} | {cells[1]} | {goal} |")

    if first == 1.0 and not name.endswith(" store"):
        row("`import privlin` + JAX", "import", "–")
    call = f"privlin.fit(store, epsilon={first:g})" if name.endswith(" store") else \
        f"DPLinearClassifier(epsilon={first:g}).fit"
    row(f"first `{call}` in the process", "first", "≤ 3 s cold, ≤ 1 s warm")
    if name == "breast_cancer":
        change = (f"{'drops' if first < other else 'adds'} the re-centering: one program where "
                  "`fit_groups.shares_rounds`")
    else:  # digits: both make the rounds; ε = 2 adds the whitening, another program
        change = f"{'adds' if first < other else 'drops'} the whitening: another program"
    row(f"refit at ε={other:g} ({change})", "refit_other", "≤ 0.3 s warm")
    row(f"refit at ε={first:g} again (the first fit's program)", "refit_same", "≤ 0.3 s warm")
    if "grid" in runs[0][0]:
        row("`PrivateGridSearchCV`, 2 ε × 2 methods × 3 folds + refit", "grid", "–")
    return rows


def _first_notes(runs) -> str:
    cold, warm = runs[len(runs) // 2]
    part = {k.rsplit("/", 1)[-1]: v for k, v in warm["split"].items()}
    prog = {k.rsplit("/", 1)[-1]: v for k, v in warm["fit_program"].items()}
    cold_prog = {k.rsplit("/", 1)[-1]: v for k, v in cold["fit_program"].items()}
    traced = part.get("jaxpr_trace_duration", 0.0) + part.get("jaxpr_to_mlir_module_duration", 0.0)
    loaded = part.get("cache_retrieval_time_sec", 0.0)
    compiled = part.get("backend_compile_duration", 0.0) - loaded
    fit_traced = prog.get("jaxpr_trace_duration", 0.0)
    found = (f"traced {fit_traced:.2f} s and named (jaxpr hashed) {warm['store']['key']:.2f} s" if fit_traced
             else "found through its form's alias (not traced)")
    return (f"\nWhere breast_cancer's warm first fit at ε = 2 ({warm['first'][0]:.2f} s) goes (JAX monitoring and "
            f"timers around `privlin.compilation`): the fit program (`in_memory.train_many`) {found}, loaded whole "
            f"from `programs/` in {warm['store']['load']:.2f} s (deserialized: not lowered, not compiled; this "
            f"process: {warm['stats']}); the other programs traced and lowered to find their JAX cache keys "
            f"{max(0.0, traced - fit_traced):.2f} s, their executables loaded from JAX's cache {loaded:.2f} s, "
            f"compiled {max(0.0, compiled):.2f} s; the rest is planning, accounting and the run itself. Cold (this "
            f"process: {cold['stats']}): XLA compiling the fit program takes "
            f"{cold_prog.get('backend_compile_duration', 0.0):.2f} s of the {cold['first'][0]:.2f} s, with XLA's "
            "quick options (`privlin.compilation.QUICK_OPTIONS`, used up to `privlin.defaults.QUICK_COMPILE_ELEMENTS`;"
            " their compile and run times are in the next section).")


# ----------------------------------------------------------------------------- part "options": XLA compile options

OPTIONS_CHILD = r"""
import json, sys, time, warnings
warnings.simplefilter("ignore")
import jax, numpy as np
from privlin import DPLinearClassifier, compilation, sensitivity
n, d, k, quick = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "quick"
if n == 569:
    from sklearn.datasets import load_breast_cancer
    X, y = load_breast_cancer(return_X_y=True)
else:
    rng = np.random.default_rng(0)
    y = rng.integers(0, k, n)
    X = (rng.normal(size=(k, d))[y] + 2 * rng.normal(size=(n, d))).astype(np.float32)
got = {}
def grab(fn, static_args, *args, **kw):  # the default fit's program and arguments; the fit stops here
    got.update(fn=fn, static_args=static_args, args=args, kw=kw)
    raise KeyboardInterrupt
compilation.call = grab
try:
    DPLinearClassifier(epsilon=2, classes=list(range(k)), random_state=1).fit(X, y)
except KeyboardInterrupt:
    pass
options = compilation.QUICK_OPTIONS if quick else {}
with sensitivity.x64():
    lowered = got["fn"].lower(*got["static_args"], *got["args"], **got["kw"])
    t = time.perf_counter(); program = lowered.compile(compiler_options=options or None)
    compile_s = time.perf_counter() - t
    runs = []
    while len(runs) < 3 and sum(runs) < 10:  # the fastest of 3 calls, or of those that fit in 10 s
        t = time.perf_counter(); jax.block_until_ready(program(*got["args"])); runs.append(time.perf_counter() - t)
chain = [r.name for r, _ in got["static_args"][0].chain]
print(json.dumps({"compile": compile_s, "run": min(runs), "method": got["static_args"][0].method, "chain": chain}))
"""


def part_options(sizes) -> str:
    """Compile and run time of the default fit's program with XLA's defaults and with the quick options, per size
    (fresh processes, no persistent cache: every compile is a compile)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COMPILATION_CACHE", "XLA_FLAGS"))}
    env.update(PYTHONPATH=ROOT, JAX_PLATFORMS="cpu", PRIVLIN_COMPILATION_CACHE="0")
    from privlin import compilation, defaults

    quick = ", ".join(f"`{k}={v}`" for k, v in compilation.QUICK_OPTIONS.items())
    lines = []
    for n, d, k in sizes:
        got = {}
        for mode in ("default", "quick"):
            out = subprocess.run([sys.executable, "-c", OPTIONS_CHILD, str(n), str(d), str(k), mode], env=env,
                                 capture_output=True, text=True, cwd=ROOT, check=False)
            if out.returncode:
                raise SystemExit(out.stderr[-3000:])
            got[mode] = json.loads(out.stdout.strip().splitlines()[-1])
        a, b = got["default"], got["quick"]
        lines.append(f"| {'breast_cancer ' if n == 569 else ''}{n} × {d}, k={k} ({a['method']}, "
                     f"{' → '.join(a['chain'])}) | {a['compile']:.2f} s | {b['compile']:.2f} s "
                     f"({a['compile'] / b['compile']:.1f}× less) | {a['run']:.3f} s | {b['run']:.3f} s "
                     f"({b['run'] / a['run']:.1f}×) |")
    header = (f"### XLA's quick compile options for small fits (`python benchmarks/bench_first_fit.py --part "
              f"options`; {_machine()}; {_when()})\n\n"
              "The default `DPLinearClassifier(epsilon=2)` fit program, compiled in a fresh process without a "
              "persistent cache, with XLA's default options and with `privlin.compilation.QUICK_OPTIONS` "
              f"({quick}); run: the fastest of 3 calls (of 1 or 2 where a call takes seconds). privlin uses the "
              "quick options where the program's array arguments hold at most `QUICK_COMPILE_ELEMENTS` = "
              f"{defaults.QUICK_COMPILE_ELEMENTS} elements (padded N × d and its labels): "
              "there a compile saved once outweighs the longer run of every fit; where the run takes seconds it "
              "does not (a compile is paid once per machine, the run at every fit).\n\n"
              "| fit program | compile, default | compile, quick | run, default | run, quick |\n"
              "|---|---:|---:|---:|---:|")
    return header + "\n" + "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- part "sweep": in this process

def part_sweep(sizes, d: int, repeat: int, ks, blobs: str) -> str:
    """One row per store size in ``sizes`` (k = 10) and per class count in ``ks`` (rows in memory, ``blobs`` = N×d);
    the cost split of each."""
    rows, splits = [], []
    for n in sizes:
        row, text = _sweep_row(n, d, repeat, 10, store=True)
        rows.append(row)
        splits.append(text)
    bn, bd = (int(v) for v in blobs.split("x"))
    for k in ks:
        row, text = _sweep_row(bn, bd, repeat, k, store=False)
        rows.append(row)
        splits.append(text)
    header = (f"### The curve at the price of one fit? (issue 37.5, 47; `python benchmarks/bench_first_fit.py --part "
              f"sweep`; {_machine()}; {_when()})\n\n"
              "A 10-ε `adam1` sweep (ε 0.25 … 16) against one `adam1` fit at ε = 1, default preprocessing, in one "
              "process, compiled programs warmed first (the persistent cache off: `PRIVLIN_COMPILATION_CACHE=0`); "
              f"median of {repeat}, one fit and one sweep alternated; wall time, CPU time of the process in brackets, "
              "the ratio of both, and the load at the row's end.\n\n"
              "| rows | one fit | sweep | ratio wall [CPU] | load | goal |\n|---|---:|---:|---:|---:|---|")
    return header + "\n" + "\n".join(rows) + "\n\n" + "\n".join(splits)


def _sweep_row(n: int, d: int, repeat: int, k: int, store: bool) -> tuple[str, str]:
    import statistics
    import warnings

    import jax
    import numpy as np

    import privlin
    from bench_sweep import make_store
    from privlin import compilation, fit_groups
    from privlin.plan import make_plan
    from privlin.sweep import sweep

    warnings.simplefilter("ignore")
    os.environ[compilation.ENV] = "0"
    classes = np.arange(k)
    calls = []
    real = compilation.call

    def counted(fn, static_args, X, idx, mask, n, keys, *a, **kw):  # the fit program's vmapped calls, settings
        t = time.perf_counter()
        got = jax.block_until_ready(real(fn, static_args, X, idx, mask, n, keys, *a, **kw))
        calls.append((keys.shape[0], time.perf_counter() - t))
        return got

    def clocked(f):
        t, c = time.perf_counter(), time.process_time()
        f()
        return time.perf_counter() - t, time.process_time() - c

    with tempfile.TemporaryDirectory() as tmp:
        if store:
            data = make_store(os.path.join(tmp, "s.zarr"), n, d, k)
            what = f"store n={n}, d={d}, k={k}, float16"
        else:
            rng = np.random.default_rng(0)
            y = rng.integers(0, k, n)
            data = ((rng.normal(size=(k, d))[y] + 2 * rng.normal(size=(n, d))).astype(np.float32), y)
            what = f"in memory, random blobs n={n}, d={d}, k={k}"
        one = lambda: privlin.fit(data, epsilon=1.0, method="adam1", classes=classes, random_state=0,  # noqa: E731
                                  progress=False)
        many = lambda: sweep(data, epsilon=EPS10, method="adam1", classes=classes, eval_data=None,  # noqa: E731
                             eval_split=None, random_state=0, progress=False)
        one(), many()  # compiles
        got = {"one": [], "many": []}
        for _ in range(repeat):
            got["one"].append(clocked(one))
            got["many"].append(clocked(many))
        w1, c1 = (statistics.median(v[i] for v in got["one"]) for i in (0, 1))
        wm, cm = (statistics.median(v[i] for v in got["many"]) for i in (0, 1))
        compilation.call = counted
        try:
            single_total = clocked(one)[0]
            single, calls[:] = calls[0][1], []
            whole = clocked(many)[0]
        finally:
            compilation.call = real
    t = time.perf_counter()
    plans = [make_plan({"epsilon": e, "method": "adam1"}, n=n, dim=d, n_classes=k) for e in EPS10]
    planning = time.perf_counter() - t  # the calibrations are cached by then: what a sweep's planning costs again
    chains = sorted({" → ".join(repr(r) for r, _ in p.static().chain) for p in plans})
    programs = len({fit_groups.shared_form(p.static()) for p in plans})
    row = (f"| {what} | {w1:.2f} s [{c1:.2f}] | {wm:.2f} s [{cm:.2f}] | **{wm / w1:.2f}×** [{cm / c1:.2f}×] | "
           f"{os.getloadavg()[0]:.1f} | ≤ 2× |")
    in_calls = sum(c[1] for c in calls)
    split = (f"- {what}: one more sweep, {whole:.2f} s, each vmapped call waited for: its 10 plans (release chains: "
             f"{'; '.join(chains)}) run as {programs} compiled program(s), {len(calls)} vmapped call(s) of "
             f"{[c[0] for c in calls]} settings taking {[round(c[1], 2) for c in calls]} s, against {single:.2f} s "
             f"for the single fit's call of 1 setting: each further setting adds {(in_calls - single) / 9:.3f} s; the "
             f"rest, {whole - in_calls:.2f} s, is reading the rows, planning, accounting and the records (10 plans "
             f"made again: {planning:.3f} s); the single fit's rest: {single_total - single:.2f} s of "
             f"{single_total:.2f} s.")
    return row, split


def _machine() -> str:
    return f"{os.cpu_count()}-core CPU ({platform.machine()}), shared with other jobs (load {os.getloadavg()[0]:.1f})"


def _when() -> str:
    return time.strftime("%Y-%m-%d", time.gmtime())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--part", choices=["first", "sweep", "options", "both"], default="both")
    p.add_argument("--sizes", default="569x30x2,4096x64x10,60000x512x10",
                   help="N x d x k of the fits whose compile options are measured (options)")
    p.add_argument("--repeat", type=int, default=1, help="cold/warm process pairs (first); timed sweeps (sweep)")
    p.add_argument("--n", default="60000,120000", help="store rows, comma-separated: one row each (sweep)")
    p.add_argument("--d", type=int, default=512, help="store dimension (sweep)")
    p.add_argument("--k", default="2,10,50,100", help="class counts of the in-memory sweep rows (sweep)")
    p.add_argument("--blobs", default="20000x768", help="N x d of the in-memory sweep rows (sweep)")
    p.add_argument("--digits", default=None, help="README's digits `pixels` store (first; default: built in a "
                   "temporary folder with experiments.quickstart.build_store)")
    p.add_argument("--data", default="breast_cancer,digits,digits store",
                   help="datasets of the first fits (first; 'digits store': privlin.fit on the store)")
    p.add_argument("--baseline", default=None, help="another checkout (e.g. `git archive main`), timed beside this "
                   "one in the same sitting (first)")
    p.add_argument("--baseline-label", default="main", help="its name in the rows (first)")
    p.add_argument("--results", default=os.path.join(HERE, "results"))
    args = p.parse_args(argv)
    from _results import write_section

    if args.part in ("first", "both"):
        datasets = []
        with tempfile.TemporaryDirectory() as tmp:
            for name in args.data.split(","):
                if name in ("digits", "digits store"):
                    if not args.digits:
                        from experiments.quickstart import build_store

                        args.digits = build_store("pixels", tmp, progress=False)
                    datasets.append((name, args.digits))
                else:
                    datasets.append((name, name))
            text = part_first(args.repeat, datasets, args.baseline, args.baseline_label)
        print(text)
        write_section(os.path.join(args.results, "privlin.md"), "bench_first_fit", text)
    if args.part == "options":
        text = part_options([tuple(int(v) for v in size.split("x")) for size in args.sizes.split(",")])
        print(text)
        write_section(os.path.join(args.results, "privlin.md"), "bench_first_fit_options", text)
    if args.part in ("sweep", "both"):
        text = part_sweep([int(v) for v in args.n.split(",") if v], args.d, args.repeat,
                          [int(v) for v in args.k.split(",") if v], args.blobs)
        print(text)
        write_section(os.path.join(args.results, "sweep.md"), "bench_first_fit_sweep", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
