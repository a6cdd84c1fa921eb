package train_test

import (
	"context"
	"fmt"
	"sync"

	"megago/nn"
	"megago/optim"
	"megago/parallel"
	"megago/tensor"
	"megago/train"
)

// Four goroutine ranks train a small GPT with TP=2 and PP=2 under the 1F1B schedule:
// each rank builds its stage, and every rank reports the same mean loss, falling.
func Example() {
	cfg := nn.GPTConfig{TransformerConfig: nn.TransformerConfig{NumLayers: 2, Hidden: 16, Heads: 2, Vocab: 16,
		MaxPosition: 8, Bias: true}, VocabMultiple: 1}
	const micro, batch, seq = 4, 2, 8
	var mu sync.Mutex
	losses := map[int][]float64{} // per world rank
	err := parallel.RunLocal(4, func(world parallel.Comm) error {
		ctx := context.Background()
		mesh, err := parallel.NewMesh(ctx, world, parallel.Sizes{TP: 2, PP: 2})
		if err != nil {
			return err
		}
		dev := tensor.NewCPU()
		b := &nn.Builder{Dev: dev, DType: tensor.F32, RNG: tensor.NewRNG(1), TP: mesh.TP()}
		chunks, err := train.NewGPTChunks(b, cfg, mesh, 1)
		if err != nil {
			return err
		}
		tr, err := train.New(ctx, mesh, dev, train.GPTParts(chunks), train.Config{Optim: optim.Config{LR: 3e-3}})
		if err != nil {
			return err
		}
		data := func(micro int) (ids, labels *tensor.Tensor) { // counting sequences: t → t+1
			x, y := make([]int64, batch*seq), make([]int64, batch*seq)
			for i := range x {
				x[i], y[i] = int64((micro+i)%16), int64((micro+i+1)%16)
			}
			return tensor.FromSlice(dev, x, batch, seq), tensor.FromSlice(dev, y, batch, seq)
		}
		for step := range 20 {
			pass := func(m int) *nn.Pass { return train.PassFor(ctx, mesh, tensor.NewRNG(2), step, m, batch, micro) }
			res, err := tr.Step(ctx, parallel.OneFOneB{M: micro}, train.GPTForward(chunks, pass, data))
			if err != nil {
				return err
			}
			mu.Lock()
			losses[world.Rank()] = append(losses[world.Rank()], res.Loss)
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	l := losses[0]
	fmt.Println("ranks agree:", fmt.Sprint(losses[0]) == fmt.Sprint(losses[3]))
	fmt.Printf("loss: %.2f after step 1, %.2f after step 20\n", l[0], l[len(l)-1])
	// Output:
	// ranks agree: true
	// loss: 2.78 after step 1, 1.92 after step 20
}
