#!/usr/bin/env bash
# cuda/gpucheck/build.sh: builds, on a machine with Go (and NVRTC, e.g. Debian's libnvrtc11.2),
# what run.sh needs on a GPU machine without Go, into cuda/gpucheck/bin (about 40 MB):
#   bin/cuda.test   the cuda package's test binary (CGO_ENABLED=0 go test -c, stripped)
#   bin/megago      the megago command (bench gpt --device cuda), stripped
#   bin/gpt         the gpt example, stripped, and bin/data: its default corpus (this
#                   machine's Go sources) as a Megatron dataset, since the GPU machine has
#                   no Go installation to read them from
#   bin/kernels/    CUBINs of every kernel module for sm_80 and sm_90, used on the GPU
#                   machine when it has no NVRTC (its own NVRTC, when present, compiles)
# Then carry cuda/gpucheck/bin to the GPU machine with the working tree and run
# bash cuda/gpucheck/run.sh there.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=cuda/gpucheck/bin
rm -rf "$out"
mkdir -p "$out"
CGO_ENABLED=0 go test -c -ldflags='-s -w' -o "$out/cuda.test" ./cuda
CGO_ENABLED=0 go build -ldflags='-s -w' -o "$out/megago" ./cmd/megago
CGO_ENABLED=0 go build -ldflags='-s -w' -o "$out/gpt" ./examples/gpt
# One iteration of the example tokenizes the default corpus into bin/data.
"$out/gpt" --cache-dir "$out/data" --out-dir "$out/tmp-run" --train-iters 1 --eval-iters 1 \
	--num-layers 1 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --gen-tokens 1 >/dev/null
rm -rf "$out/tmp-run" "$out/data/index"
# The compile test writes each module's CUBIN to the kernel cache; point the cache here.
XDG_CACHE_HOME="$PWD/$out/xdg" MEGAGO_REQUIRE_NVRTC=1 go test -count=1 -run 'TestKernelsCompile$' ./cuda/internal/kernels
mv "$out/xdg/megago/cuda" "$out/kernels"
rm -rf "$out/xdg"
du -sh "$out"/*
