// Package ranks starts the ranks of megago's example programs and holds the little they
// do together outside training: the ranks are the processes of a TCP job (under megago
// launch, torchrun or srun, described by the environment), goroutines of this process
// (--ranks N), or just this process; Run starts whichever the settings ask for, each
// rank on a device of its own that OpenDevices opened before any work (--device: cpu,
// or cuda, where goroutine ranks share the GPU and a process of a job takes the GPU of
// its LOCAL_RANK; see megago/internal/device), talking over TCP, the in-process
// transport or, with --distributed-backend nccl, NCCL.
// Main is an example's main function (Ctrl-C handling, exit codes); StopRequested turns
// Ctrl-C on any rank into a stop after the same iteration on every rank (AnyRank takes
// such decisions together), and CountParams counts a model's parameters over its
// model-parallel group.
//
// # Errors
//
// A malformed launcher environment, a device that cannot be opened (said in at most
// three lines when there is no GPU), a failed rendezvous and failed collectives are
// returned; a rank's error ends Run with that error.
package ranks
