package transport

import "testing"

func TestKindString(t *testing.T) {
	want := map[Kind]string{AllReduce: "all-reduce", AllGather: "all-gather", ReduceScatter: "reduce-scatter",
		Broadcast: "broadcast", Barrier: "barrier", Split: "split", Send: "send", Recv: "recv", 0: "kind(0)", 99: "kind(99)"}
	for k, s := range want {
		if k.String() != s {
			t.Errorf("Kind(%d).String() = %q, want %q", uint8(k), k.String(), s)
		}
	}
	if Send.Collective() || Recv.Collective() || !Split.Collective() || !AllReduce.Collective() {
		t.Error("Collective() is wrong for Send, Recv, Split or AllReduce")
	}
}
