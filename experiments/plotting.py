"""Privacy–accuracy plots: accuracy against ε on a log axis, one line per backbone/method.

Why a helper: every experiment draws the same figure, and a reader compares them side by side, so they share
axes, labels and the dashed non-private reference lines.
"""
from __future__ import annotations

import os
from collections import defaultdict
from typing import Iterable, Mapping

__all__ = ["plot_privacy_curves"]


def plot_privacy_curves(rows: Iterable[Mapping], out: str | os.PathLike, *, references: Mapping[str, float] | None = None,
                        title: str = "Private linear probe: accuracy vs privacy", line_key: str = "label",
                        delta: float | None = None) -> str:
    """Write a PNG of accuracy vs ε.

    Parameters
    ----------
    rows : iterable of mapping
        Each with ``epsilon``, ``accuracy`` (fraction in [0, 1]) and ``line_key`` (the line it belongs to, e.g.
        ``"vip_toy / adam1"``).  Several rows at one (line, ε) are averaged (noise seeds).
    out : path
        PNG file to write (parent folders are created).
    references : mapping of str to float, optional
        Non-private accuracies drawn as dashed horizontal lines, e.g. ``{"vip_toy k-NN (non-private)": 0.9}``.
    delta : float, optional
        Shown in the x-axis label.

    Returns
    -------
    str
        The path written.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        lines[str(r[line_key])][float(r["epsilon"])].append(float(r["accuracy"]))
    if not lines:
        raise ValueError("nothing to plot: no rows")
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    all_eps = sorted({e for pts in lines.values() for e in pts})
    for i, (name, pts) in enumerate(sorted(lines.items())):
        eps = sorted(pts)
        acc = [100 * sum(pts[e]) / len(pts[e]) for e in eps]
        ax.plot(eps, acc, marker="o", color=colors[i % len(colors)], label=name)
    for j, (name, acc) in enumerate(sorted((references or {}).items())):
        ax.axhline(100 * float(acc), linestyle="--", linewidth=1.2, color=colors[(len(lines) + j) % len(colors)],
                   label=name)
    ax.set_xscale("log")
    ax.set_xticks(all_eps)
    ax.set_xticklabels([f"{e:g}" for e in all_eps])
    ax.minorticks_off()
    ax.set_xlabel("privacy budget ε (log scale)" + (f", δ = {delta:g}" if delta else ""))
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    out = os.fspath(out)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
