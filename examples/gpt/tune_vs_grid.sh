#!/usr/bin/env bash
# Issue 24's by-hand demonstration of megago tune on the gpt example's default corpus:
#   1. a dense grid of 36 runs of 150 iterations (6 learning rates on a log scale 1e-4..3e-2,
#      warmup fraction 0/0.1/0.2 of the 150 iterations, weight decay 0/0.2), no early stopping;
#   2. a random (or SAMPLER) search with ASHA (rungs 17, 51, 150 or 50, 150; η = 3) over the same space (continuous
#      ranges) at ≤ 1/3 of the grid's training iterations; its best validation loss is compared
#      with the grid's best;
#   3. the same ASHA search interrupted (SIGTERM while a trial trains) and resumed: its
#      decisions and results equal the uninterrupted search's;
#   4. the example's defaults against the tuned config over the same 150 iterations, seeds 1-3.
# Usage: [MODEL="--hidden-size 256"] [RESUME=0] [SAMPLER=tpe] [BUDGET=1800] bash examples/gpt/tune_vs_grid.sh [OUT]
# (from the repository root; OUT default /tmp/tune-vs-grid). MODEL: the example's model flags,
# fixed for every run (the example's defaults when empty); RESUME=0 skips part 3; MIN_ITERS
# (default 17) and TRIALS (default 30) set the ASHA search's first rung and trial budget; SAMPLER
# (default random) its sampler: random or tpe; BUDGET (default none) its --max-total-iters.
# Output: examples/gpt/results/tune-vs-grid.txt holds this script's stdout.
set -euo pipefail
out=${1:-/tmp/tune-vs-grid}
mkdir -p "$out"
space=examples/gpt/tune/space.json
go build -o "$out/megago" ./cmd/megago
go build -o "$out/gpt" ./examples/gpt
common=(--max-iters 150 --parallel 1 --seed 7)
read -r -a model <<<"${MODEL:-}"
fixed=(-- --gen-tokens 0 "${model[@]}")

echo "megago tune vs a grid, started $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine: $(nproc) cores, $(go version | cut -d' ' -f3-), commit $(git rev-parse --short HEAD)"
echo "model flags: ${MODEL:-none: the example defaults}"
echo "ASHA search's sampler: ${SAMPLER:-random}"
echo "space ($space):"; sed 's/^/  /' "$space"

iters() { # training iterations spent by a search: each trial's deepest rung
	python3 -c 'import json,sys
deep={}
for l in open(sys.argv[1]):
    r=json.loads(l)
    if r["event"]=="rung": deep[r["id"]]=max(deep.get(r["id"],0),r["iteration"])
print(sum(deep.values()), len(deep))' "$1"
}
best() { sed -n 3p "$1/table.txt"; }

echo; echo "== 1. grid: $out/megago tune --program $out/gpt --space $space --sampler grid --reduction-factor 1 ${common[*]} --out-dir $out/grid ${fixed[*]}"
"$out/megago" tune --program "$out/gpt" --space "$space" --sampler grid --reduction-factor 1 "${common[@]}" --out-dir "$out/grid" "${fixed[@]}" >"$out/grid.log" 2>&1
cat "$out/grid/table.txt"
read -r gi gn < <(iters "$out/grid/tune.jsonl")
echo "grid: $gn trials, $gi training iterations"

asha=(--program "$out/gpt" --space "$space" --sampler "${SAMPLER:-random}" --max-trials "${TRIALS:-30}" --min-iters "${MIN_ITERS:-17}" --reduction-factor 3 "${common[@]}")
if [ -n "${BUDGET:-}" ]; then asha+=(--max-total-iters "$BUDGET"); fi
echo; echo "== 2. ASHA: $out/megago tune ${asha[*]} --out-dir $out/asha ${fixed[*]}"
"$out/megago" tune "${asha[@]}" --out-dir "$out/asha" "${fixed[@]}" >"$out/asha.log" 2>&1
cat "$out/asha/table.txt"
read -r ai an < <(iters "$out/asha/tune.jsonl")
echo "ASHA: $an trials, $ai training iterations = $(python3 -c "print(f'{$ai/$gi:.3f}')") of the grid's"
python3 - "$out" <<'PY'
import json, sys, math
def bestloss(d):
    best = math.inf
    for l in open(f"{d}/tune.jsonl"):
        r = json.loads(l)
        if r["event"] == "rung" and r["iteration"] == 150 and r.get("valid_loss") is not None:
            best = min(best, r["valid_loss"])
    return best
