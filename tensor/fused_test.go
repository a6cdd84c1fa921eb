package tensor

import "testing"

func TestFusedOpNames(t *testing.T) {
	for op := FusedOp(0); op < numFusedOps; op++ {
		if op.String() == "" || op.String() == "FusedOp(?)" {
			t.Errorf("fused op %d has no name", op)
		}
	}
	if got := numFusedOps.String(); got != "FusedOp(?)" {
		t.Errorf("out-of-range op: got %q", got)
	}
}
