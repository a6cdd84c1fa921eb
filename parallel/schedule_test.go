package parallel

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The expected plans below are written out by hand from the rules in MEGATRON-FACTS.md
// (warmup, steady, cooldown counts; the interleaved schedule table), not produced by the
// code under test.

func TestOneFOneBPlans(t *testing.T) {
	for _, tc := range []struct {
		p, m int
		want []string // per stage
	}{
		{1, 3, []string{"F0 B0 F1 B1 F2 B2"}},
		{2, 3, []string{
			"F0 F1 B0 F2 B1 B2",
			"F0 B0 F1 B1 F2 B2",
		}},
		{4, 8, []string{
			"F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7",
			"F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7",
			"F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7",
			"F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7",
		}},
		{4, 2, []string{ // warmup capped at M
			"F0 F1 B0 B1",
			"F0 F1 B0 B1",
			"F0 F1 B0 B1",
			"F0 B0 F1 B1",
		}},
	} {
		t.Run(fmt.Sprintf("p%d-m%d", tc.p, tc.m), func(t *testing.T) {
			for r, want := range tc.want {
				ops, err := OneFOneB{M: tc.m}.Plan(tc.p, r)
				require.NoError(t, err)
				assert.Equal(t, want, FormatPlan(ops), "stage %d", r)
			}
		})
	}
}

func TestNoPipeliningPlan(t *testing.T) {
	ops, err := NoPipelining{M: 3}.Plan(1, 0)
	require.NoError(t, err)
	assert.Equal(t, "F0 B0 F1 B1 F2 B2", FormatPlan(ops))
	_, err = NoPipelining{M: 3}.Plan(2, 0)
	assert.ErrorContains(t, err, "no-pipelining schedule on 2 pipeline stages")
}

// TestInterleavedMegatronExample: Megatron's documented example, p=2, M=5, G=3, V=2:
// micro-batches 0 1 2 0 1 2 3 4 3 4 on chunks 0 0 0 1 1 1 0 0 1 1.
func TestInterleavedMegatronExample(t *testing.T) {
	s := Interleaved{M: 5, V: 2, G: 3}
	table, err := s.Table(2)
	require.NoError(t, err)
	var micros, chunks []string
	for _, op := range table {
		micros = append(micros, fmt.Sprint(op.Micro))
		chunks = append(chunks, fmt.Sprint(op.Chunk))
	}
	assert.Equal(t, "0 1 2 0 1 2 3 4 3 4", strings.Join(micros, " "))
	assert.Equal(t, "0 0 0 1 1 1 0 0 1 1", strings.Join(chunks, " "))

	// Stage 0: warmup 2(2−0−1) + (2−1)·3 = 5 forward steps, 5 steady pairs, 5 backward
	// steps; stage 1: warmup 3, 7 pairs, 3. Backward step k takes table[k] with chunk
	// V−1−v.
	want := []string{
		"F0 F1 F2 F0.1 F1.1 F2.1 B0.1 F3 B1.1 F4 B2.1 F3.1 B0 F4.1 B1 B2 B3.1 B4.1 B3 B4",
		"F0 F1 F2 F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3 B0 F4 B1 F3.1 B2 F4.1 B3.1 B4.1 B3 B4",
	}
	for r := range want {
		ops, err := s.Plan(2, r)
		require.NoError(t, err)
		assert.Equal(t, want[r], FormatPlan(ops), "stage %d", r)
	}
}

func TestInterleavedPlanP4(t *testing.T) {
	// p=4, M=4, V=2, G=4: the table is 0 1 2 3 on chunk 0, then on chunk 1. Stage 3's
	// warmup is 2·0 + 1·4 = 4; stage 0's 2·3 + 4 = 10, capped at M·V = 8 (all forward).
	s := Interleaved{M: 4, V: 2}
	ops, err := s.Plan(4, 3)
	require.NoError(t, err)
	assert.Equal(t, "F0 F1 F2 F3 F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.1 B3.1 B0 B1 B2 B3", FormatPlan(ops))
	ops, err = s.Plan(4, 0)
	require.NoError(t, err)
	assert.Equal(t, "F0 F1 F2 F3 F0.1 F1.1 F2.1 F3.1 B0.1 B1.1 B2.1 B3.1 B0 B1 B2 B3", FormatPlan(ops))
}

