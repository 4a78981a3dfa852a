"""Write BENCHMARKS.md: every area's results file in a fixed order, the goals screen (``goals.md``) first.

    python benchmarks/assemble.py            # write BENCHMARKS.md
    python benchmarks/assemble.py --check    # exit 1 if BENCHMARKS.md differs from its results files

Each benchmark script writes its own section of ``benchmarks/results/<area>.md``; BENCHMARKS.md is only their
concatenation, so an edit made in BENCHMARKS.md alone is lost at the next assembly (``--check`` catches it).
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORDER = ["goals", "stores", "featurize", "privlin", "runner_read", "gpu", "defaults", "sweep", "privacy", "mae",
         "suite"]


def assemble(root: str = ROOT) -> str:
    """The text of BENCHMARKS.md: the results files of ``ORDER`` (those that exist), one blank line apart."""
    parts = []
    for name in ORDER:
        path = os.path.join(root, "benchmarks", "results", f"{name}.md")
        if os.path.exists(path):
            parts.append(open(path, encoding="utf-8").read().strip() + "\n")
    return "\n".join(parts)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="only compare; exit 1 if BENCHMARKS.md is out of date")
    args = p.parse_args(argv)
    target = os.path.join(ROOT, "BENCHMARKS.md")
    text = assemble()
    if args.check:
        current = open(target, encoding="utf-8").read() if os.path.exists(target) else ""
        if current != text:
            print("BENCHMARKS.md differs from benchmarks/results/*.md: edit the results files, then run "
                  "python benchmarks/assemble.py", file=sys.stderr)
            return 1
        return 0
    with open(target, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
