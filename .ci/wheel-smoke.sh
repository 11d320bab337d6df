#!/usr/bin/env bash
# The package as a wheel: build it from the checkout's tracked files, install it (no dependencies) into a fresh
# virtual environment outside the checkout that takes torch, lm-eval, pandas, ... from the system site-packages,
# and run its entry points from a temporary folder. Nothing is imported from the checkout (the script asserts that
# bandpo comes from the venv), so every file the package reads at run time must ship inside the wheel: the config
# schema, the run contract, lm-eval's task YAMLs, the report's templates.
#
#   .ci/wheel-smoke.sh            (called by .ci/run; about a minute on 2 cores)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/bandpo-wheel-smoke.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
unset PYTHONPATH  # a checkout on the path would hide what the wheel lacks
export TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1
step() { printf '\n== %s (%ds)\n' "$1" "$SECONDS"; }

step "wheel from the tracked files (a copy: the build writes nothing into the checkout)"
mkdir "$WORK/src"
git -C "$ROOT" ls-files -z | (cd "$ROOT" && tar --null -T - -cf -) | tar -xf - -C "$WORK/src"
# setuptools is installed (the build requirement); no download: no build isolation
python -m pip wheel --quiet --no-deps --no-build-isolation -w "$WORK/dist" "$WORK/src"
WHEEL=$(ls "$WORK"/dist/bandpo-*.whl)
python -m zipfile -l "$WHEEL" | grep -E "bandpo/(schemas/run.schema.yaml|schemas/config.schema.yaml|score/lm_eval_tasks/tiny_math.yaml|score/lm_eval_tasks/utils.py|report/templates/)" >/dev/null

step "a fresh venv outside the checkout (system site-packages), the wheel installed without dependencies"
python -m venv --system-site-packages "$WORK/venv"
PY="$WORK/venv/bin/python"
"$PY" -m pip install --quiet --no-deps "$WHEEL"
cd "$WORK"
"$PY" - "$WORK/venv" <<'EOF'
import sys
from pathlib import Path

import bandpo
from bandpo.core.files import package_data

venv = Path(sys.argv[1]).resolve()
assert Path(bandpo.__file__).resolve().is_relative_to(venv), f"bandpo imported from {bandpo.__file__}, not the wheel"
for part in (("schemas", "config.schema.yaml"), ("schemas", "run.schema.yaml"), ("score", "lm_eval_tasks", "tiny_math.yaml")):
    assert package_data(*part).is_file(), part
print(f"bandpo {bandpo.__version__} from {bandpo.__file__}")
EOF

step "the run plan (the schema and the task YAMLs from the package; the method registry; every job's settings)"
"$PY" -c "import sys; from bandpo.plan.runs import load_plan; print(len(load_plan(sys.argv[1]).train_specs), 'runs')" \
    "$ROOT/config/smoke.yaml"

step "ratio bounds of the registered methods (python -m bandpo.methods.bounds_table)"
"$PY" -m bandpo.methods.bounds_table --out bounds.csv
"$PY" -c "import pandas as pd; t = pd.read_csv('bounds.csv'); assert len(t) > 1000 and (t.r_lo <= t.r_hi).all()"

step "a tiny run: data, a tiny-test model, 2 training steps, the run contract"
"$PY" -m bandpo.data tiny-math --out data --seed 0 --n-train 300 --n-val 8 --n-test 8
"$PY" -m bandpo.models build --size tiny-test --data data --out model --seed 0 --threads 1 --eval-limit 4 --no-progress
"$PY" -m bandpo.train --model model --data data --method bandpo --params '{"divergence": "kl", "delta": 0.05}' \
    --seed 0 --out run --steps 2 --threads 1 --no-progress
"$PY" -m bandpo.core.run_contract run

step "lm-eval scores the run with the packaged task YAMLs; its method comes from run.json"
TASKS=$("$PY" -c "from bandpo.core.files import package_data; print(package_data('score', 'lm_eval_tasks'))")
"$PY" -m bandpo.score --include-path "$TASKS" --task tiny_math=data/test.jsonl --backend hf \
    --model-args '{"device": "cpu", "dtype": "float32"}' --batch-size 64 --limit 2 --threads 1 \
    --run run/model eval 0 --meta '{"entry": "bandpo_kl", "run_dir": "run"}'
"$PY" -c "import json; s = json.load(open('eval/tiny_math.json')); assert s['method'] == 'bandpo', s['method']; \
assert s['params'] == json.load(open('run/run.json'))['method_params']; print('summary:', s['metrics'])"

step "the report on the published runs (rebuilt from the committed tables) gives the published leaderboard"
"$PY" - "$ROOT/tests/published_runs.py" "$ROOT/results" <<'EOF'
import importlib.util
import json
import sys
from pathlib import Path

spec = importlib.util.spec_from_file_location("published_runs", sys.argv[1])  # test helper, loaded by path
published_runs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(published_runs)
results = published_runs.rebuild_run_outputs(Path(sys.argv[2]), Path("published"))
Path("results_dir").write_text(str(results))
Path("experiments.json").write_text(json.dumps(published_runs.published_experiments(Path(sys.argv[2]))))
Path("axes.json").write_text(json.dumps(published_runs.published_axes(Path(sys.argv[2])) or {}))
base_per_seed = published_runs.published_config(Path(sys.argv[2])).get("base_per_seed")  # the page's base-model line
Path("base_per_seed").write_text("" if base_per_seed is None else str(bool(base_per_seed)).lower())
EOF
BASE_PER_SEED=$(cat base_per_seed)
"$PY" -m bandpo.report build --results "$(cat results_dir)" --out report --bounds bounds.csv \
    --experiments-json "$(cat experiments.json)" --axes-json "$(cat axes.json)" \
    ${BASE_PER_SEED:+--base-per-seed "$BASE_PER_SEED"}
# as `report publish` does: the published page keeps the real-LM smoke section, made from results/real-lm*/
if compgen -G "$ROOT/results/real-lm*/scores.csv" >/dev/null; then
    for d in "$ROOT"/results/real-lm*/; do cp -r "$d" report/; done
    "$PY" -m bandpo.report smoke --dest report >/dev/null
fi
# and the answer at the top with the published parts' tiers (bandpo.report.verdicts.PARTS: the real LM's), as
# `report publish` does
"$PY" -c "import sys; from bandpo.report import verdicts; verdicts.write_section(sys.argv[1])" report
# the same page, up to printed values on a rounding tie of the 6-digit tables (published_runs.page_differences)
"$PY" - "$ROOT/tests/published_runs.py" report/leaderboard.md "$ROOT/results/leaderboard.md" <<'EOF'
import importlib.util
import sys
from pathlib import Path

spec = importlib.util.spec_from_file_location("published_runs", sys.argv[1])
published_runs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(published_runs)
diffs = published_runs.page_differences(Path(sys.argv[2]).read_text(), Path(sys.argv[3]).read_text())
sys.exit("\n".join(["the rebuilt page differs from results/leaderboard.md:", *diffs]) if diffs else 0)
EOF
"$PY" -m bandpo.report compare --published "$ROOT/results/leaderboard.csv" --rerun report/leaderboard.csv | tail -3

step "wheel smoke passed"
