#!/usr/bin/env bash
# The probe's data-design sweep: for each decoy share, generate tiny-math with the probe (default rule: word
# problems of level 1 whose answer ends in 7), build tiny-s (seed 0, one thread) and measure it
# (bandpo.train.probe measure), all shares in parallel, one core each. Results: $OUT/sweep.json (per share),
# $OUT/measure-SHARE.json (with per-problem records), $OUT/logs.txt.
#   SHARES="0 0.9 0.95" bash benchmarks/probe_sweep/run.sh
set -uo pipefail
OUT=${OUT:-/tmp/probe_sweep_out}; mkdir -p "$OUT"; W=${WORK:-/tmp/probe_sweep}; mkdir -p "$W"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 OMP_NUM_THREADS=1
python3 -c "import sys, torch, transformers; print('python', sys.version.split()[0], 'torch', torch.__version__,
'transformers', transformers.__version__, 'cpu', torch.backends.cpu.get_cpu_capability())" | tee "$OUT/logs.txt"
# read the JSONL splits directly (same rows as the datasets json builder; works where datasets is missing)
PY='import sys, bandpo.models.tiny as M, bandpo.data.tasks as T; M._load_rows = lambda p: T.read_jsonl(p); sys.exit(M.main(sys.argv[1:]))'
one() {
  local s=$1 t0=$SECONDS
  python3 -m bandpo.data tiny-math --out "$W/data-$s" --seed 0 --probe "{\"decoy_share\": $s}" &&
  python3 -c "$PY" build --size "${SIZE:-tiny-s}" --data "$W/data-$s" --out "$W/model-$s" --seed 0 --threads 1 --no-progress &&
  echo "build $s: $((SECONDS - t0)) s" &&
  python3 -m bandpo.train.probe measure --model "$W/model-$s" --data "$W/data-$s" --k 8 --threads 1 --out "$OUT/measure-$s.json"
}
for s in ${SHARES:-0 0.8 0.9 0.95 0.98 0.99}; do one "$s" > "$W/log-$s.txt" 2>&1 & done
wait
for f in "$W"/log-*.txt; do echo "== $f"; grep -v -E "examples/s|it/s\]" "$f" | grep -v '^ ' | tail -8; done >> "$OUT/logs.txt"
python3 - "$W" "$OUT/sweep.json" <<'PY'
import glob, json, sys
w, out = sys.argv[1], sys.argv[2]
res = {}
for f in sorted(glob.glob(f"{out.rsplit('/', 1)[0]}/measure-*.json")):
    share = f.rsplit("measure-", 1)[1][: -len(".json")]
    m = json.load(open(f))
    info = json.load(open(f"{w}/model-{share}/info.json"))
    res[share] = {k: v for k, v in m.items() if k != "records"} | {
        "validation_accuracy": info["base_accuracy_validation"], "build_seconds": info["build_seconds"]}
json.dump(res, open(out, "w"), indent=1)
for s, r in res.items():
    d = r["deciding"]
    print(s, "p_correct median %.4f mean %.4f" % (d["p_correct"]["median"], d["p_correct"]["mean"]),
          "in band %.2f decoy-first %.2f greedy-correct %.2f" % (d["p_correct_in_band"], d["prefers_decoy_share"], d["greedy_correct_share"]),
          "probe T1 %.3f greedy %.3f | rest T1 %.3f greedy %.3f" % (r["probe"]["sampled"], r["probe"]["greedy"], r["rest"]["sampled"], r["rest"]["greedy"]))
PY