func TestInterleavedRejects(t *testing.T) {
	for _, tc := range []struct {
		name   string
		s      Interleaved
		stages int
		want   string
	}{
		{"M7-p4", Interleaved{M: 7, V: 2}, 4, "last group of 3, fewer than the 4 pipeline stages"},
		{"G-below-p", Interleaved{M: 8, V: 2, G: 2}, 4, "group size G=2 must be between the 4 pipeline stages and the 8 micro-batches"},
		{"G-above-M", Interleaved{M: 3, V: 2}, 4, "group size G=4 must be between"},
		{"one-chunk", Interleaved{M: 4, V: 1}, 2, "at least 2 model chunks"},
		{"one-stage", Interleaved{M: 4, V: 2}, 1, "at least 2 pipeline stages"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for r := range tc.stages {
				_, err := tc.s.Plan(tc.stages, r)
				require.ErrorContains(t, err, tc.want)
			}
		})
	}
	_, err := OneFOneB{M: 0}.Plan(2, 0)
	assert.ErrorContains(t, err, "0 micro-batches")
	_, err = OneFOneB{M: 2}.Plan(2, 2)
	assert.ErrorContains(t, err, "stage 2 of 2")
}

// TestPlansAreComplete checks, over many layouts, that every plan runs each forward and
// backward step once, backward after forward, micro-batches of a chunk in order, and that
// the plans of all stages fit together without deadlock (Simulate).
func TestPlansAreComplete(t *testing.T) {
	var scheds []Schedule
	for m := 1; m <= 9; m++ {
		scheds = append(scheds, OneFOneB{M: m})
		for v := 2; v <= 3; v++ {
			for g := 0; g <= m; g++ {
				scheds = append(scheds, Interleaved{M: m, V: v, G: g})
			}
		}
	}
	checked := 0
	for _, s := range scheds {
		for p := 1; p <= 5; p++ {
			if _, err := s.Plan(p, 0); err != nil {
				continue
			}
			checked++
			for r := range p {
				ops, err := s.Plan(p, r)
				require.NoError(t, err)
				seen := map[PipeOp]bool{}
				lastB := map[int]int{}
				for _, op := range ops {
					require.False(t, seen[op], "%v p=%d r=%d: %v twice", s, p, r, op)
					seen[op] = true
					if op.Phase == Backward {
						require.True(t, seen[PipeOp{Forward, op.Micro, op.Chunk}], "%v before its forward", op)
						if prev, ok := lastB[op.Chunk]; ok {
							require.Greater(t, op.Micro, prev, "chunk %d backward out of order", op.Chunk)
						}
						lastB[op.Chunk] = op.Micro
					}
				}
				require.Len(t, seen, 2*s.Microbatches()*s.Chunks())
			}
			_, err := Simulate(s, p, time.Millisecond, 2*time.Millisecond)
			require.NoError(t, err, "%v on %d stages", s, p)
		}
	}
	require.Greater(t, checked, 100)
}

// TestSimulatedBubble: with ideal timing (backward twice forward, no transfer cost) the
// measured bubble equals the closed forms (p−1)/(M+p−1) for 1F1B and (p−1)/(V·M+p−1) for
// the interleaved schedule with each chunk taking 1/V of a stage's time.
func TestSimulatedBubble(t *testing.T) {
	const f = 12 * time.Millisecond // divisible by every V used
	for _, tc := range []struct {
		s    Schedule
		p    int
		want float64
	}{
		{OneFOneB{M: 8}, 4, 3.0 / 11},
		{OneFOneB{M: 3}, 2, 1.0 / 4},
		{OneFOneB{M: 16}, 4, 3.0 / 19},
		{Interleaved{M: 8, V: 2}, 4, 3.0 / 19},
		{Interleaved{M: 8, V: 4}, 4, 3.0 / 35},
		{Interleaved{M: 4, V: 2}, 2, 1.0 / 9},
	} {
		t.Run(fmt.Sprintf("%v-p%d", tc.s, tc.p), func(t *testing.T) {
			v := time.Duration(tc.s.Chunks())
			traces, err := Simulate(tc.s, tc.p, f/v, 2*f/v)
			require.NoError(t, err)
			assert.InDelta(t, tc.want, BubbleFraction(traces), 1e-12)
		})
	}
}
