#!/usr/bin/env bash
# cuda/gpucheck/run.sh: the GPU checks of package cuda, on a machine with an NVIDIA GPU and
# no Go, in about 5 minutes. Build first, where Go is: bash cuda/gpucheck/build.sh. Then,
# from the repository root of a copy of the tree that has cuda/gpucheck/bin:
#
#   OUT=/some/dir bash cuda/gpucheck/run.sh
#
# Everything goes under $OUT (default ./gpucheck-out): results.md (the summary), the logs
# of each step and the JSON lines of the benchmarks. Libraries: libcuda from the driver;
# cuBLASLt, NVRTC and NCCL from CUDA_HOME, LD_LIBRARY_PATH, the system, or the nvidia/*/lib
# folders of the Python wheels PyTorch installs (found here through python3). Steps:
#   1. nvidia-smi and what the cuda package finds (TestGPUReport);
#   2. the GPU tests (MEGAGO_REQUIRE_GPU=1: skips become failures): the op suite against
#      the CPU backend, fused kernels against their CPU twins, flash attention, the
#      optimizer kernels, GPT training fp32/bf16 against the CPU, NCCL at world size 1
#      (multi-GPU NCCL runs when there are several GPUs);
#   3. the gpt example on the GPU (fp32 and bf16, TP=2 goroutine ranks sharing the GPU)
#      beside the same run on this machine's CPU, losses side by side;
#   4. megago bench gpt --device cuda --bf16 beside bench/torch_gpt.py --device cuda
#      --amp-bf16 for GPT-2 124M (B 16 × T 1024) and 350M, with MFU against 989 TFLOP/s.
# Each step has a time limit, so one that hangs cannot take the rest of the budget.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/gpucheck-out}"
mkdir -p "$OUT"
BIN=cuda/gpucheck/bin
t0=$(date +%s)
log() { echo "[$(($(date +%s) - t0))s] $*" | tee -a "$OUT/progress.log"; }

if [[ ! -x "$BIN/cuda.test" || ! -x "$BIN/megago" || ! -x "$BIN/gpt" ]]; then
	echo "missing $BIN: run cuda/gpucheck/build.sh where Go is and carry $BIN here" >&2
	exit 2
fi

# A fresh kernel cache holding the prebuilt CUBINs (used when this machine has no NVRTC).
export XDG_CACHE_HOME="$OUT/cache"
mkdir -p "$XDG_CACHE_HOME/megago"
rm -rf "$XDG_CACHE_HOME/megago/cuda"
cp -r "$BIN/kernels" "$XDG_CACHE_HOME/megago/cuda"

# The wheels' library folders, for every Python site this machine has.
if command -v python3 >/dev/null 2>&1; then
	wheel_dirs=$(timeout 60 python3 - <<'EOF' 2>/dev/null
import glob, os, site, sys
roots = list(sys.path)
try:
    roots += site.getsitepackages() + [site.getusersitepackages()]
except Exception:
    pass
dirs = []
for r in roots:
    dirs += sorted(glob.glob(os.path.join(r, "nvidia", "*", "lib")))
try:
    import torch
    dirs.append(os.path.join(os.path.dirname(torch.__file__), "lib"))
except Exception:
    pass
print(":".join(dict.fromkeys(d for d in dirs if os.path.isdir(d))))
EOF
	)
	export MEGAGO_CUDA_LIBS="${wheel_dirs:-}"
fi

log "1. environment"
timeout 30 nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || echo "nvidia-smi failed" >>"$OUT/nvidia-smi.txt"
timeout 60 python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))' \
	>"$OUT/torch.txt" 2>&1 || echo "no PyTorch with CUDA" >>"$OUT/torch.txt"
timeout 60 "$BIN/cuda.test" -test.v -test.run 'TestGPUReport$' >"$OUT/report.log" 2>&1

log "2. GPU tests"
MEGAGO_REQUIRE_GPU=1 timeout 170 "$BIN/cuda.test" -test.v -test.timeout 165s \
	-test.run 'TestGPU|TestNCCL' >"$OUT/cuda-test.log" 2>&1
test_rc=$?
log "   tests exit status $test_rc"

