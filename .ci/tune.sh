#!/usr/bin/env bash
# .ci/tune.sh: megago tune end to end. A 4-trial TPE search (2 random startup trials, then
# 2 from the model of the rung results) with successive halving (rungs at 4, 8 and 16
# iterations, η = 2) over a tiny gpt model's learning rate and warmup finishes and writes
# its table, plots and best.json; the example then takes best.json with --config and
# trains a few iterations. Run again, the search finds nothing left to do: every trial
# is finished or stopped. Run by .ci/run from the repository root; about 30 s on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT

go build -o "$dir/megago" ./cmd/megago
cat >"$dir/space.json" <<'EOF_SPACE'
{
  "lr": {"min": 1e-3, "max": 3e-2, "scale": "log"},
  "lr-warmup-iters": {"min": 0, "max": 4, "type": "int"}
}
EOF_SPACE
tiny=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --micro-batch-size 2
	--global-batch-size 4 --eval-iters 2 --log-interval 4 --gen-tokens 0 --cache-dir "$dir/cache")
tune=(tune --example gpt --space "$dir/space.json" --max-trials 4 --min-iters 4 --reduction-factor 2
	--max-iters 16 --parallel 2 --seed 1 --sampler tpe --startup-trials 2 --out-dir "$dir/out")
"$dir/megago" "${tune[@]}" -- "${tiny[@]}" | tee "$dir/first.txt"
for f in tune.jsonl table.txt best.json curves.png params.png; do
	if [[ ! -s "$dir/out/$f" ]]; then
		echo "tune.sh: $f is missing or empty" >&2
		exit 1
	fi
done
grep -q '^best: trial' "$dir/first.txt"
if [[ "$(grep -c '"event":"trial"' "$dir/out/tune.jsonl")" != 4 ]]; then
	echo "tune.sh: want 4 trials in tune.jsonl" >&2
	exit 1
fi

# The same command again resumes a finished search: no segment runs.
"$dir/megago" "${tune[@]}" -- "${tiny[@]}" >"$dir/second.txt"
if grep -q '^trial [0-9]*: \(rung\|promoted\|--\)' "$dir/second.txt"; then
	echo "tune.sh: the resumed search ran segments again:" >&2
	cat "$dir/second.txt" >&2
	exit 1
fi

# The example takes the best settings unchanged.
"$dir/out/bin/gpt" --config "$dir/out/best.json" --train-iters 3 --out-dir "$dir/best" | tee "$dir/best.txt"
grep -q 'validation at iteration 3' "$dir/best.txt"
echo "tune.sh: ok"
