//go:build !unix

package launch

import (
	"os"
	"os/exec"
)

func ownProcessGroup(cmd *exec.Cmd) {}

// signalGroup sends sig to p; where signals other than kill are not supported, the
// process is killed.
func signalGroup(p *os.Process, sig os.Signal) {
	if p.Signal(sig) != nil {
		p.Kill()
	}
}
