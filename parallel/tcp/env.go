package tcp

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ConfigFromEnv returns the Config that the environment describes, read through
// getenv (os.Getenv in a program, a map lookup in tests). Errors name the variable that
// is missing or bad.
//
// The variables torchrun and megago launch set come first: RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE (both optional: -1 when unset), MASTER_ADDR and
// MASTER_PORT. When RANK is unset, Slurm's are read instead, as srun sets them for each
// task: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, and the local world size from
// SLURM_TASKS_PER_NODE and SLURM_NODEID. Under Slurm MASTER_ADDR and MASTER_PORT may be
// omitted: the master is then the first host of SLURM_JOB_NODELIST, where task 0 runs,
// and the port 20000 + SLURM_JOB_ID mod 10000.
//
// MEGAGO_JOB_TOKEN is the job's shared token (required with more than one rank; megago
// launch generates it), and MEGAGO_TIMEOUT optionally overrides DefaultTimeout with a
// Go duration such as "90s".
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	e := envReader{getenv: getenv}
	cfg := Config{LocalRank: -1, LocalWorldSize: -1}
	switch {
	case getenv("RANK") != "":
		cfg.Rank = e.int("RANK")
		cfg.WorldSize = e.int("WORLD_SIZE")
		if getenv("LOCAL_RANK") != "" {
			cfg.LocalRank = e.int("LOCAL_RANK")
		}
		if getenv("LOCAL_WORLD_SIZE") != "" {
			cfg.LocalWorldSize = e.int("LOCAL_WORLD_SIZE")
		}
	case getenv("SLURM_PROCID") != "":
		cfg.Rank = e.int("SLURM_PROCID")
		cfg.WorldSize = e.int("SLURM_NTASKS")
		if getenv("SLURM_LOCALID") != "" {
			cfg.LocalRank = e.int("SLURM_LOCALID")
		}
		cfg.LocalWorldSize = slurmTasksOnNode(getenv("SLURM_TASKS_PER_NODE"), getenv("SLURM_NODEID"))
	default:
		return Config{}, errors.New("parallel: environment: neither RANK (set by megago launch and torchrun) nor SLURM_PROCID (set by srun) is set")
	}
	if e.err != nil {
		return Config{}, e.err
	}
	if cfg.WorldSize < 1 {
		return Config{}, fmt.Errorf("parallel: environment: world size %d is not positive", cfg.WorldSize)
	}
	if cfg.Rank < 0 || cfg.Rank >= cfg.WorldSize {
		return Config{}, fmt.Errorf("parallel: environment: rank %d not in [0, %d)", cfg.Rank, cfg.WorldSize)
	}
	slurm := getenv("RANK") == ""
	cfg.MasterAddr = getenv("MASTER_ADDR")
	if cfg.MasterAddr == "" && slurm {
		cfg.MasterAddr = slurmFirstHost(getenv("SLURM_JOB_NODELIST"))
	}
	if getenv("MASTER_PORT") != "" {
		cfg.MasterPort = e.int("MASTER_PORT")
	} else if slurm && getenv("SLURM_JOB_ID") != "" {
		cfg.MasterPort = 20000 + e.int("SLURM_JOB_ID")%10000
	}
	cfg.Token = getenv("MEGAGO_JOB_TOKEN")
	if s := getenv("MEGAGO_TIMEOUT"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return Config{}, fmt.Errorf("parallel: environment: MEGAGO_TIMEOUT=%q is not a positive duration such as \"90s\"", s)
		}
		cfg.Timeout = d
	}
	if e.err != nil {
		return Config{}, e.err
	}
	if cfg.WorldSize > 1 {
		switch {
		case cfg.MasterAddr == "":
			return Config{}, errors.New("parallel: environment: MASTER_ADDR is not set")
		case cfg.MasterPort == 0:
			return Config{}, errors.New("parallel: environment: MASTER_PORT is not set")
		case cfg.MasterPort < 1 || cfg.MasterPort > 65535:
			return Config{}, fmt.Errorf("parallel: environment: MASTER_PORT=%d is not a port number", cfg.MasterPort)
		case cfg.Token == "":
			return Config{}, errors.New("parallel: environment: MEGAGO_JOB_TOKEN is not set: megago launch sets it; " +
				"under srun or another launcher export the same random value to every process, e.g. MEGAGO_JOB_TOKEN=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \\n')")
		}
	}
	return cfg, cfg.Validate()
}

// envReader parses integer variables, keeping the first error.
type envReader struct {
	getenv func(string) string
	err    error
}

func (e *envReader) int(name string) int {
	s := e.getenv(name)
	if s == "" {
		if e.err == nil {
			e.err = fmt.Errorf("parallel: environment: %s is not set", name)
		}
		return 0
	}
	v, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil && e.err == nil {
		e.err = fmt.Errorf("parallel: environment: %s=%q is not an integer", name, s)
	}
	return v
}

// slurmTasksOnNode returns the task count of node nodeID from SLURM_TASKS_PER_NODE
// ("4(x2),3": four tasks on each of two nodes, then three), or -1.
func slurmTasksOnNode(perNode, nodeID string) int {
	id, err := strconv.Atoi(nodeID)
	if perNode == "" || err != nil || id < 0 {
		return -1
	}
	for _, item := range strings.Split(perNode, ",") {
		count, reps := item, 1
		if i := strings.Index(item, "(x"); i >= 0 && strings.HasSuffix(item, ")") {
			count = item[:i]
			if reps, err = strconv.Atoi(item[i+2 : len(item)-1]); err != nil {
				return -1
			}
		}
		n, err := strconv.Atoi(count)
		if err != nil {
			return -1
		}
		if id < reps {
			return n
		}
		id -= reps
	}
	return -1
}

// slurmFirstHost returns the first host of a Slurm host list: "node[07-09,12],gpu1"
// gives "node07". Every bracketed range takes its first value.
func slurmFirstHost(list string) string {
	var b strings.Builder
	for i := 0; i < len(list); i++ {
		switch ch := list[i]; ch {
		case ',':
			return b.String()
		case '[':
			end := strings.IndexByte(list[i:], ']')
			if end < 0 {
				return ""
			}
			first, _, _ := strings.Cut(list[i+1:i+end], ",")
			first, _, _ = strings.Cut(first, "-")
			b.WriteString(first)
			i += end
		default:
			b.WriteByte(ch)
		}
	}
	return b.String()
}
