#!/usr/bin/env bash
# examples/gpt/moe_vs_dense.sh: an 8-expert top-2 GPT against the dense GPT with the same
# active parameters, over the same tokens and iterations, each trained with 3 seeds.
#
# Both: 4 layers, hidden C = 64, 4 heads, sequence 128, global batch 16 (one micro-batch),
# ITERS iterations (default 1500: 3,072,000 tokens), the example's other defaults (AdamW, lr
# 2e-3 → 1e-4 cosine with 5% warmup, weight decay 0.1, clip 1, GeLU MLPs with biases). Dense:
# each layer's MLP has hidden F = 4C = 256. MoE: each layer's MLP is 8 experts of hidden
# F/2 = 128 and a router choosing 2 of them per token, so a token goes through 2·F/2 = F
# hidden units as in the dense model (plus the router's E·C weights), the experts in one
# grouped product, the load-balancing loss at 1e-2. --seed sets the initialization and the
# order of the training samples (and which validation samples are drawn); each seed is used
# by both models. Validation runs once, at the end, over 21 batches of 16 samples: 336 of
# the validation split's 346 samples of 128 tokens (44,363 tokens).
#
# Prints each run's final validation loss, per model the mean, min, max and spread (max − min),
# and whether the MoE's worst seed is below the dense model's best by more than each spread.
# Run from anywhere: bash examples/gpt/moe_vs_dense.sh (ITERS=N and SEEDS="a b c" override
# the defaults; KEEP=DIR keeps every run's log and output there, and a second run with the
# same KEEP skips the trainings whose result is there, printing the table again). Its output on 2 cores is
# examples/gpt/results/moe-vs-dense.txt; it took about 17 minutes there.
set -euo pipefail
cd "$(dirname "$0")/../.."
iters="${ITERS:-1500}"
read -r -a seeds <<<"${SEEDS:-1 2 3}"
if [[ -n "${KEEP:-}" ]]; then
	dir="$KEEP"
	mkdir -p "$dir"
else
	dir="$(mktemp -d)"
	trap 'rm -rf "$dir"' EXIT
fi
go build -o "$dir/gpt" ./examples/gpt

layers=4 hidden=64 ffn=256 experts=8 topk=2 batch=16
common=(--num-layers "$layers" --hidden-size "$hidden" --num-attention-heads 4 --seq-length 128
	--micro-batch-size "$batch" --train-iters "$iters" --eval-interval 0 --eval-iters 21 --gen-tokens 0 --log-interval 100)
dense=(--ffn-hidden-size "$ffn")
moe=(--num-experts "$experts" --moe-router-topk "$topk" --moe-ffn-hidden-size $((ffn / topk)) --moe-grouped-gemm --moe-aux-loss-coeff 1e-2)

[[ -s "$dir/started" ]] || date -u '+%Y-%m-%d %H:%M UTC' >"$dir/started"
echo "MoE vs dense, examples/gpt/moe_vs_dense.sh, trainings started $(cat "$dir/started")"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(go version | cut -d' ' -f3-), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "each run (gpt built by go build -o DIR/gpt ./examples/gpt; S each seed of ${seeds[*]}; DIR a temporary directory):"
echo "  dense: gpt ${common[*]} ${dense[*]} --seed S --out-dir DIR/dense-S"
echo "  moe:   gpt ${common[*]} ${moe[*]} --seed S --out-dir DIR/moe-S"
echo

# run MODEL SEED FLAGS...: trains one model, its log in DIR/MODEL-SEED.log; prints its
# final validation loss.
run() {
	local name="$1-$2" seed="$2"
	if grep -q "^$name " "$dir/results"; then
		return
	fi
	shift 2
	local start=$SECONDS
	if ! "$dir/gpt" "${common[@]}" "$@" --seed "$seed" --out-dir "$dir/$name" >"$dir/$name.log" 2>&1; then
		echo "$name failed:" >&2
		tail -n 30 "$dir/$name.log" >&2
		exit 1
	fi
	local loss
	loss="$(sed -n 's/^validation loss \([0-9.]*\) .*/\1/p' "$dir/$name.log")"
	if [[ -z "$loss" ]]; then
		echo "$name: no final validation loss in its log:" >&2
		tail -n 30 "$dir/$name.log" >&2
		exit 1
	fi
	echo "$name $seed $loss $((SECONDS - start))" >>"$dir/results"
}

touch "$dir/results"
for seed in "${seeds[@]}"; do
	run dense "$seed" "${dense[@]}"
	run moe "$seed" "${moe[@]}"
done

# params MODEL: the parameter count on the model line of the first seed's log.
params() { sed -n 's/^model: .*: \([0-9,]*\) parameters.*/\1/p' "$dir/$1-${seeds[0]}.log"; }
tokens="$(sed -n 's/^done: .*(\([0-9,]*\) tokens.*/\1/p' "$dir/dense-${seeds[0]}.log")"
echo "$iters iterations of $batch samples × 128 tokens: $tokens training tokens per run, the same tokens for both models of a seed"
echo "parameters: dense $(params dense); MoE $(params moe) in all, of which a token uses the dense count and"
echo "  $layers layers × ($experts·$hidden router weights + $hidden for the second expert's fc2 bias) = $((layers * (experts + 1) * hidden)) more"
echo
awk '
{ model = ($1 ~ /^dense/) ? "dense" : "moe"; loss[model, ++n[model]] = $3; bySeed[model, $2] = $3
  if (!($2 in seen)) { seen[$2] = 1; order[++ns] = $2 }
  printf "%-6s seed %-3s validation loss %.4f  (%d s)\n", model, $2, $3, $4 }
END {
  print ""
  for (m = 1; m <= 2; m++) {
    model = (m == 1) ? "dense" : "moe"; sum = 0; lo = 1e9; hi = -1e9
    for (i = 1; i <= n[model]; i++) { v = loss[model, i]; sum += v; if (v < lo) lo = v; if (v > hi) hi = v }
    mean[model] = sum / n[model]; min[model] = lo; max[model] = hi; spread[model] = hi - lo
    printf "%-6s mean %.4f  min %.4f  max %.4f  spread %.4f  (%d seeds)\n", model, mean[model], lo, hi, hi - lo, n[model]
  }
  print ""
  for (i = 1; i <= ns; i++)
    printf "seed %-3s dense − MoE %.4f\n", order[i], bySeed["dense", order[i]] - bySeed["moe", order[i]]
  gap = min["dense"] - max["moe"]; mgap = mean["dense"] - mean["moe"]
  printf "\nMoE worst (max) %.4f vs dense best (min) %.4f: %.4f nats apart; means %.4f apart\n", max["moe"], min["dense"], gap, mean["dense"] - mean["moe"]
  if (gap > spread["dense"] && gap > spread["moe"])
    printf "verdict: the MoE is better: its worst seed is below the dense model'"'"'s best by %.4f, more than each spread (dense %.4f, MoE %.4f)\n", gap, spread["dense"], spread["moe"]
  else
    printf "verdict: NOT shown: the MoE'"'"'s worst seed is not below the dense model'"'"'s best by more than each spread (gap %.4f; spreads dense %.4f, MoE %.4f)\n", gap, spread["dense"], spread["moe"]
  if (mgap > spread["dense"] && mgap > spread["moe"])
    printf "means: the MoE'"'"'s mean is below the dense model'"'"'s by %.4f, more than each spread\n", mgap
  else
    printf "means: the MoE'"'"'s mean is below the dense model'"'"'s by %.4f, NOT more than each spread\n", mgap
}' "$dir/results"
