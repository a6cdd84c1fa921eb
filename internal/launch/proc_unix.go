//go:build unix

package launch

import (
	"os"
	"os/exec"
	"syscall"
)

// ownProcessGroup puts the process in a process group of its own, so that a terminal's
// Ctrl-C reaches it only through the launcher, once, and signals reach its children.
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// signalGroup sends sig to p's process group.
func signalGroup(p *os.Process, sig os.Signal) {
	if s, ok := sig.(syscall.Signal); ok {
		if syscall.Kill(-p.Pid, s) == nil {
			return
		}
	}
	p.Signal(sig)
}
