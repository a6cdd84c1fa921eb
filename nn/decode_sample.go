package nn

// NextToken chooses the token that follows logits [V] as Generate does for prompt row at
// step (the step-th new token): the argmax when o is greedy, else a draw from o's
// temperature, top-k and top-p distribution with the uniform number Generate uses for
// (o.Seed, step, row). It returns an error if logits hold NaN or +Inf or are all −Inf.
func (o GenerateOptions) NextToken(logits []float64, step, row int) (int32, error) {
	return nextToken(logits, o, o.uniform(step, row))
}
