"""XLA cost analysis of the compiled in-memory fit program (sgd and adam1 defaults, 30 000 x 512, k=10, eps=2), run inside any tree: the restructuring (issue 35) must compile to the same work."""
import os, sys, warnings
sys.path.insert(0, os.getcwd()); warnings.simplefilter("ignore")
import numpy as np, jax, jax.numpy as jnp
from privlin import runner, sensitivity
from privlin.plan import make_plan
from privlin.estimator import DPLinearClassifier
n, d, k = 30000, 512, 10
for method in ("sgd", "adam1"):
    est = DPLinearClassifier(epsilon=2.0, method=method, classes=list(range(k)), random_state=0)
    p = make_plan(est.get_params(), n=n, dim=d, n_classes=k)
    with sensitivity.x64():
        X = jnp.zeros((runner._padded_len(n), d), jnp.float16); idx = jnp.zeros(X.shape[0], jnp.int32); m = jnp.zeros(X.shape[0], jnp.float32)
        dyn = [jnp.asarray([v[0]], jnp.float32) for v in runner._dynamic([p])]
        from privlin import noise; keys = jnp.stack([noise.make_key(0).key])
        lowered = runner._train_many.lower(p.static(), X, idx, m, float(n), keys, *dyn, k=k)
        c = lowered.compile().cost_analysis()
        c = c[0] if isinstance(c, (list, tuple)) else c
        print(method, [r.name for r, _ in getattr(p, "chain", ())], f"flops {c.get('flops', 0):.3e} bytes {c.get('bytes accessed', 0):.3e}")
