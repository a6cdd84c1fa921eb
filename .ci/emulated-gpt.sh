#!/usr/bin/env bash
# .ci/emulated-gpt.sh: the gpt example on the emulated GPU (MEGAGO_CUDA_EMU=1: package cuda's
# CUDA C kernels compiled for the CPU by g++, NCCL over host memory) with two goroutine ranks
# of tensor parallelism over NCCL, and two of expert parallelism (a mixture-of-experts model,
# the alltoall dispatcher over NCCL's grouped send/receive), each beside the same run on the
# CPU, in fp32 and bf16. Prints the losses side by side and fails when they differ by more than 1e-3 relative (fp32) or
# 3% (bf16). Run by .ci/run from the repository root; takes about a minute on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
go build -o "$dir/gpt" ./examples/gpt
common=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --micro-batch-size 2
	--global-batch-size 4 --train-iters 5 --lr 1e-3 --lr-warmup-iters 1 --eval-iters 1 --eval-interval 5
	--log-interval 1 --gen-tokens 4 --ranks 2)

# losses DIR: the training losses of metrics.jsonl, one per line.
losses() { grep '"kind":"train"' "$1/metrics.jsonl" | sed 's/.*"lm_loss":\([-0-9.eE+]*\).*/\1/'; }

status=0
for layout in tp2 ep2; do
args=("${common[@]}" --tensor-model-parallel-size 2)
if [[ $layout == ep2 ]]; then
	args=("${common[@]}" --num-experts 4 --moe-router-topk 2 --moe-grouped-gemm --moe-aux-loss-coeff 1e-2
		--expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall)
fi
"$dir/gpt" "${args[@]}" --out-dir "$dir/cpu-$layout" >"$dir/cpu.log" 2>&1 || { cat "$dir/cpu.log"; exit 1; }
for prec in fp32 bf16; do
	flags=(--device cuda --distributed-backend nccl)
	tol=1e-3
	if [[ $prec == bf16 ]]; then
		flags+=(--bf16)
		tol=0.03
	fi
	echo "gpt example, ${layout^^} goroutine ranks: CPU (fp32) vs emulated GPU ($prec, ${flags[*]})"
	if ! MEGAGO_CUDA_EMU=1 "$dir/gpt" "${args[@]}" "${flags[@]}" --out-dir "$dir/$prec-$layout" >"$dir/$prec.log" 2>&1; then
		cat "$dir/$prec.log"
		exit 1
	fi
	paste <(losses "$dir/cpu-$layout") <(losses "$dir/$prec-$layout") | awk -v tol="$tol" '
		BEGIN { printf "  %4s  %10s  %10s  %9s\n", "iter", "cpu", "emulated", "relative" }
		{ d = ($2 - $1) / $1; if (d < 0) d = -d
		  printf "  %4d  %10.5f  %10.5f  %9.2e%s\n", NR, $1, $2, d, (d > tol ? "  > " tol : "")
		  if (d > tol) bad = 1 }
		END { if (NR == 0) { print "  no losses"; exit 1 } exit bad }' || status=1
done
done
exit $status
