#!/usr/bin/env bash
# .ci/serve.sh: megago serve end to end, on 127.0.0.1 only. Trains a tiny GPT with the gpt
# example (a few seconds) and serves it with `megago serve`: greedy PUT /api answers of a
# server at TP=2 (goroutine ranks, and processes under megago launch) equal those at
# TP=1; the official openai npm client lists models, completes, chat-completes and streams
# (serve/testdata/clients/openai.mjs); curl -X PUT /api gets Megatron's response shape;
# lm-evaluation-harness's loglikelihood request gets log-probabilities and alternatives at
# the prompt's positions; playwright-core drives Debian's chromium through the web page,
# streaming a completion and taking a screenshot (to $SERVE_SCREENSHOT if set: the
# README's docs/serve-web.png was made so); SIGTERM during a streamed request lets it
# finish and the server exit 0; 30 clients at once against 4 slots and a queue of 4 get
# 200 or 429. Installs curl, Node.js, npm and chromium from Debian if missing, and the clients
# with npm ci. Run by .ci/run from the repository root; about 30 s once the packages are
# installed.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="$(mktemp -d)"
pid=""
cleanup() {
	if [[ -n $pid ]]; then kill "$pid" 2>/dev/null || true; fi
	rm -rf "$dir"
}
trap cleanup EXIT

