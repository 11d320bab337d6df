#!/usr/bin/env bash
# The CUDA check of the local trainer and the Band operator (run once on a lent H200; its figures: benchmarks/README.md,
# the whole record: benchmarks/CHANGELOG.md, "CUDA check"). From the repository root, on a machine with a GPU:
#   MODEL=resources/models/tiny-s DATA=resources/data/tiny-math bash benchmarks/cuda_check/run.sh
set -uo pipefail
OUT=${OUT:-/tmp/cuda_check_out}; mkdir -p "$OUT"
[ -d .whl ] && { python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl || exit 1; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee $OUT/gpu.txt
python3 -c "import torch, transformers, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__, 'cpu_capability', torch.backends.cpu.get_cpu_capability())" | tee -a $OUT/gpu.txt
M=${MODEL:?set MODEL to a tiny model dir}; D=${DATA:?set DATA to a tiny-math dir}; S=${STEPS:-24}
run() {  # name device method params seed
  local t0=$(date +%s.%N)
  timeout 300 python3 -m bandpo.train --model $M --data $D --method $3 --params "$4" --seed $5 --out /tmp/runs/$1 \
     --threads ${THREADS:-4} --no-progress --steps $S --device $2 > /tmp/runs/$1.log 2>&1
  local rc=$?; local t1=$(date +%s.%N)
  echo "$1 device=$2 method=$3 rc=$rc wall_s=$(python3 -c "print(round($t1-$t0,1))")" | tee -a $OUT/runs.txt
  [ $rc -eq 0 ] || tail -30 /tmp/runs/$1.log | tee -a $OUT/runs.txt
}
mkdir -p /tmp/runs
run grpo_cuda_a cuda grpo '{}' 0
run grpo_cuda_b cuda grpo '{}' 0
run bandpo_cuda cuda bandpo '{"divergence":"kl","delta":0.05}' 0
run grpo_cpu cpu grpo '{}' 0
python3 benchmarks/cuda_check/compare_runs.py /tmp/runs | tee $OUT/compare.txt
timeout 240 python3 benchmarks/cuda_check/band_cuda.py | tee $OUT/band.txt
cp /tmp/runs/*.log $OUT/ 2>/dev/null; tar czf $OUT/runs.tgz -C /tmp/runs --exclude=model --exclude='*.pt' . 2>/dev/null
