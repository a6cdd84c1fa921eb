package nccl

import (
	"fmt"

	"megago/cuda/internal/dl"
	"megago/cuda/internal/driver"
)

// Lib is NVIDIA's collective communication library (libnccl), opened with Load.
type Lib struct {
	lib     *dl.Lib
	version int

	ncclGetVersion        func(v *int32) int32
	ncclGetUniqueId       func(id *UniqueID) int32
	ncclCommInitRank      func(comm *uintptr, nranks int32, id UniqueID, rank int32) int32
	ncclCommDestroy       func(comm uintptr) int32
	ncclCommAbort         func(comm uintptr) int32
	ncclCommGetAsyncError func(comm uintptr, r *int32) int32
	ncclGetErrorString    func(r int32) string
	ncclGetLastError      func(comm uintptr) string // NCCL ≥ 2.13
	ncclAllReduce         func(send, recv driver.DevicePtr, count uint64, dt, op int32, comm uintptr, s driver.Stream) int32
	ncclBroadcast         func(send, recv driver.DevicePtr, count uint64, dt, root int32, comm uintptr, s driver.Stream) int32
	ncclReduceScatter     func(send, recv driver.DevicePtr, recvCount uint64, dt, op int32, comm uintptr, s driver.Stream) int32
	ncclAllGather         func(send, recv driver.DevicePtr, sendCount uint64, dt int32, comm uintptr, s driver.Stream) int32
	ncclSend              func(send driver.DevicePtr, count uint64, dt, peer int32, comm uintptr, s driver.Stream) int32
	ncclRecv              func(recv driver.DevicePtr, count uint64, dt, peer int32, comm uintptr, s driver.Stream) int32
	ncclGroupStart        func() int32
	ncclGroupEnd          func() int32
}

// UniqueID is ncclUniqueId: what rank 0 creates and every rank passes to
// ncclCommInitRank, exchanged out of band.
type UniqueID struct {
	Internal [128]byte
}

// NCCL data types (ncclDataType_t) and reductions (ncclRedOp_t).
const (
	Int8     = 0
	Int32    = 2
	Int64    = 4
	Float16  = 6
	Float32  = 7
	Float64  = 8
	Bfloat16 = 9 // NCCL ≥ 2.10

	Sum  = 0
	Prod = 1
	Max  = 2
	Min  = 3
	Avg  = 4 // NCCL ≥ 2.10
)

// ncclResultNames names ncclResult_t codes.
var ncclResultNames = map[int32]string{
	1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError",
	4: "ncclInvalidArgument", 5: "ncclInvalidUsage", 6: "ncclRemoteError", 7: "ncclInProgress",
}

// Load opens libnccl (see dl.Library.Dirs) and binds it.
func Load(env dl.SearchEnv) (*Lib, error) {
	lib, err := dl.LibNCCL.Open(env)
	if err != nil {
		return nil, err
	}
	n := &Lib{lib: lib}
	b := dl.NewBinder(lib)
	b.Bind(&n.ncclGetVersion, "ncclGetVersion")
	b.Bind(&n.ncclGetUniqueId, "ncclGetUniqueId")
	b.Bind(&n.ncclCommInitRank, "ncclCommInitRank")
	b.Bind(&n.ncclCommDestroy, "ncclCommDestroy")
	b.Bind(&n.ncclCommAbort, "ncclCommAbort")
	b.Bind(&n.ncclCommGetAsyncError, "ncclCommGetAsyncError")
	b.Bind(&n.ncclGetErrorString, "ncclGetErrorString")
	b.Optional(&n.ncclGetLastError, "ncclGetLastError")
	b.Bind(&n.ncclAllReduce, "ncclAllReduce")
	b.Bind(&n.ncclBroadcast, "ncclBroadcast")
	b.Bind(&n.ncclReduceScatter, "ncclReduceScatter")
	b.Bind(&n.ncclAllGather, "ncclAllGather")
	b.Bind(&n.ncclSend, "ncclSend")
	b.Bind(&n.ncclRecv, "ncclRecv")
	b.Bind(&n.ncclGroupStart, "ncclGroupStart")
	b.Bind(&n.ncclGroupEnd, "ncclGroupEnd")
	if err := b.Err(dl.LibNCCL); err != nil {
		return nil, err
	}
	var v int32
	if err := n.check("ncclGetVersion", n.ncclGetVersion(&v), 0); err != nil {
		return nil, err
	}
	n.version = int(v)
	if n.version < 21000 {
		return nil, fmt.Errorf("cuda: NCCL %d at %s is too old (need 2.10 for bf16 and averaging): %w", n.version, lib.Path(), dl.ErrNoDevice)
	}
	return n, nil
}

// Path returns the file NCCL was opened from.
func (n *Lib) Path() string { return n.lib.Path() }

