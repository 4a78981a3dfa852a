"""Shared by the benchmark scripts: write one script's section of a results file without touching the others."""
from __future__ import annotations

import os


def write_section(path: str, name: str, text: str) -> None:
    """Replace the ``<!-- name -->`` ... ``<!-- /name -->`` block of ``path`` (append it if absent)."""
    begin, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    old = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
    block = f"{begin}\n{text.rstrip()}\n{end}\n"
    if begin in old and end in old:
        new = old[:old.index(begin)] + block + old[old.index(end) + len(end) + 1:]
    else:
        new = old + ("\n" if old else "") + block
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(new)
