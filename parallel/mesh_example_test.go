package parallel_test

import (
	"context"
	"fmt"

	"megago/parallel"
)

// The rank arithmetic needs no communicator: plan a layout of 8 ranks with TP=2, PP=2
// (DP inferred) and print its groups.
func ExampleSizes_Groups() {
	s, err := parallel.Sizes{TP: 2, PP: 2}.Resolve(8)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(s)
	fmt.Println("tp:", s.Groups(parallel.AxisTP))
	fmt.Println("dp:", s.Groups(parallel.AxisDP))
	fmt.Println("pp:", s.Groups(parallel.AxisPP))
	fmt.Println("mp:", s.Groups(parallel.AxisTP, parallel.AxisPP))
	fmt.Println("embedding:", s.EmbeddingGroups())
	fmt.Println("rank 5:", s.Coord(5))

	_, err = parallel.Sizes{TP: 8}.Resolve(12)
	fmt.Println(err)
	// Output:
	// TP=2 CP=1 PP=2 DP=2
	// tp: [[0 1] [2 3] [4 5] [6 7]]
	// dp: [[0 2] [1 3] [4 6] [5 7]]
	// pp: [[0 4] [1 5] [2 6] [3 7]]
	// mp: [[0 1 4 5] [2 3 6 7]]
	// embedding: [[0 4] [1 5] [2 6] [3 7]]
	// rank 5: tp=1 cp=0 dp=0 pp=1
	// parallel: world size 12 is not divisible by TP×CP×PP = 8
}

// Each rank builds its Mesh from the world Comm and hands layers only the group they use.
// Here 8 goroutine ranks each report their TP group and pipeline stage.
func ExampleNewMesh() {
	lines := make([]string, 8)
	err := parallel.RunLocal(8, func(world parallel.Comm) error {
		mesh, err := parallel.NewMesh(context.Background(), world, parallel.Sizes{TP: 2, PP: 2})
		if err != nil {
			return err
		}
		tp := mesh.TP()
		next, hasNext := mesh.NextStage()
		lines[mesh.Rank()] = fmt.Sprintf("rank %d: tp rank %d of %d, stage %d, next stage %d %v",
			mesh.Rank(), tp.Rank(), tp.Size(), mesh.PP().Rank(), next, hasNext)
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// rank 0: tp rank 0 of 2, stage 0, next stage 1 true
	// rank 1: tp rank 1 of 2, stage 0, next stage 1 true
	// rank 2: tp rank 0 of 2, stage 0, next stage 1 true
	// rank 3: tp rank 1 of 2, stage 0, next stage 1 true
	// rank 4: tp rank 0 of 2, stage 1, next stage 0 false
	// rank 5: tp rank 1 of 2, stage 1, next stage 0 false
	// rank 6: tp rank 0 of 2, stage 1, next stage 0 false
	// rank 7: tp rank 1 of 2, stage 1, next stage 0 false
}

// An expert layout over the same ranks: 8 ranks with PP=2 (DP=4 inferred) run their
// MoE layers with EP=2, so each expert shard has EDP = 8/(1·2·2) = 2 replicas, whose
// gradients are reduced over the expert-data-parallel groups.
func ExampleSizes_ExpertGroups() {
	s, err := parallel.Sizes{PP: 2, EP: 2}.Resolve(8)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(s, "EDP:", s.EDP())
	fmt.Println("dp:", s.Groups(parallel.AxisDP))
	fmt.Println("ep:", s.ExpertGroups(parallel.ExpertAxisEP))
	fmt.Println("edp:", s.ExpertGroups(parallel.ExpertAxisDP))
	fmt.Println("emp:", s.ExpertGroups(parallel.ExpertAxisTP, parallel.ExpertAxisEP, parallel.ExpertAxisPP))
	fmt.Println("pp:", s.ExpertGroups(parallel.ExpertAxisPP))
	fmt.Println("rank 6:", s.Coord(6), "|", s.ExpertCoord(6))

	_, err = parallel.Sizes{PP: 2, EP: 8}.Resolve(8)
	fmt.Println(err)
	// Output:
	// TP=1 CP=1 PP=2 DP=4 EP=2 EDP: 2
	// dp: [[0 1 2 3] [4 5 6 7]]
	// ep: [[0 1] [2 3] [4 5] [6 7]]
	// edp: [[0 2] [1 3] [4 6] [5 7]]
	// emp: [[0 1 4 5] [2 3 6 7]]
	// pp: [[0 4] [1 5] [2 6] [3 7]]
	// rank 6: tp=0 cp=0 dp=2 pp=1 | etp=0 ep=0 edp=1 pp=1
	// parallel: world size 8 is not divisible by ETP×EP×PP = 1×8×2 = 16 (expert-TP × EP must divide TP×CP×DP = 4, the ranks of a pipeline stage)
}
