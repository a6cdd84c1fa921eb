#!/usr/bin/env bash
# examples/gpt/long_context.sh: the GPT example at sequence 16384 under `megago launch -n 4`
# (4 processes on this host, talking over TCP) at context parallelism CP = 4, 2 and 1,
# printing for each CP every rank's peak RSS and peak tensor bytes, the first and last
# losses and the time per iteration.
#
# Model: 2 layers, hidden 64, 4 heads, vocabulary 8192, learned positions up to 16384,
# float32 on the CPU; the example's other defaults (AdamW, lr 2e-3 → 1e-4 cosine, p2p ring
# attention). Each process is one rank; the world of 4 is CP × DP with DP = 4/CP, and every
# DP rank's micro-batch is one whole sequence of 16384 tokens, so each rank holds
# 16384/CP positions of one sequence:
#   CP 4: DP 1, global batch 1 (16,384 tokens an iteration), CP4_ITERS iterations (25)
#   CP 2: DP 2, global batch 2 (32,768 tokens), OTHER_ITERS iterations (5)
#   CP 1: DP 4, global batch 4 (65,536 tokens), OTHER_ITERS iterations (5)
# The global batch differs because DP does (a DP rank cannot hold less than one sequence);
# a rank's work in an iteration is 4/CP times CP 4's, so CP 2 and 1 run fewer iterations,
# enough for the memory peaks (every iteration allocates the same).
#
# Then, to separate what the layers hold from the embeddings, logits and loss, CP 4 and CP 1
# again with 4 layers for 1 iteration: the difference to the 2-layer peak is 2 layers'.
#
# "tensors peak" is the most bytes the rank's tensors ever held (tensor.PoolStats.Peak);
# "parameters, gradients and optimizer" what they hold after the run, "activations" the
# difference. Run from anywhere: bash examples/gpt/long_context.sh. Its output on 2 cores is
# examples/gpt/results/long-context.txt.
set -euo pipefail
cd "$(dirname "$0")/../.."
cp4_iters="${CP4_ITERS:-25}"
other_iters="${OTHER_ITERS:-5}"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
go build -o "$dir/megago" ./cmd/megago
go build -o "$dir/gpt" ./examples/gpt

seq=16384
common=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length "$seq"
	--max-position-embeddings "$seq" --micro-batch-size 1 --log-interval 1 --eval-interval 0
	--eval-iters 0 --gen-tokens 0)

echo "Long context, examples/gpt/long_context.sh, started $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(free -g | awk '/Mem:/ {print $2 " GiB"}'), $(go version | cut -d' ' -f3-), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "each run (DIR a temporary directory; megago and gpt built there by go build):"
echo "  DIR/megago launch -n 4 -- DIR/gpt ${common[*]} --context-parallel-size CP --global-batch-size 4/CP --train-iters N --out-dir DIR/cpCP"
echo

for cp in 4 2 1; do
	iters="$other_iters"
	[[ "$cp" == 4 ]] && iters="$cp4_iters"
	log="$dir/cp$cp.log"
	if ! "$dir/megago" launch -n 4 -- "$dir/gpt" "${common[@]}" --context-parallel-size "$cp" \
		--global-batch-size $((4 / cp)) --train-iters "$iters" --out-dir "$dir/cp$cp" >"$log" 2>&1; then
		echo "CP $cp failed:" >&2
		tail -n 30 "$log" >&2
		exit 1
	fi
	echo "== CP $cp, DP $((4 / cp)), global batch $((4 / cp)) × $seq tokens, $iters iterations"
	grep '\] layout:' "$log" | sed 's/^\[rank 0\] /  /'
	grep '\] memory:' "$log" | sed 's/^\[rank 0\] /  /'
	# losses and the seconds per iteration from the progress lines ("elapsed M:SS"), after the first.
	grep '\] iter ' "$log" | awk -v cp="$cp" '
		{ for (i = 1; i <= NF; i++) { if ($i == "loss") l = $(i + 1); if ($i == "elapsed") { split($(i + 1), t, ":"); s = t[1] * 60 + t[2] } } }
		NR == 1 { l1 = l; s1 = s } { ln = l; sn = s; n = NR; all = all " " l }
		END { printf "  loss: first %s, last %s over %d iterations\n  losses:%s\n", l1, ln, n, all
		      if (n > 1) printf "  time: %.1f s per iteration (iterations 2-%d)\n", (sn - s1) / (n - 1), n }'
	echo
done

echo "== 4 layers instead of 2, 1 iteration: rank 0's tensors (the other ranks' are within 1%)"
for cp in 4 1; do
	log="$dir/cp$cp-4layers.log"
	if ! "$dir/megago" launch -n 4 -- "$dir/gpt" "${common[@]}" --num-layers 4 --context-parallel-size "$cp" \
		--global-batch-size $((4 / cp)) --train-iters 1 --out-dir "$dir/cp$cp-4layers" >"$log" 2>&1; then
		echo "CP $cp with 4 layers failed:" >&2
		tail -n 30 "$log" >&2
		exit 1
	fi
	echo "  CP $cp: $(grep -m1 '\] memory: rank 0' "$log" | sed 's/^\[rank 0\] memory: //')"
done
