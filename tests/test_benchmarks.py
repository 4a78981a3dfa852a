"""benchmarks/: every kept benchmark script still starts (its imports resolve and it parses ``--help``), BENCHMARKS.md
is the assembly of its results files and opens with the goals screen, and every investigation is indexed.

Nothing here times anything: speed claims are benchmark rows, not tests."""
import glob
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "benchmarks")
KEPT = sorted(glob.glob(os.path.join(BENCH, "bench_*.py"))) + [os.path.join(BENCH, "assemble.py")]


def test_every_kept_benchmark_answers_help():
    """Each script as its command line runs it (``python benchmarks/X.py --help``), in one interpreter for speed:
    a renamed library name that a benchmark imports at module level fails here, not on the next benchmark run."""
    code = """
import runpy, sys
for path in sys.argv[1:]:
    sys.argv = [path, "--help"]
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        assert e.code in (0, None), (path, e.code)
    else:
        raise AssertionError(path + ": --help did not exit")
    print("OK", path)
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([BENCH, ROOT]), "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", code, *KEPT], capture_output=True, text=True, timeout=300, env=env,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert [ln.split(" ", 1)[1] for ln in out.stdout.splitlines() if ln.startswith("OK ")] == KEPT


def test_investigations_live_apart_and_are_indexed():
    """One-off diag_* scripts are in benchmarks/investigations/, each in its README's index with the commit it ran at."""
    assert not glob.glob(os.path.join(BENCH, "diag_*.py"))
    scripts = sorted(os.path.basename(p) for p in glob.glob(os.path.join(BENCH, "investigations", "diag_*.py")))
    assert scripts
    readme = open(os.path.join(BENCH, "investigations", "README.md"), encoding="utf-8").read()
    index = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(diag_\w+\.py)` \|.*\| ([0-9a-f]{7}[^|]*) \|$",
                                                         readme, flags=re.M)}
    assert sorted(index) == scripts


def test_benchmarks_md_is_the_assembly_of_the_results_files():
    """An edit made in BENCHMARKS.md alone would be lost at the next assembly: edit benchmarks/results/*.md."""
    sys.path.insert(0, BENCH)
    try:
        import assemble
    finally:
        sys.path.remove(BENCH)
    assert open(os.path.join(ROOT, "BENCHMARKS.md"), encoding="utf-8").read() == assemble.assemble(ROOT)


def test_benchmarks_md_opens_with_one_screen_of_goals():
    text = open(os.path.join(ROOT, "BENCHMARKS.md"), encoding="utf-8").read()
    screen = text[:text.index("\n## ")].splitlines()
    assert len(screen) <= 40
    rows = [ln for ln in screen if ln.startswith("| ") and not ln.startswith("| goal |")]
    assert "| goal | now | met | device | section |" in screen and len(rows) >= 10
    sections = [ln.split(" | ")[-1].rstrip(" |") for ln in rows]
    for names in sections:  # every section a goal points to is a heading of this file
        for name in names.split("; "):
            if name != "(none yet)":
                assert re.search(rf"^#+ {re.escape(name)}", text, flags=re.M), name


@pytest.mark.parametrize("name", ["Do more steps pay?", "Where the low-ε rows lose", "What picks the rate",
                                  "privlin defaults on unseen data", "Would accounted private tuning by default pay?"])
def test_sections_the_code_cites_still_exist(name):
    """Docstrings point to BENCHMARKS.md sections by name: moving an investigation keeps a summary under its name."""
    text = open(os.path.join(ROOT, "BENCHMARKS.md"), encoding="utf-8").read()
    assert re.search(rf"^#+ {re.escape(name)}", text, flags=re.M)