# The gpt example: 4 layers, hidden 256, 40 iterations (45 s at most each) on the corpus
# build.sh prepared, TP=2 as two goroutine ranks (on the GPU both share it, each with its own stream; NCCL refuses
# two ranks of one communicator on one GPU, so they talk through the in-process transport).
data=$(ls "$BIN"/data/*/*.idx 2>/dev/null | head -n 1)
gpt_args=(--data-path "${data%.idx}" --cache-dir "$OUT/gpt-cache" --num-layers 4 --hidden-size 256
	--num-attention-heads 4 --seq-length 256 --micro-batch-size 8 --global-batch-size 16 --train-iters 40
	--lr 3e-4 --lr-warmup-iters 10 --eval-interval 40 --eval-iters 4 --log-interval 10 --gen-tokens 32
	--tensor-model-parallel-size 2 --ranks 2)
for run in cpu cuda-fp32 cuda-bf16; do
	log "3. gpt example: $run"
	flags=()
	case $run in
	cuda-fp32) flags=(--device cuda) ;;
	cuda-bf16) flags=(--device cuda --bf16) ;;
	esac
	timeout 45 "$BIN/gpt" "${gpt_args[@]}" "${flags[@]}" --out-dir "$OUT/gpt-$run" >"$OUT/gpt-$run.log" 2>&1
	echo "exit $?" >>"$OUT/gpt-$run.log"
done

# bench_pair name args...: megago and PyTorch on the same workload, 50 s each.
bench_pair() {
	local name=$1
	shift
	log "4. bench $name: megago"
	timeout 50 "$BIN/megago" bench gpt --device cuda --bf16 --threads 0 "$@" \
		>"$OUT/megago-$name.json" 2>"$OUT/megago-$name.log"
	echo "exit $?" >>"$OUT/megago-$name.log"
	log "4. bench $name: PyTorch eager"
	timeout 50 python3 bench/torch_gpt.py --device cuda --amp-bf16 --foreach --threads 4 "$@" \
		>"$OUT/torch-$name.json" 2>"$OUT/torch-$name.log"
	echo "exit $?" >>"$OUT/torch-$name.log"
}
bench_pair gpt2-124M --layers 12 --dim 768 --heads 12 --vocab 50257 --block 1024 --seq 1024 --batch 16 --steps 4 --warmup 1
bench_pair gpt2-350M --layers 24 --dim 1024 --heads 16 --vocab 50257 --block 1024 --seq 1024 --batch 8 --steps 3 --warmup 1

log "5. summary"
{
	echo "# megago cuda GPU check"
	echo
	echo '```'
	head -n 12 "$OUT/nvidia-smi.txt"
	cat "$OUT/torch.txt"
	grep -E 'report_test.go' "$OUT/report.log" | sed 's/^ *report_test.go:[0-9]*: //'
	echo '```'
	echo
	echo "## Tests (exit status $test_rc)"
	echo
	echo '```'
	grep -E '^(--- |ok|FAIL|PASS|panic)|^    --- (FAIL|SKIP)' "$OUT/cuda-test.log" | head -n 80
	echo '```'
	echo
	echo "## The gpt example: CPU beside the GPU (TP=2 goroutine ranks, training loss every 10 iterations)"
	echo
	echo '```'
	for run in cpu cuda-fp32 cuda-bf16; do
		printf '%-10s' "$run"
		grep '"kind":"train"' "$OUT/gpt-$run/metrics.jsonl" 2>/dev/null |
			sed 's/.*"iteration":\([0-9]*\).*"lm_loss":\([-0-9.eE+]*\).*/\1 \2/' |
			awk '$1 % 10 == 0 { printf " %8.4f", $2 } END { if (NR == 0) printf " failed: see gpt-'"$run"'.log" }'
		echo
	done
	grep -h "tok/s overall" "$OUT"/gpt-*.log | sed 's/^/    /'
	echo '```'
	echo
	echo "## Benchmarks (bf16, tokens/s; MFU = model FLOP/s ÷ 989 TFLOP/s)"
	echo
	if command -v python3 >/dev/null 2>&1; then
		python3 - "$OUT" <<'EOF'
import json, sys, os
out = sys.argv[1]
print("| workload | system | ms/step | tokens/s | MFU | last loss |")
print("|---|---|---|---|---|---|")
for name in ("gpt2-124M", "gpt2-350M"):
    rows = {}
    for sysname in ("megago", "torch"):
        path = os.path.join(out, f"{sysname}-{name}.json")
        try:
            line = [l for l in open(path) if l.strip().startswith("{")][-1]
            r = json.loads(line)
        except Exception:
            print(f"| {name} | {sysname} | failed (see {sysname}-{name}.log) | | | |")
            continue
        rows[sysname] = r
        mfu = r.get("gflops", 0) / 989000 * 100
        print(f"| {name} | {r.get('system', sysname)} | {r.get('ms_step_median')} | {r.get('tokens_per_s')} | {mfu:.1f}% | {r.get('last_loss')} |")
    if "megago" in rows and "torch" in rows and rows["torch"].get("tokens_per_s"):
        print(f"| {name} | megago / PyTorch | | {rows['megago']['tokens_per_s'] / rows['torch']['tokens_per_s']:.2f}× | | |")
EOF
	else
		cat "$OUT"/megago-*.json "$OUT"/torch-*.json
	fi
	echo
	echo "Total time: $(($(date +%s) - t0)) s."
} >"$OUT/results.md"
log "done: $OUT/results.md"
cat "$OUT/results.md"
