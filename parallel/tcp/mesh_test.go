package tcp

import (
	"context"
	"testing"

	"megago/parallel"
	"megago/parallel/internal/commtest"
	"megago/tensor"
)

// TestMeshTCP builds the meshes of commtest.MeshLayouts, dense and expert groups, on
// goroutine ranks connected over loopback, and checks every group.
func TestMeshTCP(t *testing.T) {
	for _, s := range commtest.MeshLayouts {
		t.Run(s.String(), func(t *testing.T) {
			err := tcpRun(t, commtest.MeshWorld, nil, func(c parallel.Comm) error {
				return commtest.Mesh(context.Background(), c, s, tensor.NewCPU())
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
