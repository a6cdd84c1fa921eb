package parallel

import (
	"context"
	"fmt"
	"testing"
	"time"

	"megago/tensor"
)

// sleepStage stands for a stage's compute: its forward step sleeps f and its backward 2f,
// so the measured bubble reflects the schedule (and p2p overhead), not how goroutine
// ranks share the machine's cores.
type sleepStage struct{ f time.Duration }

func (s sleepStage) Forward(in []*tensor.Tensor) []*tensor.Tensor {
	time.Sleep(s.f)
	return []*tensor.Tensor{in[0].Clone()}
}

func (s sleepStage) Backward(g []*tensor.Tensor) []*tensor.Tensor {
	time.Sleep(2 * s.f)
	return g
}

// BenchmarkPipelineBubble runs 1F1B and the interleaved schedule (V = 2) at p = 4, M = 8
// on goroutine stages whose steps sleep (forward 2 ms per stage, backward 4 ms, split
// evenly over the chunks), and reports the bubble fraction measured from the traces
// beside the closed forms (p−1)/(M+p−1) and (p−1)/(V·M+p−1).
func BenchmarkPipelineBubble(b *testing.B) {
	const p, m, stageForward = 4, 8, 2 * time.Millisecond
	for _, s := range []Schedule{OneFOneB{M: m}, Interleaved{M: m, V: 2}} {
		v := s.Chunks()
		theory := float64(p-1) / float64(v*m+p-1)
		b.Run(fmt.Sprintf("%v-p%d", s, p), func(b *testing.B) {
			var sum float64
			for range b.N {
				epoch := time.Now()
				traces := make([]*Trace, p)
				err := RunLocal(p, func(c Comm) error {
					ctx := context.Background()
					dev := tensor.NewCPU()
					pl, err := NewPipeline(ctx, c, dev, P2PShape{})
					if err != nil {
						return err
					}
					w := tensor.Ones(dev, tensor.F32, 64).SetRequiresGrad(true)
					traces[c.Rank()] = NewTrace(c.Rank(), epoch)
					work := sleepStage{stageForward / time.Duration(v)}
					_, err = pl.Train(ctx, s, func(st Step) (*tensor.Tensor, error) {
						x := st.Input
						if x == nil {
							x = w
						}
						y := tensor.Apply("stage", work, x)[0]
						if st.Last {
							return tensor.Sum(y), nil
						}
						return y, nil
					}, Hooks{Trace: traces[c.Rank()]})
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
				sum += BubbleFraction(traces)
			}
			b.ReportMetric(sum/float64(b.N), "bubble")
			b.ReportMetric(theory, "bubble-theory")
		})
	}
}