// Version returns NCCL's version code, e.g. 21903 for 2.19.3.
func (n *Lib) Version() int { return n.version }

// check turns an NCCL result into an *Error, with the communicator's last error message
// when there is one.
func (n *Lib) check(fn string, r int32, comm uintptr) error {
	if r == 0 {
		return nil
	}
	e := &dl.Error{Lib: "NCCL", Func: fn, Code: int(r), Name: ncclResultNames[r], Msg: n.ncclGetErrorString(r)}
	if n.ncclGetLastError != nil {
		if last := n.ncclGetLastError(comm); last != "" {
			e.Msg += ": " + last
		}
	}
	return e
}

// NewUniqueID creates the id of a new communicator (on one rank; the others receive it).
func (n *Lib) NewUniqueID() (UniqueID, error) {
	var id UniqueID
	err := n.check("ncclGetUniqueId", n.ncclGetUniqueId(&id), 0)
	return id, err
}

// Handle is an NCCL communicator (ncclComm_t); package cuda's Comm wraps one as a
// parallel.Comm.
type Handle uintptr

// InitRank joins rank of nranks to the communicator id, on the device whose context is
// current. Every rank calls it; it blocks until all have.
func (n *Lib) InitRank(id UniqueID, nranks, rank int) (Handle, error) {
	var c uintptr
	err := n.check("ncclCommInitRank", n.ncclCommInitRank(&c, int32(nranks), id, int32(rank)), 0)
	return Handle(c), err
}

// Destroy frees c after its pending work.
func (n *Lib) Destroy(c Handle) error {
	return n.check("ncclCommDestroy", n.ncclCommDestroy(uintptr(c)), uintptr(c))
}

// Abort frees c, cancelling pending work (after a peer failed).
func (n *Lib) Abort(c Handle) error {
	return n.check("ncclCommAbort", n.ncclCommAbort(uintptr(c)), uintptr(c))
}

// AsyncError returns the error of c's asynchronous work so far (a failed peer), or nil.
func (n *Lib) AsyncError(c Handle) error {
	var r int32
	if err := n.check("ncclCommGetAsyncError", n.ncclCommGetAsyncError(uintptr(c), &r), uintptr(c)); err != nil {
		return err
	}
	return n.check("asynchronous operation", r, uintptr(c))
}

// AllReduce queues an all-reduce of count elements on s.
func (n *Lib) AllReduce(send, recv driver.DevicePtr, count int, dt, op int32, c Handle, s driver.Stream) error {
	return n.check("ncclAllReduce", n.ncclAllReduce(send, recv, uint64(count), dt, op, uintptr(c), s), uintptr(c))
}

// Broadcast queues a broadcast of count elements from root on s.
func (n *Lib) Broadcast(send, recv driver.DevicePtr, count int, dt int32, root int, c Handle, s driver.Stream) error {
	return n.check("ncclBroadcast", n.ncclBroadcast(send, recv, uint64(count), dt, int32(root), uintptr(c), s), uintptr(c))
}

// ReduceScatter queues a reduce-scatter giving each rank recvCount elements on s.
func (n *Lib) ReduceScatter(send, recv driver.DevicePtr, recvCount int, dt, op int32, c Handle, s driver.Stream) error {
	return n.check("ncclReduceScatter", n.ncclReduceScatter(send, recv, uint64(recvCount), dt, op, uintptr(c), s), uintptr(c))
}

// AllGather queues an all-gather of sendCount elements per rank on s.
func (n *Lib) AllGather(send, recv driver.DevicePtr, sendCount int, dt int32, c Handle, s driver.Stream) error {
	return n.check("ncclAllGather", n.ncclAllGather(send, recv, uint64(sendCount), dt, uintptr(c), s), uintptr(c))
}

// Send queues sending count elements to peer on s.
func (n *Lib) Send(buf driver.DevicePtr, count int, dt int32, peer int, c Handle, s driver.Stream) error {
	return n.check("ncclSend", n.ncclSend(buf, uint64(count), dt, int32(peer), uintptr(c), s), uintptr(c))
}

// Recv queues receiving count elements from peer on s.
func (n *Lib) Recv(buf driver.DevicePtr, count int, dt int32, peer int, c Handle, s driver.Stream) error {
	return n.check("ncclRecv", n.ncclRecv(buf, uint64(count), dt, int32(peer), uintptr(c), s), uintptr(c))
}

// GroupStart and GroupEnd bracket calls that NCCL should issue together (a send and a
// receive that would otherwise deadlock).
func (n *Lib) GroupStart() error { return n.check("ncclGroupStart", n.ncclGroupStart(), 0) }

// GroupEnd ends a group started by GroupStart.
func (n *Lib) GroupEnd() error { return n.check("ncclGroupEnd", n.ncclGroupEnd(), 0) }