g, a = bestloss(f"{sys.argv[1]}/grid"), bestloss(f"{sys.argv[1]}/asha")
print(f"best validation loss at 150 iterations: grid {g:.4f}, ASHA {a:.4f}, ASHA - grid = {a-g:+.4f} (target: < 0.02)")
PY
echo "ASHA best.json:"; sed 's/^/  /' "$out/asha/best.json"

if [ "${RESUME:-1}" != 0 ]; then
echo; echo "== 3. the same ASHA search interrupted twice (SIGTERM 20 s and 45 s into a run) and resumed"
for t in 20 45; do
	timeout -s TERM "$t" "$out/megago" tune "${asha[@]}" --out-dir "$out/asha-resumed" "${fixed[@]}" >>"$out/asha-resumed.log" 2>&1 || true
	echo "after the interruption at ${t}s: $(grep -c '"event":"rung"' "$out/asha-resumed/tune.jsonl") rung results recorded"
done
"$out/megago" tune "${asha[@]}" --out-dir "$out/asha-resumed" "${fixed[@]}" >>"$out/asha-resumed.log" 2>&1
python3 - "$out" <<'PY'
import json, sys
def decisions(d):
    keep = []
    for l in open(f"{d}/tune.jsonl"):
        r = json.loads(l)
        r.pop("seconds", None); r.pop("curve", None)
        keep.append(json.dumps(r, sort_keys=True))
    return keep
a, b = decisions(f"{sys.argv[1]}/asha"), decisions(f"{sys.argv[1]}/asha-resumed")
print(f"records without wall times: uninterrupted {len(a)}, interrupted and resumed {len(b)}; identical: {a == b}")
PY
cut -c1-200 "$out/asha-resumed/table.txt" | head -4
fi

echo; echo "== 4. defaults vs the ASHA search's best.json, 150 iterations, seeds 1-3"
for s in 1 2 3; do
	"$out/gpt" --train-iters 150 --gen-tokens 0 "${model[@]}" --seed "$s" --out-dir "$out/def$s" >"$out/def$s.log" 2>&1
	"$out/gpt" --config "$out/asha/best.json" --train-iters 150 --gen-tokens 0 --seed "$s" --out-dir "$out/tuned$s" >"$out/tuned$s.log" 2>&1
	d=$(grep -o 'validation loss [0-9.]*' "$out/def$s.log" | tail -1 | cut -d' ' -f3)
	t=$(grep -o 'validation loss [0-9.]*' "$out/tuned$s.log" | tail -1 | cut -d' ' -f3)
	echo "seed $s: defaults $d, tuned $t"
	echo "$d $t" >>"$out/seeds.txt"
done
python3 - "$out/seeds.txt" <<'PY'
import sys
rows = [tuple(map(float, l.split())) for l in open(sys.argv[1])][-3:]
d, t = [r[0] for r in rows], [r[1] for r in rows]
md, mt = sum(d) / 3, sum(t) / 3
spread = max(max(d) - min(d), max(t) - min(t))
print("per seed, defaults - tuned: " + ", ".join(f"{a-b:.4f}" for a, b in zip(d, t)))
print(f"means: defaults {md:.4f}, tuned {mt:.4f}: the tuned config is better by {md-mt:.4f}; "
      f"spread over the seeds: defaults {max(d)-min(d):.4f}, tuned {max(t)-min(t):.4f}; "
      f"better by more than the larger spread: {md-mt > spread}")
print(f"(stricter: the tuned config's worst seed {max(t):.4f} against the defaults' best {min(d):.4f}: {min(d)-max(t):+.4f})")
PY
echo "finished $(date -u '+%Y-%m-%d %H:%M UTC')"
