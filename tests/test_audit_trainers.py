"""Every privlin trainer, audited on digits: the audited lower bound never exceeds the claimed ε.

The trainers are the estimator's own pipeline (its plan, preprocessing and
``privlin.train`` pieces, see ``privlin.audit._estimator_method``), vmapped
over seeds. A bound above the claim would prove the implementation wrong.
"""
import pytest

from privlin import audit as A

RUNS = {"adam1": 1000, "sgd": 300, "minibatch_sgd": 200, "minibatch_adam": 200}
_slow = pytest.mark.slow


@pytest.mark.parametrize("method,eps", [
    ("adam1", 1.0), ("adam1", 4.0), ("sgd", 1.0), ("sgd", 4.0), ("minibatch_sgd", 1.0),
    pytest.param("minibatch_sgd", 4.0, marks=_slow), pytest.param("minibatch_adam", 1.0, marks=_slow),
    pytest.param("minibatch_adam", 4.0, marks=_slow),
])
def test_trainer_passes_audit(method, eps):
    res = A.audit_method(method, eps, runs=RUNS[method], delta=1e-5, seed=1)
    assert res.epsilon_lb <= eps, str(res)
    assert res.details["runs"] == RUNS[method]


def test_cli_reports_claim_bound_and_attack(capsys):
    assert A.main(["--method", "adam1", "--epsilon", "2", "--runs", "200"]) == 0
    out = capsys.readouterr().out
    assert "claimed ε=2" in out and "audited lower bound" in out and "attack:" in out
