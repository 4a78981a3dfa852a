"""DP-MAE under torchrun (2 CPU processes, gloo): same result as one process; one secret sample for all ranks."""
import os
import subprocess
import sys

import pytest
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.slow  # two torchrun launches, ~30 s on a 2-core box

ARGS = ["--size", "toy", "--data", "digits", "--dp", "--steps", "2", "--sample-rate", "0.01", "--physical-batch", "4",
        "--noise-multiplier", "2", "--accountant", "rdp", "--threads", "1", "--no-progress"]


def _torchrun(args, cwd=REPO):
    env = dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *args],
                       cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def test_ddp_run_equals_single_process_run(tmp_path):
    seeded = ["--noise-seed", "1", "--sample-seed", "2"]
    for method in ("ghost", "vmap"):
        out = _torchrun(["-m", "backbones.mae.train", *ARGS, *seeded, "--per-example", method,
                         "--out", str(tmp_path / f"two_{method}")])
        assert out.stdout.count("step 2") == 1  # rank 0 reports
        r = subprocess.run([sys.executable, "-m", "backbones.mae.train", *ARGS, *seeded, "--per-example", method,
                            "--out", str(tmp_path / f"one_{method}")], cwd=REPO, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        a = torch.load(tmp_path / f"one_{method}" / "checkpoint.pth", weights_only=True)["model"]
        b = torch.load(tmp_path / f"two_{method}" / "checkpoint.pth", weights_only=True)["model"]
        for k in a:
            torch.testing.assert_close(b[k], a[k], rtol=1e-5, atol=1e-7, msg=k)


CHECK = r'''
import torch, torch.distributed as dist
from backbones.mae.dp import SecretStream, broadcast_stream, poisson_sample
dist.init_process_group("gloo")
rank = dist.get_rank()
sampler = broadcast_stream(SecretStream() if rank == 0 else None)  # unseeded: 256 bits of os.urandom on rank 0
s = poisson_sample(1000, 0.3, sampler.generator(5)).to(torch.float64)
sizes = [torch.zeros(1) for _ in range(2)]
dist.all_gather(sizes, torch.tensor([float(len(s))]))
assert sizes[0] == sizes[1], sizes
both = [torch.zeros(len(s), dtype=torch.float64) for _ in range(2)]
dist.all_gather(both, s)
assert torch.equal(both[0], both[1]) and not sampler.seeded
own = SecretStream().generator(0).random(4)  # a key drawn on each rank is not shared
mine = [torch.zeros(4, dtype=torch.float64) for _ in range(2)]
dist.all_gather(mine, torch.from_numpy(own))
assert not torch.equal(mine[0], mine[1])
print("ok", rank)
dist.destroy_process_group()
'''


def test_secret_sample_key_is_broadcast_from_rank_0(tmp_path):
    script = tmp_path / "check.py"
    script.write_text(CHECK)
    out = _torchrun([str(script)])
    assert "ok 0" in out.stdout and "ok 1" in out.stdout
