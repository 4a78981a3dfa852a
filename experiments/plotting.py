"""Privacy–accuracy plots: accuracy (%) against ε on a log axis, one connected line per backbone/method.

Why a helper: every experiment draws the same figure, and a reader compares them side by side, so they share
axes, labels and the dashed non-private reference lines.
"""
from __future__ import annotations

import os
from collections import defaultdict
from typing import Iterable, Mapping

__all__ = ["plot_privacy_curves"]


def plot_privacy_curves(points: Iterable[Mapping], out: str | os.PathLike, *,
                        references: Mapping[str, float] | None = None,
                        title: str = "Private linear probe: accuracy vs privacy", line_key: str = "label",
                        delta: float | None = None, note: str | None = None) -> str:
    """Write a PNG of accuracy (%) vs ε: one connected line per ``line_key``, error bars where there are draws.

    Parameters
    ----------
    points : iterable of mapping
        :func:`experiments.results.summarize` rows: ``epsilon``, ``accuracy_pct``, ``sd_pct`` (None: one draw,
        no bar) and ``line_key`` (the line it belongs to, e.g. ``"vip_toy / adam1"``).  One point per (line, ε).
    out : path
        PNG file to write (parent folders are created).
    references : mapping of str to float, optional
        Non-private accuracies (%) drawn as dashed horizontal lines, e.g. ``{"vip_toy k-NN (non-private)": 78.1}``.
    delta : float, optional
        Shown in the x-axis label.
    note : str, optional
        A line under the axes (what the figure cost in privacy).

    Returns
    -------
    str
        The path written.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines: dict[str, dict[float, Mapping]] = defaultdict(dict)
    for r in points:
        eps = float(r["epsilon"])
        if eps in lines[str(r[line_key])]:
            raise ValueError(f"two points for line {r[line_key]!r} at ε={eps:g}: summarize the draws first")
        lines[str(r[line_key])][eps] = r
    if not lines:
        raise ValueError("nothing to plot: no rows")
    fig, ax = plt.subplots(figsize=(6.4, 4.6 if note else 4.2), dpi=110)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    all_eps = sorted({e for pts in lines.values() for e in pts})
    for i, (name, pts) in enumerate(sorted(lines.items())):
        eps = sorted(pts)
        acc = [pts[e]["accuracy_pct"] for e in eps]
        sd = [pts[e].get("sd_pct") or 0.0 for e in eps]
        ax.errorbar(eps, acc, yerr=sd if any(sd) else None, marker="o", capsize=3, color=colors[i % len(colors)],
                    label=name)
    for j, (name, acc) in enumerate(sorted((references or {}).items())):
        ax.axhline(float(acc), linestyle="--", linewidth=1.2, color=colors[(len(lines) + j) % len(colors)],
                   label=name)
    ax.set_xscale("log")
    ax.set_xticks(all_eps)
    ax.set_xticklabels([f"{e:g}" for e in all_eps])
    ax.minorticks_off()
    ax.set_xlabel("privacy budget ε of each model (log scale)" + (f", δ = {delta:g}" if delta else ""))
    ax.set_ylabel("test accuracy (%)")
    lo, hi = ax.get_ylim()
    ax.set_ylim(max(lo, -1), min(hi, 101))  # an error bar past 0 or 100 % says "spread", not a reachable value
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    if note:
        fig.text(0.01, 0.01, note, fontsize=7, ha="left", va="bottom", wrap=True)
    fig.tight_layout(rect=(0, 0.07 if note else 0, 1, 1))
    out = os.fspath(out)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
