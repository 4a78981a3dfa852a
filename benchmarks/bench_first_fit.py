"""Benchmark (issue 37.1, 37.5): how long a user waits for a first fit, a refit, a grid search; what a sweep costs.

    .venv/bin/python benchmarks/bench_first_fit.py                 # both parts, writes the two results sections
    .venv/bin/python benchmarks/bench_first_fit.py --part first     # breast_cancer rows only
    .venv/bin/python benchmarks/bench_first_fit.py --part options   # XLA compile options: compile and run times

Part ``first`` (benchmarks/results/privlin.md, section ``bench_first_fit``): breast_cancer (569 × 30), each row in
a fresh subprocess whose persistent compilation cache (:mod:`privlin.compilation`) is a new empty directory
(cold) or the one the cold process filled (warm); every time is against the same process's scikit-learn
``LogisticRegression().fit`` (the unit). Rows: ``import privlin`` + JAX; the first ``DPLinearClassifier`` fit; a
refit at another ε that makes the same releases (2 → 4) and one that makes another (2 → 1: ε=1 adds a
re-centering, another program); ``PrivateGridSearchCV`` over 2 ε × 2 methods × 3 folds (+ the refit); and where a
warm first fit's time goes (JAX's monitoring: tracing, lowering, loading the executable).

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
import json, sys, time, warnings
warnings.simplefilter("ignore")
t = time.perf_counter()
import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression
X, y = load_breast_cancer(return_X_y=True)
LogisticRegression().fit(X, y)  # sklearn's own first-call costs out of the unit (its defaults, as users run it)
units = []
for _ in range(7):
    t0 = time.perf_counter(); LogisticRegression().fit(X, y); units.append(time.perf_counter() - t0)
unit = min(units)  # the fastest of 7: the least disturbed by other jobs on a shared box
t0 = time.perf_counter()
import jax
from privlin import DPLinearClassifier, compilation
from privlin.model_selection import PrivateGridSearchCV
out = {"unit": unit, "import": time.perf_counter() - t0}
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
def fit(eps):
    t0 = time.perf_counter(); DPLinearClassifier(epsilon=eps, classes=[0, 1]).fit(X, y); return time.perf_counter() - t0
out["first"] = fit(2.0)
out["split"], out["fit_program"] = dict(durs), dict(fit_program)
out["store"], out["stats"] = dict(store), dict(compilation.STATS)
out["refit_same"] = fit(4.0)
out["refit_other"] = fit(1.0)
t0 = time.perf_counter()
PrivateGridSearchCV(DPLinearClassifier(classes=[0, 1]), {"epsilon": [1.0, 2.0], "method": ["adam1", "sgd"]},
                    cv=3).fit(X, y)
out["grid"] = time.perf_counter() - t0
print(json.dumps(out))
"""


