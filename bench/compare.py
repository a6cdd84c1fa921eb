#!/usr/bin/env python3
r"""Run megago and its peers back to back on this machine and print the ratios.

  /usr/bin/python3 bench/compare.py                 # W2, W1, W3 and SGEMM 2048^3, 3 rounds each
  /usr/bin/python3 bench/compare.py --only W2 --rounds 5 --json results.json
  /usr/bin/python3 bench/compare.py --only W4       # mixture of experts beside PyTorch

Needs Go (to build megago) and Debian's python3-torch and python3-numpy
(apt-get install python3-torch python3-numpy; run with /usr/bin/python3).

What it runs, in alternating rounds so that both sides see the same machine
(BENCHMARKS.md):
  W1-W4    megago bench gpt  vs  bench/torch_gpt.py (PyTorch eager,
           OMP_WAIT_POLICY=PASSIVE), 2 threads each, the same flags; each
           process's peak RSS is read from wait4's rusage. Debian's PyTorch
           does its matrix products with the system BLAS (OpenBLAS), so it
           too runs with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset.
  SGEMM    go test -bench 'Sgemm/2048x2048x2048$' ./tensor (GOMAXPROCS=2)  vs
           bench/gemm_peak.py --lib numpy --threads 2 --n 2048 (OpenBLAS), run
           with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset.
  SHAPES   every shape of BenchmarkSgemm (the workloads' GEMMs, names
           [B x]M x K x N with NN/NT/TN transposes) vs numpy matmul of the same
           shapes and transposes (views .T, stacks for batches), same settings.
W3 (seq 2048) also runs megago bench gpt --unfused (attention through the
whole [B, NH, T, T] score matrix, unfused norms and activations): its rows
"fused / unfused" compare megago with itself. When SGEMM runs too, each
workload's model GFLOP/s is divided by megago's SGEMM GFLOP/s of the run.
The table shows medians over the rounds and megago/peer ratios: for times
(ms, MB) below 1 is better, for GFLOP/s above 1 is better.

torch_gpt.py and gemm_peak.py are copies of the project's shared peer scripts.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

WORKLOADS = {
    "W2": ["--layers", "4", "--dim", "256", "--heads", "4", "--vocab", "8192", "--seq", "256",
           "--batch", "8", "--steps", "20"],
    "W1": ["--layers", "12", "--dim", "768", "--heads", "12", "--vocab", "50257", "--block", "1024",
           "--seq", "64", "--batch", "4", "--steps", "10"],
    "W3": ["--layers", "4", "--dim", "256", "--heads", "4", "--vocab", "8192", "--seq", "2048",
           "--batch", "2", "--steps", "5"],
    # W4: W2 with each MLP replaced by 8 experts of hidden 512, top-2 routing, aux loss 1e-2.
    "W4": ["--layers", "4", "--dim", "256", "--heads", "4", "--vocab", "8192", "--seq", "256",
           "--batch", "8", "--steps", "20", "--num-experts", "8", "--moe-ffn-hidden-size", "512",
           "--moe-router-topk", "2", "--moe-aux-loss-coeff", "1e-2"],
}
# MEGAGO_ONLY are flags only megago's side takes (PyTorch's SequentialMLP loops over the
# experts; megago runs them as one grouped GEMM, Megatron's --moe-grouped-gemm).
MEGAGO_ONLY = {"W4": ["--moe-grouped-gemm"]}
# UNFUSED lists the workloads also run with megago's unfused reference ops (megago bench gpt
# --unfused: attention through the [B, NH, T, T] score matrix, norms, activations and dropout
# as separate ops), so the fused step is compared with the unfused one in the same run.
UNFUSED = {"W3"}
STEP_FIELDS = ["ms_step_median", "ms_fwd_median", "ms_bwd_median", "ms_update_median", "peak_rss_mb", "gflops"]


def run(cmd, env=None):
    """Runs cmd, returns (stdout, peak RSS in MB of the process tree's largest child)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    out = p.stdout.read().decode()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit(f"compare.py: {' '.join(cmd)} exited with {p.returncode}")
    return out, ru.ru_maxrss / 1024


def last_json(out):
    return json.loads(out.strip().splitlines()[-1])


def step_round(megago, name, threads, peer=True):
    args = WORKLOADS[name] + ["--threads", str(threads)]
    out, rss = run([megago, "bench", "gpt"] + args + MEGAGO_ONLY.get(name, []))
    ours = last_json(out)
    ours.setdefault("peak_rss_mb", round(rss, 1))
    if name in UNFUSED:
        out, rss = run([megago, "bench", "gpt", "--unfused"] + args)
        unfused = last_json(out)
        ours["unfused_ms_step_median"] = unfused["ms_step_median"]
        ours["unfused_peak_rss_mb"] = unfused.get("peak_rss_mb", round(rss, 1))
    if not peer:
        return ours, dict.fromkeys(ours, float("nan"))
    env = dict(openblas_env(), OMP_WAIT_POLICY="PASSIVE")
    out, rss = run(["/usr/bin/python3", os.path.join(HERE, "torch_gpt.py")] + args, env)
    peer = last_json(out)
    peer["peak_rss_mb"] = round(rss, 1)
    return ours, peer


def openblas_env():
    """The environment without the variables that slow current OpenBLAS builds."""
    return {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}


def sgemm_round(threads, peer=True):
    env = dict(os.environ, GOMAXPROCS=str(threads))
    out, _ = run(["go", "test", "-run", "^$", "-bench", "Sgemm/2048x2048x2048$", "-benchtime", "20x", "./tensor"], env)
    m = re.search(r"([\d.]+) GFLOP/s", out)
    if not m:
        sys.exit("compare.py: no GFLOP/s in the go test -bench output:\n" + out)
    ours = {"gflops": float(m.group(1))}
    if not peer:
        return ours, {"gflops": float("nan")}
    out, _ = run(["/usr/bin/python3", os.path.join(HERE, "gemm_peak.py"), "--lib", "numpy", "--threads",
                  str(threads), "--n", "2048"], openblas_env())
    peer = {"gflops": last_json(out)["gflops_median"]}
    return ours, peer


SHAPE_RE = re.compile(r"Sgemm/(\w*?_)?(?:(\d+)x)?(\d+)x(\d+)x(\d+)(?:_(NN|NT|TN))?-\d+\s+\d+\s+[\d.]+ ns/op\s+([\d.]+) GFLOP/s")

# NUMPY_SHAPES times numpy matmul for shapes given as JSON [name, batch, m, k, n, trans].
NUMPY_SHAPES = r"""
import ctypes, json, statistics, sys, time
import numpy as np
threads = int(sys.argv[1])
for name in ("libopenblas.so.0", "/usr/lib/x86_64-linux-gnu/libblas.so.3"):
    try:
        ctypes.CDLL(name).openblas_set_num_threads(threads)
        break
    except (OSError, AttributeError):
        pass
rng = np.random.default_rng(0)
out = {}
for name, b, m, k, n, tr in json.loads(sys.argv[2]):
    a = rng.standard_normal((b, k, m) if tr == "TN" else (b, m, k), dtype=np.float32)
    w = rng.standard_normal((b, n, k) if tr == "NT" else (b, k, n), dtype=np.float32)
    a = a.transpose(0, 2, 1) if tr == "TN" else a
    w = w.transpose(0, 2, 1) if tr == "NT" else w
    if b == 1:
        a, w = a[0], w[0]
    f = lambda: np.matmul(a, w)
    f(); f()
    reps = max(3, min(30, int(2e10 / (2.0 * b * m * k * n))))
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
    out[name] = 2.0 * b * m * k * n / statistics.median(ts) / 1e9
print(json.dumps(out))
"""


def shapes_round(threads):
    """BenchmarkSgemm's shapes, megago and numpy: {name: GFLOP/s} each."""
    env = dict(os.environ, GOMAXPROCS=str(threads))
    out, _ = run(["go", "test", "-run", "^$", "-bench", "^BenchmarkSgemm$/", "-benchtime", "10x", "./tensor"], env)
    ours, shapes = {}, []
    for m in SHAPE_RE.finditer(out):
        prefix, b, mm, k, n, tr, gf = m.groups()
        name = (prefix or "") + "x".join(x for x in (b, mm, k, n) if x) + ("_" + tr if tr else "")
        ours[name] = float(gf)
        shapes.append([name, int(b or 1), int(mm), int(k), int(n), tr or "NN"])
    if not shapes:
        sys.exit("compare.py: no Sgemm shapes in the go test -bench output:\n" + out)
    out, _ = run(["/usr/bin/python3", "-c", NUMPY_SHAPES, str(threads), json.dumps(shapes)], openblas_env())
    return ours, last_json(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", choices=["W1", "W2", "W3", "W4", "SGEMM", "SHAPES"],
                    help="run only these (repeatable); default all")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of each (medians reported)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-peer", action="store_true",
                    help="run megago's side only (W and SGEMM rows; the peer columns print nan)")
    ap.add_argument("--json", default="", help="also write every run's results to this file")
    a = ap.parse_args()
    todo = a.only or ["W2", "W1", "W3", "SGEMM", "SHAPES"]

    tmp = tempfile.mkdtemp(prefix="megago-bench-")
    megago = os.path.join(tmp, "megago")
    subprocess.run(["go", "build", "-o", megago, "./cmd/megago"], cwd=ROOT, check=True)

    results, rows = {}, []
    for name in todo:
        runs = []
        for r in range(a.rounds):
            if name == "SHAPES":
                ours, peer = shapes_round(a.threads)
            elif name == "SGEMM":
                ours, peer = sgemm_round(a.threads, not a.no_peer)
            else:
                ours, peer = step_round(megago, name, a.threads, not a.no_peer)
            runs.append({"megago": ours, "peer": peer})
            print(f"{name} round {r + 1}/{a.rounds}: megago {summary(ours)} | peer {summary(peer)}",
                  file=sys.stderr, flush=True)
        results[name] = runs
        fields = {"SGEMM": ["gflops"], "SHAPES": sorted(runs[0]["megago"])}.get(name, STEP_FIELDS)
        for f in fields:
            ours = statistics.median(x["megago"][f] for x in runs)
            peer = statistics.median(x["peer"][f] for x in runs)
            rows.append((name, f, ours, peer, ours / peer if peer else float("nan"), None))
        if name in UNFUSED:
            for f in ("ms_step_median", "peak_rss_mb"):
                fused = statistics.median(x["megago"][f] for x in runs)
                unfused = statistics.median(x["megago"]["unfused_" + f] for x in runs)
                rows.append((name, f + " (fused / unfused)", fused, unfused, fused / unfused, "megago --unfused"))

    # Model FLOP/s of each step as a fraction of the same run's SGEMM GFLOP/s (megago's).
    if "SGEMM" in results:
        sgemm = statistics.median(x["megago"]["gflops"] for x in results["SGEMM"])
        for name in todo:
            if name in WORKLOADS:
                gf = statistics.median(x["megago"]["gflops"] for x in results[name])
                rows.append((name, "model GFLOP/s / SGEMM GFLOP/s", gf, sgemm, gf / sgemm, "megago SGEMM 2048^3"))

    peer_names = {"SGEMM": "OpenBLAS (numpy)", "SHAPES": "OpenBLAS (numpy)"}
    print(f"{'workload':8} {'measure':30} {'megago':>10} {'peer':>10} {'ratio':>7}  peer")
    for name, f, ours, peer, ratio, peer_name in rows:
        peer_name = peer_name or peer_names.get(name, "PyTorch eager")
        print(f"{name:8} {f:30} {ours:10.1f} {peer:10.1f} {ratio:7.2f}  {peer_name}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(results, fh, indent=1)


def summary(r):
    if r.get("ms_step_median") != r.get("ms_step_median"):  # nan: no peer run
        return "not run"
    if "ms_step_median" in r:
        return f"{r['ms_step_median']:.0f} ms/step, {r['peak_rss_mb']:.0f} MB"
    if "gflops" in r:
        return f"{r['gflops']:.0f} GFLOP/s"
    return f"{len(r)} shapes, GFLOP/s"


if __name__ == "__main__":
    main()
