package tcp

import (
	"fmt"
	"strings"
	"testing"
)

func envFunc(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestConfigFromEnv(t *testing.T) {
	torchrun := map[string]string{"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
		"MASTER_ADDR": "node0", "MASTER_PORT": "29500", "MEGAGO_JOB_TOKEN": "abc"}
	slurm := map[string]string{"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_LOCALID": "1", "SLURM_NODEID": "2",
		"SLURM_TASKS_PER_NODE": "2(x2),2", "SLURM_JOB_NODELIST": "gpu[07-09]", "SLURM_JOB_ID": "123456",
		"MEGAGO_JOB_TOKEN": "abc"}
	with := func(base map[string]string, kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(m, kv[i])
			} else {
				m[kv[i]] = kv[i+1]
			}
		}
		return m
	}
	tests := []struct {
		name string
		env  map[string]string
		want string // the config's fields, or the error's words
	}{
		{"torchrun", torchrun, "rank 3/8 local 1/2 master node0:29500 token abc timeout 0s"},
		{"torchrun with timeout", with(torchrun, "MEGAGO_TIMEOUT", "90s"), "rank 3/8 local 1/2 master node0:29500 token abc timeout 1m30s"},
		{"no local rank", with(torchrun, "LOCAL_RANK", "", "LOCAL_WORLD_SIZE", ""), "rank 3/8 local -1/-1"},
		{"torchrun wins over slurm", with(slurm, "RANK", "0", "WORLD_SIZE", "1"), "rank 0/1 local -1/-1 master :0"},
		{"slurm", slurm, "rank 5/6 local 1/2 master gpu07:23456 token abc"},
		{"slurm with master", with(slurm, "MASTER_ADDR", "head", "MASTER_PORT", "4000"), "rank 5/6 local 1/2 master head:4000"},
		{"one rank needs nothing else", map[string]string{"RANK": "0", "WORLD_SIZE": "1"}, "rank 0/1 local -1/-1 master :0 token  "},
		{"nothing", nil, "error: neither RANK"},
		{"no world size", with(torchrun, "WORLD_SIZE", ""), "error: WORLD_SIZE is not set"},
		{"bad rank", with(torchrun, "RANK", "three"), `error: RANK="three" is not an integer`},
		{"rank outside world", with(torchrun, "RANK", "8"), "error: rank 8 not in [0, 8)"},
		{"bad local rank", with(torchrun, "LOCAL_RANK", "x"), "error: LOCAL_RANK"},
		{"no master addr", with(torchrun, "MASTER_ADDR", ""), "error: MASTER_ADDR is not set"},
		{"no master port", with(torchrun, "MASTER_PORT", ""), "error: MASTER_PORT is not set"},
		{"bad master port", with(torchrun, "MASTER_PORT", "99999"), "error: MASTER_PORT=99999"},
		{"no token", with(torchrun, "MEGAGO_JOB_TOKEN", ""), "error: MEGAGO_JOB_TOKEN is not set"},
		{"bad timeout", with(torchrun, "MEGAGO_TIMEOUT", "soon"), `error: MEGAGO_TIMEOUT="soon"`},
		{"slurm without ntasks", with(slurm, "SLURM_NTASKS", ""), "error: SLURM_NTASKS is not set"},
		{"slurm without port", with(slurm, "SLURM_JOB_ID", ""), "error: MASTER_PORT is not set"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ConfigFromEnv(envFunc(tc.env))
			got := fmt.Sprintf("rank %d/%d local %d/%d master %s:%d token %s timeout %v", cfg.Rank, cfg.WorldSize,
				cfg.LocalRank, cfg.LocalWorldSize, cfg.MasterAddr, cfg.MasterPort, cfg.Token, cfg.Timeout)
			if err != nil {
				got = "error: " + strings.TrimPrefix(err.Error(), "parallel: environment: ")
			}
			if !strings.Contains(got, tc.want) {
				t.Errorf("got %q, want it to contain %q", got, tc.want)
			}
		})
	}
}

func TestSlurmParsing(t *testing.T) {
	hosts := map[string]string{
		"node01":                  "node01",
		"node[07-09,12],gpu1":     "node07",
		"gpu-[003,001]-ib":        "gpu-003-ib",
		"a1,b2":                   "a1",
		"rack[2-3]-n[01-04]":      "rack2-n01",
		"broken[1-2":              "",
		"":                        "",
		"host-with.dots.example":  "host-with.dots.example",
		"n[0001-0100],m[005-010]": "n0001",
	}
	for list, want := range hosts {
		if got := slurmFirstHost(list); got != want {
			t.Errorf("slurmFirstHost(%q) = %q, want %q", list, got, want)
		}
	}
	tasks := []struct {
		perNode, node string
		want          int
	}{
		{"4", "0", 4}, {"4(x2),3", "1", 4}, {"4(x2),3", "2", 3}, {"4(x2),3", "3", -1},
		{"", "0", -1}, {"4", "", -1}, {"x(x2)", "0", -1}, {"4(xz)", "0", -1},
	}
	for _, tc := range tasks {
		if got := slurmTasksOnNode(tc.perNode, tc.node); got != tc.want {
			t.Errorf("slurmTasksOnNode(%q, %q) = %d, want %d", tc.perNode, tc.node, got, tc.want)
		}
	}
}