def child_env(cache_home: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE", "PRIVLIN_COMPILATION", "XLA_FLAGS"))}
    env.update(XDG_CACHE_HOME=cache_home, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
    return env


def run_child(cache_home: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD], env=child_env(cache_home), capture_output=True, text=True,
                         cwd=ROOT, check=False)
    if out.returncode:
        raise SystemExit(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def part_first(repeat: int) -> str:
    runs = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as home:
            runs.append((run_child(home), run_child(home)))  # cold (empty cache), then warm (the cache it filled)
    med = lambda f: sorted(f(r) for r in runs)[len(runs) // 2]  # noqa: E731
    rows = []

    def row(what, cold_of, warm_of, goal):
        c, w = med(cold_of), med(warm_of)
        uc, uw = med(lambda r: r[0]["unit"]), med(lambda r: r[1]["unit"])
        x = lambda r: f"{r:.0f}" if r >= 100 else f"{r:.3g}"  # noqa: E731
        rows.append(f"| {what} | {c:.2f} s ({x(c / uc)}×) | {w:.2f} s ({x(w / uw)}×) | {goal} |")

    row("`import privlin` + JAX (`from privlin import DPLinearClassifier`)", lambda r: r[0]["import"],
        lambda r: r[1]["import"], "–")
    row("first `DPLinearClassifier(epsilon=2).fit` in the process", lambda r: r[0]["first"], lambda r: r[1]["first"],
        "≤ 3 s cold, ≤ 1 s warm")
    row("refit at ε=4 (same releases: the same program)", lambda r: r[0]["refit_same"],
        lambda r: r[1]["refit_same"], "≤ 0.3 s")
    row("refit at ε=1 (adds a re-centering: another program)", lambda r: r[0]["refit_other"],
        lambda r: r[1]["refit_other"], "≤ 0.3 s")
    row("`PrivateGridSearchCV`, 2 ε × 2 methods × 3 folds + refit", lambda r: r[0]["grid"], lambda r: r[1]["grid"],
        "–")
    unit_c, unit_w = med(lambda r: r[0]["unit"]), med(lambda r: r[1]["unit"])
    split = runs[len(runs) // 2][1]["split"]
    part = {k.rsplit("/", 1)[-1]: v for k, v in split.items()}
    prog = {k.rsplit("/", 1)[-1]: v for k, v in runs[len(runs) // 2][1]["fit_program"].items()}
    cold_prog = {k.rsplit("/", 1)[-1]: v for k, v in runs[len(runs) // 2][0]["fit_program"].items()}
    first_c = med(lambda r: r[0]["first"])
    first_w = med(lambda r: r[1]["first"])
    traced = part.get("jaxpr_trace_duration", 0.0) + part.get("jaxpr_to_mlir_module_duration", 0.0)
    loaded = part.get("cache_retrieval_time_sec", 0.0)
    compiled = part.get("backend_compile_duration", 0.0) - loaded
    header = (f"### First fit, refit, grid search (breast_cancer 569 × 30; fresh processes; "
              f"`python benchmarks/bench_first_fit.py --part first`; {_machine()}; {_when()})\n\n"
              f"{'One cold/warm pair' if repeat == 1 else f'Median of {repeat} cold/warm pairs'}. In parentheses: "
              f"× the same process's scikit-learn `LogisticRegression().fit`, the fastest of 7 (cold "
              f"{unit_c * 1e3:.0f} ms, warm {unit_w * 1e3:.0f} ms). Cold: an empty persistent compilation cache; "
              f"warm: a second process on the cache the first filled.\n\n"
              "| what | cold cache | warm cache | goal (issue 37) |\n|---|---:|---:|---|")
    cold, warm = runs[len(runs) // 2]
    fit_traced = prog.get("jaxpr_trace_duration", 0.0)
    found = (f"traced {fit_traced:.2f} s and named (jaxpr hashed) {warm['store']['key']:.2f} s" if fit_traced
             else "found through its form's alias (not traced)")
    notes = (f"\nWhere the warm first fit's {first_w:.2f} s goes (one warm process; JAX monitoring and timers around "
             f"`privlin.compilation`): the fit program (`in_memory.train_many`) {found}, loaded whole from "
             f"`programs/` in {warm['store']['load']:.2f} s (not lowered, not compiled; this process: "
             f"{warm['stats']}); the other programs traced and lowered to find their JAX cache keys "
             f"{max(0.0, traced - fit_traced):.2f} s, their executables loaded from JAX's cache {loaded:.2f} s, "
             f"compiled {max(0.0, compiled):.2f} s; the rest is planning, accounting and the run itself. Cold (this "
             f"process: {cold['stats']}): XLA compiling the fit program takes "
             f"{cold_prog.get('backend_compile_duration', 0.0):.2f} s of the {first_c:.2f} s, with XLA's quick "
             "options (`privlin.compilation.QUICK_OPTIONS`, used up to `privlin.defaults.QUICK_COMPILE_ELEMENTS`; "
             "their compile and run times are in the next section).")
    return header + "\n" + "\n".join(rows) + "\n" + notes


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

def part_sweep(sizes, d: int, repeat: int) -> str:
    """One row per N in ``sizes``; the cost split of the first."""
    rows, split = [], None
    for n in sizes:
        row, text = _sweep_row(n, d, repeat)
        rows.append(row)
        split = split or text
    header = (f"### The curve at the price of one fit? (issue 37.5; `python benchmarks/bench_first_fit.py --part "
              f"sweep`; {_machine()}; {_when()})\n\n"
              "| benchmark | one fit | sweep | ratio | goal |\n|---|---:|---:|---:|---|")
    return header + "\n" + "\n".join(rows) + "\n" + split


def _sweep_row(n: int, d: int, repeat: int) -> tuple[str, str]:
    import warnings

    import jax
    import numpy as np

    import privlin
    from bench_sweep import make_store, timed  # timed: the median after a warm-up that compiles
    from privlin import compilation, fit_groups
    from privlin.plan import make_plan
    from privlin.sweep import sweep

    warnings.simplefilter("ignore")
    k = 10
    classes = np.arange(k)
    calls = []
    real = compilation.call

    def counted(fn, static_args, X, idx, mask, n, keys, *a, **kw):  # the fit program's vmapped calls, settings
        t = time.perf_counter()
        got = jax.block_until_ready(real(fn, static_args, X, idx, mask, n, keys, *a, **kw))
        calls.append((keys.shape[0], time.perf_counter() - t))
        return got

    with tempfile.TemporaryDirectory() as tmp:
        st = make_store(os.path.join(tmp, "s.zarr"), n, d, k)
        one = timed(lambda: privlin.fit(st, epsilon=1.0, method="adam1", classes=classes, random_state=0,
                                        progress=False), repeat)
        many = timed(lambda: sweep(st, epsilon=EPS10, method="adam1", classes=classes, eval_split=None,
                                   random_state=0, progress=False), repeat)
        compilation.call = counted
        try:
            t = time.perf_counter()
            privlin.fit(st, epsilon=1.0, method="adam1", classes=classes, random_state=0, progress=False)
            single_total, single, calls[:] = time.perf_counter() - t, calls[0][1], []
            t = time.perf_counter()
            sweep(st, epsilon=EPS10, method="adam1", classes=classes, eval_split=None, random_state=0, progress=False)
            counted = time.perf_counter() - t
        finally:
            compilation.call = real
    plans = [make_plan({"epsilon": e, "method": "adam1"}, n=n, dim=d, n_classes=k) for e in EPS10]
    chains = sorted({" → ".join(repr(r) for r, _ in p.static().chain) for p in plans})
    programs = len({fit_groups.shared_form(p.static()) for p in plans})
    row = (f"| adam1, default preprocessing: 10-ε sweep vs 1 fit, same store (n={n}, d={d}, k={k}, float16; "
           f"median of {repeat} after a warm-up) | {one:.2f} s | {many:.2f} s | **{many / one:.2f}×** | ≤ 2× CPU |")
    in_calls = sum(c[1] for c in calls)
    split = (f"\nThe sweep's cost split (one more sweep, {counted:.2f} s, each vmapped call waited for): its 10 plans "
             f"(release chains: {'; '.join(chains)}) run as {programs} compiled program(s), {len(calls)} vmapped "
             f"call(s) of {[c[0] for c in calls]} settings taking {[round(c[1], 2) for c in calls]} s, against "
             f"{single:.2f} s for the single fit's call of 1 setting: each further setting adds "
             f"{(in_calls - single) / 9:.3f} s; the rest, {counted - in_calls:.2f} s, is reading the store into memory, "
             f"planning and accounting (the single fit's, timed with its call: {single_total - single:.2f} s of "
             f"{single_total:.2f} s). Shared by every setting of a call: the read, the centering's first sum (rows as "
             "given), and in every later sum the rows as snapped once (`privlin.sensitivity.offsets_sum`); a "
             "setting's own work is one product of those rows with its center (each row's distance) and one with its "
             "weights, by tiles of rows sorted by class. Plans whose centering takes one stage and plans that take "
             "two share one program (`privlin.fit_groups.shared_form`).")
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
    p.add_argument("--results", default=os.path.join(HERE, "results"))
    args = p.parse_args(argv)
    from _results import write_section

    if args.part in ("first", "both"):
        text = part_first(args.repeat)
        print(text)
        write_section(os.path.join(args.results, "privlin.md"), "bench_first_fit", text)
    if args.part == "options":
        text = part_options([tuple(int(v) for v in size.split("x")) for size in args.sizes.split(",")])
        print(text)
        write_section(os.path.join(args.results, "privlin.md"), "bench_first_fit_options", text)
    if args.part in ("sweep", "both"):
        text = part_sweep([int(v) for v in args.n.split(",")], args.d, args.repeat)
        print(text)
        write_section(os.path.join(args.results, "sweep.md"), "bench_first_fit_sweep", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
