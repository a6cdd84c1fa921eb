// Package launch starts the processes of a megago job on one host, as torchrun does. It
// is the library behind "megago launch".
//
// Run starts Config.N copies of a program. Each gets, on top of the launcher's own
// environment and Config.ExtraEnv, the variables that ConfigFromEnv of megago/parallel/tcp
// reads:
//
//	RANK              global rank: NodeRank·N + LOCAL_RANK
//	WORLD_SIZE        NNodes·N
//	LOCAL_RANK        index of the process on this host, 0..N−1
//	LOCAL_WORLD_SIZE  N
//	GROUP_RANK        NodeRank (torchrun's name for it)
//	MASTER_ADDR       where rank 0 listens
//	MASTER_PORT
//	MEGAGO_JOB_TOKEN  the job's shared token
//
// Every line a process writes to standard output or error is copied, whole, to the
// corresponding writer given to Run, prefixed with "[rank N] ". Signals received on
// Config.Signals are forwarded to every process (to its process group, so a wrapper
// script's children get them too). When a process fails, or ctx ends, the others get
// SIGTERM, and SIGKILL if they are still running Config.Grace later; Run then returns an
// *ExitError naming the first rank that failed.
//
// Errors do not start with the package's name: megago prefixes them with the command's.
//
// On one host the defaults are enough: MasterAddr 127.0.0.1, a free port, a random token.
// A job over several hosts runs one launcher per host, each with the same NNodes,
// MasterAddr, MasterPort and Token and its own NodeRank.
package launch
