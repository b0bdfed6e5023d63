#!/bin/bash
# The ladder sequential -> megatron -> mimo -> Maestro (docs/planner.md,
# "Baselines"; docs/PERFORMANCE.md §3) for every full-size workload in
# models/ on 64 and 1,024 H100 (CLUSTERS="h100x8 ..." for others, each
# configs/NAME.toml): `maestro-run --simulate --baseline all --json`, one
# markdown table per cluster (step seconds; Maestro's speedup
# over each rung in parentheses; utilisation = Maestro's lower bound / its
# step), then each rung's tuned configuration. Simulated: no GPU is used.
# Every rung tunes tp, pp and dp of every module over its own grid, so
# Maestro gets the same freedom: each program runs with its written
# `parallel` degrees removed and every section's left to the planner (the
# language's defaults, tp = 1 and pp = 1, would pin the encoders; PINNED=1
# runs the programs as written). Every search tries only a tp the model
# splits over (heads, kv heads, ffn).
# usage: [CLUSTERS="..."] [PINNED=1] bench/plan_ladder/run.sh BUILD_DIR [STEPS]   (from the source root)
set -euo pipefail
BUILD=${1:?usage: run.sh BUILD_DIR [STEPS]}
STEPS=${2:-1}
CLUSTERS=${CLUSTERS:-h100x64 h100x1024}
MODELS="llava15_7b omni_7b omni_whisper_7b video_7b internvl_20b internvl_26b kd_70b_to_8b kd_32b_to_1_5b"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
P=models
if [ "${PINNED:-0}" != 1 ]; then
  P=$W/models
  cp -r models "$P"
  for m in $MODELS; do
    /usr/bin/python3 - "$P/$m.sect" <<'PY'
import re, sys
path = sys.argv[1]
text = re.sub(r"parallel\s*\{[^}]*\}", "", open(path).read())
text = re.sub(r"(section\s+\w+\s*\{)", r"\1 parallel { tp = auto; pp = auto; dp = auto; }", text)
open(path, "w").write(text)
PY
  done
fi
echo "# $(git rev-parse --short HEAD 2>/dev/null || echo '?') on $(uname -n), $(nproc) cores; $(uptime); degrees: $([ "$P" = models ] && echo 'as written' || echo 'all auto')"
for cluster in $CLUSTERS; do
  for m in $MODELS; do
    if ! "$BUILD/maestro-run" "$P/$m.sect" --config "configs/$cluster.toml" --simulate --baseline all \
         --steps "$STEPS" --json > "$W/$cluster.$m.out" 2> "$W/$cluster.$m.err"; then
      echo "{\"error\": $(tail -1 "$W/$cluster.$m.err" | /usr/bin/python3 -c 'import json,sys; print(json.dumps(sys.stdin.read().strip()))')}" > "$W/$cluster.$m.out"
    fi
  done
done
/usr/bin/python3 - "$W" "$STEPS" "$CLUSTERS" $MODELS <<'PY'
import json, sys
w, steps, clusters, models = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4:]
rungs = ["sequential", "sequential-ideal", "megatron", "megatron-ideal", "mimo"]
for cluster in clusters:
    print(f"\n{cluster} (`--simulate --baseline all --steps {steps}`; step seconds, Maestro's speedup over each rung)\n")
    print("| model | Maestro (util.) | " + " | ".join(rungs) + " |")
    print("| --- | --- |" + " --- |" * len(rungs))
    configs = []
    for m in models:
        j = json.loads(open(f"{w}/{cluster}.{m}.out").read().strip().splitlines()[-1])
        if "error" in j:
            print(f"| {m} | refused: {j['error']} |" + " |" * len(rungs))
            continue
        by = {r["name"]: r for r in j["ladder"]}
        cells = []
        for r in rungs:
            x = by.get(r)
            if x is None:
                cells.append("-")
                continue
            if "error" in x:
                cells.append("does not fit")
                continue
            s = x["speedup"]
            cells.append(f"{x['iteration_s']:.3f} ({'**' if s < 1 else ''}{s:.3f}×{'**' if s < 1 else ''})")
        print(f"| {m} | {j['iteration_s']:.3f} ({100 * j['utilization']:.1f}%) | " + " | ".join(cells) + " |")
        configs.append((m, [(r, by[r]["config"]) for r in rungs if r in by and "config" in by[r]]))
    print(f"\nTuned configurations ({cluster}):\n")
    for m, cs in configs:
        for r, c in cs:
            print(f"- {m} {r}: `{c}`")
PY
