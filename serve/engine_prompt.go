package serve

import "time"

// promptTops holds, for each prefilling request that asks for PromptTopLogprobs, the most
// likely ids at its prompt positions so far, until sendPrompt sends them with the
// prompt's log-probabilities. Only the scheduler goroutine touches it.
type promptTops map[*seq][][]TokenLogprob

// promptTopsAt returns the PromptTopLogprobs most likely ids of rows, the logits [V] of
// s's positions from..from+len(rows)−1, for the positions that predict a prompt token
// (none when s does not ask for them). It only reads s (advance runs it for several
// requests at once); add records its result.
func promptTopsAt(s *seq, from int, rows [][]float64) [][]TokenLogprob {
	n := s.req.PromptTopLogprobs
	if n == 0 {
		return nil
	}
	var tops [][]TokenLogprob
	for j, row := range rows {
		if from+j+1 < len(s.req.Prompt) {
			tops = append(tops, topLogprobs(row, n))
		}
	}
	return tops
}

// add records tops (promptTopsAt's) after those of s's earlier positions.
func (p promptTops) add(s *seq, tops [][]TokenLogprob) {
	if len(tops) > 0 {
		p[s] = append(p[s], tops...)
	}
}

// sendPrompt sends s's prompt log-probabilities, with their most likely ids when asked
// for, once, when s asks for them.
func (e *Engine) sendPrompt(s *seq) {
	if s.promptSent || !s.req.PromptLogprobs {
		return
	}
	s.promptSent = true
	s.first = time.Now()
	lp := s.promptLP
	if lp == nil {
		lp = []float32{} // a one-token prompt: still the event readers wait for
	}
	s.out <- Event{PromptLogprobs: lp, PromptTopLogprobs: e.tops[s]}
	delete(e.tops, s)
}
