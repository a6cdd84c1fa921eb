package tune

import (
	"os/exec"
	"syscall"
)

// stopWithParent has the kernel send cmd's process SIGTERM when the search's thread
// that started it dies (Linux's parent-death signal), so that a search killed with
// SIGKILL leaves no trial running: the examples stop after their iteration.
func stopWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
