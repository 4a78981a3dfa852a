"""The audit's command line, ``python -m privlin.audit`` (see :mod:`privlin.audit`)."""
from __future__ import annotations

import math
from typing import Sequence

from .bounds import AuditResult
from .methods import AUDITS, audit_method, digits_at_unit_norm, one_run_estimator_audit


AUDIT_PROG = "python -m privlin.audit"


def _audit_parser():
    """The command line of :func:`main` (limits as data: ``cliconv``)."""
    import cliconv as cli

    from privlin.defaults import METHODS as ESTIMATOR_METHODS

    p = cli.parser(AUDIT_PROG, "Empirically lower-bound the ε of a privlin trainer on digits (rows at unit norm).",
                   epilog="Exit status: 0 every claim consistent, 3 an audit proved a claim false, 2 a usage error.")
    p.add_argument("--method", default="gaussian_sum", choices=sorted({*AUDITS, *ESTIMATOR_METHODS, "all"}),
                   help=f"canary audit: one of {sorted(AUDITS)}; with --one-run: one of "
                        f"{list(ESTIMATOR_METHODS)} (DPLinearClassifier with its defaults); 'all': every one")
    p.add_argument("--epsilon", type=cli.Interval(float, 0, math.inf, closed="neither"), nargs="+", default=[1.0],
                   help="claimed ε values to audit")
    p.add_argument("--delta", type=cli.Interval(float, 0, 1, closed="neither"), default=1e-5)
    p.add_argument("--runs", type=cli.Interval(int, 16), default=1000,
                   help="canary audit: training runs, half with the canary")
    p.add_argument("--one-run", action="store_true",
                   help="one-run audit (Steinke, Nasr & Jagielski 2023): one fit of the shipped estimator with "
                        "--canaries Dirac canaries, each included with probability 1/2")
    p.add_argument("--canaries", type=cli.Interval(int, 2), default=1000, help="one-run audit: canaries")
    p.add_argument("--path", choices=("in-memory", "streamed", "secure"), default="in-memory",
                   help="one-run audit: the estimator's path (streamed: memory_limit=0; secure: secure_mode)")
    p.add_argument("--confidence", type=cli.Interval(float, 0, 1, closed="neither"), default=0.95)
    p.add_argument("--seed", type=int, default=0, help="seeds the audit's runs, canaries and split (reproducible)")
    p.add_argument("--json", action="store_true", help="one JSON object per audit instead of a table")
    p.add_argument("--no-progress", action="store_true", help="no progress lines")
    return p


def _audit_tasks(args) -> list[tuple[str, float]]:
    """(method, ε) pairs to audit; a method the chosen audit cannot run is a usage error."""
    import cliconv as cli

    from privlin.defaults import METHODS as ESTIMATOR_METHODS

    known = list(ESTIMATOR_METHODS) if args.one_run else sorted(AUDITS)
    methods = known if args.method == "all" else [args.method]
    if methods[0] not in known:
        other = "the canary audit (without --one-run)" if args.one_run else "--one-run"
        raise cli.UserError(f"--method {args.method} is for {other}; here choose from {known} or 'all'")
    return [(m, eps) for m in methods for eps in args.epsilon]


def _audit_one(args, method: str, epsilon: float) -> AuditResult:
    if not args.one_run:
        return audit_method(method, epsilon, delta=args.delta, runs=args.runs, seed=args.seed,
                            confidence=args.confidence)
    X, y = digits_at_unit_norm()
    params = {"method": method, "epsilon": epsilon, "delta": args.delta,
              **{"in-memory": {}, "streamed": {"memory_limit": 0}, "secure": {"secure_mode": True}}[args.path]}
    return one_run_estimator_audit(params, X, y, canaries=args.canaries, seed=args.seed, delta=args.delta,
                                   confidence=args.confidence)


def _audit_row(method: str, res: AuditResult) -> str:
    top = f"  ceiling ε≤{res.ceiling:.3f}" if math.isfinite(res.ceiling) else ""
    verdict = "VIOLATED" if res.violated else "consistent"
    return (f"{method:<15s} claimed ε={res.epsilon_claimed:.3g}  audited lower bound ε≥{res.epsilon_lb:.3f}{top}  "
            f"({res.confidence:.0%} confidence, δ={res.delta:g})  attack: {res.attack}  -> {verdict}")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m privlin.audit --method NAME --epsilon E [E ...] (--runs R | --one-run [--canaries M])``."""
    import cliconv as cli

    @cli.entry_point(AUDIT_PROG, (ValueError,))
    def run(argv):
        import json

        args = _audit_parser().parse_args(argv)
        tasks = _audit_tasks(args)
        kind = f"one-run audit, {args.canaries} canaries" if args.one_run else f"canary audit, {args.runs} runs"
        violated = False
        for i, (m, eps) in enumerate(tasks):
            with cli.status(f"[{i + 1}/{len(tasks)}] {m} at ε={eps:g} ({kind})", enabled=not args.no_progress):
                res = _audit_one(args, m, eps)
            violated |= res.violated
            print(json.dumps({"method": m, **res.as_dict()}) if args.json else _audit_row(m, res), flush=True)
        return 3 if violated else 0

    return run(argv)
