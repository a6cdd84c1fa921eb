//go:build !linux

package tune

import "os/exec"

// stopWithParent does nothing outside Linux, which alone has a parent-death signal: a
// search killed with SIGKILL leaves its running trials to finish their segment, and
// the search run again waits for them (waitUnlocked).
func stopWithParent(*exec.Cmd) {}
