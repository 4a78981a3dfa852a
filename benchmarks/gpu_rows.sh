#!/usr/bin/env bash
# The GPU rows of BENCHMARKS.md, as run on a lent GPU machine (no network there: the packages the image lacks
# travel as wheels in .whl/, see /work/.library/device/README.md). Usage: bash benchmarks/gpu_rows.sh OUTDIR [STEPS]
# STEPS: any of featurize gpu_decode mae runner big cold mae_bf16 mae_profile (default: featurize mae runner).
out=${1:?OUTDIR}; shift; steps=${*:-featurize mae runner}
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
if [ -d .whl ] && [ ! -d /tmp/site ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
nvidia-smi -L; nproc; free -g | head -2; df -h /tmp | tail -1
python3 -c "import jax, torch, zarr; print('jax', jax.__version__, jax.devices(), 'torch', torch.__version__, 'zarr', zarr.__version__)"
for s in $steps; do
  echo "=== $s $(date +%T)"
  case $s in
    # ViT-B/16 end to end from 4096 500x375 JPEGs at 224 px: nvJPEG (--decode device) vs worker draft decode vs the
    # pure forward on the same batches, plus synthetic input and the vip_toy / small ViT-B rows on the GPU
    featurize) timeout 360 python3 benchmarks/bench_featurize.py --device cuda --repeats 2 --vitb-images 512 --gpu-images 4096 --out "$out/featurize_gpu.md" ;;
    gpu_decode) timeout 300 python3 benchmarks/bench_gpu_decode.py --device cuda --budget 180 --out "$out/gpu_decode.md" ;;
    mae) for amp in bf16 none; do timeout 150 python3 benchmarks/bench_mae.py --size base --batch 64 --repeats 5 --device cuda --amp $amp --methods nonprivate ghost opacus_ghost --out "$out/mae_gpu.md"; done ;;
    runner) timeout 200 python3 benchmarks/bench_runner_read.py --n 200000 --d 768 --k 100 --repeats 3 --out "$out/runner_gpu.md" ;;
    big) BENCH_TMP=/tmp timeout 420 python3 benchmarks/bench_runner_read.py --n ${BIG_N:-327680} --d 36864 --k 1000 --repeats 1 --block-rows 8192 --fits "adam1 streamed" "adam1 + centering, streamed" "sgd T=2 streamed" --out "$out/runner_big_gpu.md" ;;
    cold) BENCH_TMP=/tmp timeout 300 python3 benchmarks/bench_runner_read.py --n 1000000 --d 768 --k 100 --repeats 2 --cold --out "$out/runner_cold_gpu.md" ;;
  esac
  echo "=== $s done rc=$? $(date +%T)"
done
[[ " $steps " == *" mae_bf16 "* ]] && timeout 200 python3 benchmarks/bench_mae.py --size base --batch 64 --repeats 5 --device cuda --amp bf16 --methods nonprivate ghost ghost_bf16_norms ghost_tf32_sums --out "$out/mae_bf16_gpu.md"  # issue 39.3: DP-MAE fp32 norms (default) vs bf16 norms vs TF32 book-keeping vs non-private, one run (bash benchmarks/gpu_rows.sh OUT mae_bf16)
[[ " $steps " == *" mae_profile "* ]] && timeout 240 python3 benchmarks/bench_mae.py --profile --kernels --size base --batch 64 --repeats 5 --device cuda --amp bf16 --methods nonprivate ghost ghost_tf32_sums --out "$out/mae_profile_gpu.md"  # where the private step's extra time goes (bash benchmarks/gpu_rows.sh OUT mae_profile)
