package serve

import (
	"context"
	"math"
	"slices"
	"time"

	"megago/nn"
)

// seq is one request inside the engine: its tokens (prompt, then generated), how many of
// them are in its cache slot, and its event stream.
type seq struct {
	ctx    context.Context
	req    Request
	out    chan Event // capacity for every event it can send, so the scheduler never blocks
	slot   int
	tokens []int32 // prompt + generated
	fed    int     // tokens[:fed] have keys and values in the slot
	topP   float64 // the current top-p (Megatron's top_p_decay lowers it)

	promptLP    []float32 // log p(prompt[i] | prompt[:i]), i = 1..fed−1, while prefilling
	submitted   time.Time
	first       time.Time // when the first token (or the prompt logprobs) went out
	promptSent  bool
	done        bool // finish has run
	generations int
}

// newSeq returns the engine's record of r, submitted now.
func newSeq(ctx context.Context, r Request) *seq {
	return &seq{ctx: ctx, req: r, out: make(chan Event, r.MaxNewTokens+2), slot: -1,
		tokens: append(make([]int32, 0, len(r.Prompt)+r.MaxNewTokens), r.Prompt...),
		topP:   r.Sampling.TopP, submitted: time.Now()}
}

// prefilling reports whether some prompt tokens are not in the cache yet.
func (s *seq) prefilling() bool { return s.fed < len(s.req.Prompt) }

// pending returns the tokens to feed: the rest of the prompt, or the last generated one.
func (s *seq) pending() []int32 { return s.tokens[s.fed:] }

// finish sends the Done event and closes the stream.
func (s *seq) finish(reason string, err error) {
	now := time.Now()
	if s.first.IsZero() {
		s.first = now
	}
	s.out <- Event{Done: true, FinishReason: reason, Err: err, Stats: Stats{
		PromptTokens: len(s.req.Prompt), GeneratedTokens: s.generations,
		TimeToFirst: s.first.Sub(s.submitted), Total: now.Sub(s.submitted)}}
	close(s.out)
	s.done = true
}

// promptLogprobs returns the prompt log-probabilities in rows, the logits [V] of s's
// positions from..from+len(rows)−1, for the positions that predict a prompt token.
func promptLogprobs(s *seq, from int, rows [][]float64) []float32 {
	var lp []float32
	for j, row := range rows {
		if next := from + j + 1; next < len(s.req.Prompt) {
			lp = append(lp, float32(logprobOf(row, s.req.Prompt[next])))
		}
	}
	return lp
}

// banned returns logits [V] with the ids that Request.Ban forbids now set to −Inf (a
// copy), or logits itself when nothing is banned.
func (s *seq) banned(logits []float64) []float64 {
	r := s.req
	if r.Ban == nil {
		return logits
	}
	ban := r.Ban(s.tokens[len(r.Prompt):])
	if len(ban) == 0 {
		return logits
	}
	pick := append([]float64(nil), logits...)
	for _, id := range ban {
		if id >= 0 && int(id) < len(pick) {
			pick[id] = math.Inf(-1)
		}
	}
	return pick
}

// choose returns the token that follows logits [V], drawn from pick (logits after
// banned), with its log-probability and most likely alternatives when the request asks
// for them. It only reads s, so that advance runs it for several requests at once.
func (s *seq) choose(pick, logits []float64) (Token, error) {
	r := s.req
	o := nn.GenerateOptions{MaxNewTokens: 1, Temperature: r.Sampling.Temperature, TopK: r.Sampling.TopK,
		TopP: s.topP, Seed: r.Sampling.Seed}
	id, err := o.NextToken(pick, s.generations, 0)
	if err != nil {
		return Token{}, err
	}
	tok := Token{ID: id}
	if r.Logprobs {
		tok.Logprob = float32(logprobOf(logits, id))
	}
	if r.TopLogprobs > 0 {
		tok.Top = topLogprobs(logits, r.TopLogprobs)
	}
	return tok, nil
}

// emit sends and appends tok, the request's next token, and reports whether the request
// is finished (and with what reason).
func (s *seq) emit(tok Token) (done bool, reason string) {
	r := s.req
	if s.first.IsZero() {
		s.first = time.Now()
	}
	s.tokens = append(s.tokens, tok.ID)
	s.generations++
	s.out <- Event{Token: &tok}
	if p := r.Sampling; s.topP > 0 && p.TopPDecay > 0 { // Megatron's top_p_decay and top_p_bound
		s.topP *= p.TopPDecay
		if p.TopPBound > 0 {
			s.topP = max(s.topP, p.TopPBound)
		}
	}
	gen := s.tokens[len(r.Prompt):]
	switch {
	case slices.Contains(r.StopIDs, tok.ID) || (r.Stop != nil && r.Stop(gen)):
		return true, "stop"
	case s.generations >= r.MaxNewTokens:
		return true, "length"
	}
	return false, ""
}

// logSumExp returns log Σ exp(x) over x [V].
func logSumExp(x []float64) float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = max(m, v)
	}
	s := 0.0
	for _, v := range x {
		s += math.Exp(v - m)
	}
	return m + math.Log(s)
}

// logprobOf returns log softmax(logits)[id].
func logprobOf(logits []float64, id int32) float64 { return logits[id] - logSumExp(logits) }

// topLogprobs returns the n most likely ids of logits [V] with their log-probabilities,
// most likely first (ties by id). It keeps the best n in one pass instead of sorting V.
func topLogprobs(logits []float64, n int) []TokenLogprob {
	n = min(n, len(logits))
	top := make([]int, 0, n) // ids, most likely first
	for id, x := range logits {
		if n == 0 || len(top) == n && x <= logits[top[n-1]] {
			continue
		}
		i := len(top)
		if i < n {
			top = append(top, 0)
		} else {
			i = n - 1
		}
		for ; i > 0 && x > logits[top[i-1]]; i-- {
			top[i] = top[i-1]
		}
		top[i] = id
	}
	lse := logSumExp(logits)
	out := make([]TokenLogprob, len(top))
	for i, id := range top {
		out[i] = TokenLogprob{ID: int32(id), Logprob: float32(logits[id] - lse)}
	}
	return out
}
