package nn

// NextToken chooses the token that follows logits [V] as Generate does for prompt row at
// step (the step-th new token): the argmax when o is greedy, else a draw from o's
// temperature, top-k and top-p distribution with the uniform number Generate uses for
// (o.Seed, step, row). It returns an error if logits hold NaN or +Inf or are all −Inf.
func (o GenerateOptions) NextToken(logits []float64, step, row int) (int32, error) {
	if o.greedy() { // checked and chosen in one pass
		id, err := checkedArgmax(logits)
		return int32(id), err
	}
	if err := checkLogits(logits); err != nil {
		return 0, err
	}
	return nextToken(logits, o, o.uniform(step, row)), nil
}
