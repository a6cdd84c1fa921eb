package cuda

import "testing"

// TestLocalRank: AutoDevice's local rank comes from LOCAL_RANK, else Slurm's SLURM_LOCALID.
func TestLocalRank(t *testing.T) {
	for _, tc := range []struct {
		env    map[string]string
		rank   int
		wantOK bool
	}{
		{map[string]string{}, 0, false},
		{map[string]string{"LOCAL_RANK": "3"}, 3, true},
		{map[string]string{"SLURM_LOCALID": "2"}, 2, true},
		{map[string]string{"LOCAL_RANK": "1", "SLURM_LOCALID": "2"}, 1, true},
		{map[string]string{"LOCAL_RANK": "x"}, 0, false},
		{map[string]string{"LOCAL_RANK": "-1"}, -1, false},
	} {
		r, ok := localRank(func(k string) string { return tc.env[k] })
		if ok != tc.wantOK || (ok && r != tc.rank) {
			t.Errorf("%v: got %d, %v; want %d, %v", tc.env, r, ok, tc.rank, tc.wantOK)
		}
	}
}