sudo_cmd=""
if [[ "$(id -u)" != 0 ]]; then sudo_cmd="sudo"; fi
missing=()
command -v curl >/dev/null 2>&1 || missing+=(curl ca-certificates)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
[[ -x /usr/bin/chromium ]] || missing+=(chromium)
if ((${#missing[@]})); then
	echo "installing ${missing[*]} from Debian"
	$sudo_cmd apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi
(cd serve/testdata/clients && npm ci --no-audit --no-fund --loglevel=error)

go build -o "$dir/megago" ./cmd/megago
go build -o "$dir/gpt" ./examples/gpt
"$dir/gpt" --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 512 \
	--micro-batch-size 4 --global-batch-size 8 --train-iters 30 --lr 3e-3 --lr-warmup-iters 2 --eval-iters 1 \
	--eval-interval 30 --log-interval 10 --gen-tokens 4 --save "$dir/ckpt" --out-dir "$dir/out" >"$dir/train.log" 2>&1 ||
	{ cat "$dir/train.log"; exit 1; }

# serve_args: the arguments of megago serve on the trained checkpoint, on a free port.
serve_args=(serve --load "$dir/ckpt" --served-model-name tiny-gpt --tokenizer-type gosource-bpe
	--host 127.0.0.1 --port 0 --inference-max-requests 4 --inference-max-queue 4)

# start_server LOG ARGS...: starts megago serve on a free port of 127.0.0.1, logging to LOG;
# sets pid and url.
start_server() {
	local log="$1"
	shift
	"$dir/megago" "${serve_args[@]}" "$@" >"$log" 2>&1 &
	pid=$!
	wait_url "$log"
}

# wait_url LOG: waits for the server of pid to log its URL (under megago launch, rank 0's
# line) and sets url.
wait_url() {
	local log="$1"
	url=""
	for _ in $(seq 600); do
		url="$(sed -n 's|^\(\[rank 0\] \)\{0,1\}serving .* on \(http://127\.0\.0\.1:[0-9]*\)/$|\2|p' "$log")"
		[[ -n $url ]] && return
		kill -0 "$pid" 2>/dev/null || { cat "$log"; exit 1; }
		sleep 0.1
	done
	echo "megago serve did not start"
	cat "$log"
	exit 1
}

echo "--- greedy /api answers at TP=2 (goroutine ranks, and processes under megago launch) equal TP=1's"
greedy='{"prompts": ["func main() {", "type T struct"], "tokens_to_generate": 16, "top_k": 1}'
start_server "$dir/tp2.log" --tensor-model-parallel-size 2
head -n 1 "$dir/tp2.log"
curl -sS --fail-with-body -X PUT "$url/api" -H 'Content-Type: application/json' -d "$greedy" >"$dir/tp2.json"
kill -TERM "$pid"
wait "$pid"
"$dir/megago" launch -n 2 -- "$dir/megago" "${serve_args[@]}" --tensor-model-parallel-size 2 >"$dir/tp2p.log" 2>&1 &
pid=$!
wait_url "$dir/tp2p.log"
head -n 1 "$dir/tp2p.log"
curl -sS --fail-with-body -X PUT "$url/api" -H 'Content-Type: application/json' -d "$greedy" >"$dir/tp2p.json"
kill -TERM "$pid"
wait "$pid" || true # launch reports the forwarded SIGTERM
start_server "$dir/serve.log"
curl -sS --fail-with-body -X PUT "$url/api" -H 'Content-Type: application/json' -d "$greedy" >"$dir/tp1.json"
if cmp -s "$dir/tp1.json" "$dir/tp2.json" && cmp -s "$dir/tp1.json" "$dir/tp2p.json"; then
	echo "1 passed, 0 failed"
else
	echo "0 passed, 1 failed: TP=1, TP=2 (goroutines) and TP=2 (processes) answer differently:"
	cat "$dir/tp1.json" "$dir/tp2.json" "$dir/tp2p.json"
	exit 1
fi
head -n 1 "$dir/serve.log"

echo "--- the openai npm client against megago serve"
node serve/testdata/clients/openai.mjs "$url"

echo "--- curl -X PUT $url/api"
curl -sS --fail-with-body -X PUT "$url/api" -H 'Content-Type: application/json' \
	-d '{"prompts": ["func main() {"], "tokens_to_generate": 8, "logprobs": true, "temperature": 0.5, "random_seed": 3}' >"$dir/api.json"
head -c 400 "$dir/api.json"
echo
node -e '
	const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
	const keys = Object.keys(r).sort().join(",");
	const ok = keys === "logprobs,segments,text,tokens" && r.text.length === 1 && r.text[0].startsWith("func main() {") &&
		r.segments[0].length === r.tokens[0].length && r.logprobs[0].length === r.tokens[0].length - 1;
	console.log(ok ? "1 passed, 0 failed" : "0 passed, 1 failed: keys " + keys);
	process.exit(ok ? 0 : 1);' "$dir/api.json"

echo "--- lm-evaluation-harness's loglikelihood request: echo, logprobs 1, max_tokens 1"
curl -sS --fail-with-body -X POST "$url/v1/completions" -H 'Content-Type: application/json' \
	-d '{"model": "tiny-gpt", "prompt": ["func main() {", "type T struct"], "temperature": 0, "max_tokens": 1, "logprobs": 1, "seed": 1234, "echo": true}' >"$dir/lmeval.json"
node -e '
	// lm_eval/models/openai_completions.py parse_logprobs, with ctxlen 1
	const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
	let ok = r.choices.length === 2;
	for (const c of r.choices) {
		const lp = c.logprobs.token_logprobs.slice(1, -1), top = c.logprobs.top_logprobs.slice(1, -1);
		ok = ok && lp.length > 0 && lp.every((v, k) => typeof v === "number" && top[k] && Math.max(...Object.values(top[k])) >= v);
	}
	console.log(ok ? "1 passed, 0 failed" : "0 passed, 1 failed: " + JSON.stringify(r).slice(0, 400));
	process.exit(ok ? 0 : 1);' "$dir/lmeval.json"

echo "--- the web page in chromium, driven by playwright-core"
node serve/testdata/clients/web.mjs "$url" "${SERVE_SCREENSHOT:-$dir/web.png}"

echo "--- 30 clients at once against 4 slots and a queue of 4: the rest get 429, the server goes on"
clients=()
for i in $(seq 30); do
	curl -sS -o /dev/null -w '%{http_code}\n' --max-time 120 -X POST "$url/v1/completions" -H 'Content-Type: application/json' \
		-d '{"prompt": "func", "max_tokens": 64, "temperature": 0}' >"$dir/load.$i" &
	clients+=($!)
done
wait "${clients[@]}"
codes="$(cat "$dir"/load.* | sort | uniq -c | tr -s ' \n' ' ')"
echo "status codes (count code): $codes"
ok=$(grep -c '^200$' "$dir"/load.* | awk -F: '{ n += $2 } END { print n }')
busy=$(grep -c '^429$' "$dir"/load.* | awk -F: '{ n += $2 } END { print n }')
if ((ok < 8 || busy < 1 || ok + busy != 30)) || [[ "$(curl -sS "$url/health")" != '{"status":"ok"}' ]]; then
	echo "0 passed, 1 failed"
	exit 1
fi
echo "1 passed, 0 failed"

echo "--- SIGTERM while a request streams: it finishes, then the server exits 0"
curl -sS -N -X POST "$url/v1/completions" -H 'Content-Type: application/json' \
	-d '{"prompt": "func", "max_tokens": 300, "temperature": 0, "stream": true}' >"$dir/drain.txt" &
cpid=$!
for _ in $(seq 100); do [[ -s $dir/drain.txt ]] && break; sleep 0.05; done
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
pid=""
wait "$cpid"
tail -n 2 "$dir/serve.log"
if [[ $status != 0 ]] || ! grep -q '^data: \[DONE\]' "$dir/drain.txt" || ! grep -q '"finish_reason":"length"' "$dir/drain.txt"; then
	echo "0 passed, 1 failed: exit status $status, stream:"
	tail -c 300 "$dir/drain.txt"
	exit 1
fi
echo "1 passed, 0 failed"
