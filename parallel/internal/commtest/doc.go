// Package commtest is the collective suite that every transport of package parallel
// passes: every parallel.Comm method checked against values computed from the
// contributions' definition, never from a transport. Suite returns an error instead of
// failing a *testing.T so that it can run in worker processes and on rank goroutines.
// Value, Values, Tensor, Reduce and Check let a transport's own tests build more cases
// from the same contributions; the benchmark helpers size and report the all-reduce
// benchmarks of every transport alike. Mesh builds a parallel.Mesh (MeshLayouts, dense
// and expert) on a transport and checks every group it hands out.
package commtest
