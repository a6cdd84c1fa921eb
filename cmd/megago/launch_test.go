package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// launchChildEnv makes TestLaunchChild act as a launched process.
const launchChildEnv = "MEGAGO_LAUNCH_TEST_CHILD"

// TestLaunchChild is not a test: it is the program TestLaunch* start through megago
// launch.
func TestLaunchChild(t *testing.T) {
	mode := os.Getenv(launchChildEnv)
	if mode == "" {
		t.Skip("runs only as a process started by megago launch in TestLaunch*")
	}
	fmt.Printf("child %s of %s token %s\n", os.Getenv("RANK"), os.Getenv("WORLD_SIZE"), os.Getenv("MEGAGO_JOB_TOKEN"))
	if mode == "fail" && os.Getenv("RANK") == "1" {
		os.Exit(3)
	}
	os.Exit(0)
}

func TestLaunch(t *testing.T) {
	t.Setenv(launchChildEnv, "ok")
	t.Setenv("MEGAGO_JOB_TOKEN", "from-env")
	stdout, _, err := run(t, "launch", "-n", "2", "--", os.Args[0], "-test.run=^TestLaunchChild$")
	if err != nil {
		t.Fatalf("megago launch: %v", err)
	}
	for r := range 2 {
		if want := fmt.Sprintf("[rank %d] child %d of 2 token from-env\n", r, r); !strings.Contains(stdout, want) {
			t.Errorf("no %q in the output:\n%s", want, stdout)
		}
	}
}

func TestLaunchFailure(t *testing.T) {
	t.Setenv(launchChildEnv, "fail")
	_, _, err := run(t, "launch", "--nproc-per-node", "3", "--", os.Args[0], "-test.run=^TestLaunchChild$")
	if err == nil || !strings.Contains(err.Error(), "rank 1") || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("megago launch = %v, want an error naming rank 1 and its status", err)
	}
	if code := exitCode(err); code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
}

func TestLaunchUsageErrors(t *testing.T) {
	t.Setenv("MEGAGO_JOB_TOKEN", "")
	tests := []struct {
		name    string
		args    []string
		mention string
	}{
		{"no program", []string{"launch", "-n", "2"}, "no program"},
		{"no processes", []string{"launch", "-n", "0", "--", "true"}, "0 processes"},
		{"node rank outside", []string{"launch", "--nnodes", "2", "--node-rank", "2", "--", "true"}, "node rank 2"},
		{"several nodes without a master", []string{"launch", "--nnodes", "2", "--master-port", "29500", "--", "true"}, "master address"},
		{"several nodes without a token", []string{"launch", "--nnodes", "2", "--master-addr", "h", "--master-port", "29500", "--", "true"}, "MEGAGO_JOB_TOKEN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := run(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.mention) {
				t.Fatalf("megago %s = %v, want an error mentioning %q", strings.Join(tt.args, " "), err, tt.mention)
			}
			if code := exitCode(err); code != 2 {
				t.Errorf("exit status %d, want 2", code)
			}
		})
	}
}
