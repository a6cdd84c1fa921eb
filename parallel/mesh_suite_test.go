package parallel_test

import (
	"context"
	"testing"

	"megago/parallel"
	"megago/parallel/internal/commtest"
	"megago/tensor"
)

func TestMeshSuiteLocal(t *testing.T) {
	for _, s := range commtest.MeshLayouts {
		t.Run(s.String(), func(t *testing.T) {
			err := parallel.RunLocal(commtest.MeshWorld, func(world parallel.Comm) error {
				return commtest.Mesh(context.Background(), world, s, tensor.NewCPU())
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
