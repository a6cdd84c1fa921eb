package cuda

import "fmt"

// NCCL is NVIDIA's collective communication library (libnccl), opened with LoadNCCL.
// Comm (nccl_comm.go) is a parallel.Comm on it.
type NCCL struct {
	lib     *dynLib
	version int

	ncclGetVersion        func(v *int32) int32
	ncclGetUniqueId       func(id *UniqueID) int32
	ncclCommInitRank      func(comm *uintptr, nranks int32, id UniqueID, rank int32) int32
	ncclCommDestroy       func(comm uintptr) int32
	ncclCommAbort         func(comm uintptr) int32
	ncclCommGetAsyncError func(comm uintptr, r *int32) int32
	ncclGetErrorString    func(r int32) string
	ncclGetLastError      func(comm uintptr) string // NCCL ≥ 2.13
	ncclAllReduce         func(send, recv DevicePtr, count uint64, dt, op int32, comm uintptr, s Stream) int32
	ncclBroadcast         func(send, recv DevicePtr, count uint64, dt, root int32, comm uintptr, s Stream) int32
	ncclReduceScatter     func(send, recv DevicePtr, recvCount uint64, dt, op int32, comm uintptr, s Stream) int32
	ncclAllGather         func(send, recv DevicePtr, sendCount uint64, dt int32, comm uintptr, s Stream) int32
	ncclSend              func(send DevicePtr, count uint64, dt, peer int32, comm uintptr, s Stream) int32
	ncclRecv              func(recv DevicePtr, count uint64, dt, peer int32, comm uintptr, s Stream) int32
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
	ncclInt8     = 0
	ncclInt32    = 2
	ncclInt64    = 4
	ncclFloat16  = 6
	ncclFloat32  = 7
	ncclFloat64  = 8
	ncclBfloat16 = 9 // NCCL ≥ 2.10

	ncclSum  = 0
	ncclProd = 1
	ncclMax  = 2
	ncclMin  = 3
	ncclAvg  = 4 // NCCL ≥ 2.10
)

// ncclResultNames names ncclResult_t codes.
var ncclResultNames = map[int32]string{
	1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError",
	4: "ncclInvalidArgument", 5: "ncclInvalidUsage", 6: "ncclRemoteError", 7: "ncclInProgress",
}

// LoadNCCL opens libnccl (see Library.Dirs) and binds it.
func LoadNCCL(env SearchEnv) (*NCCL, error) {
	lib, err := LibNCCL.open(env, dlopen)
	if err != nil {
		return nil, err
	}
	n := &NCCL{lib: lib}
	b := &binder{lib: lib}
	b.bind(&n.ncclGetVersion, "ncclGetVersion")
	b.bind(&n.ncclGetUniqueId, "ncclGetUniqueId")
	b.bind(&n.ncclCommInitRank, "ncclCommInitRank")
	b.bind(&n.ncclCommDestroy, "ncclCommDestroy")
	b.bind(&n.ncclCommAbort, "ncclCommAbort")
	b.bind(&n.ncclCommGetAsyncError, "ncclCommGetAsyncError")
	b.bind(&n.ncclGetErrorString, "ncclGetErrorString")
	b.optional(&n.ncclGetLastError, "ncclGetLastError")
	b.bind(&n.ncclAllReduce, "ncclAllReduce")
	b.bind(&n.ncclBroadcast, "ncclBroadcast")
	b.bind(&n.ncclReduceScatter, "ncclReduceScatter")
	b.bind(&n.ncclAllGather, "ncclAllGather")
	b.bind(&n.ncclSend, "ncclSend")
	b.bind(&n.ncclRecv, "ncclRecv")
	b.bind(&n.ncclGroupStart, "ncclGroupStart")
	b.bind(&n.ncclGroupEnd, "ncclGroupEnd")
	if err := b.err(LibNCCL); err != nil {
		return nil, err
	}
	var v int32
	if err := n.check("ncclGetVersion", n.ncclGetVersion(&v), 0); err != nil {
		return nil, err
	}
	n.version = int(v)
	if n.version < 21000 {
		return nil, fmt.Errorf("cuda: NCCL %d at %s is too old (need 2.10 for bf16 and averaging): %w", n.version, lib.path, ErrNoDevice)
	}
	return n, nil
}

// Path returns the file NCCL was opened from.
func (n *NCCL) Path() string { return n.lib.path }

// Version returns NCCL's version code, e.g. 21903 for 2.19.3.
func (n *NCCL) Version() int { return n.version }

// check turns an NCCL result into an *Error, with the communicator's last error message
// when there is one.
func (n *NCCL) check(fn string, r int32, comm uintptr) error {
	if r == 0 {
		return nil
	}
	e := &Error{Lib: "NCCL", Func: fn, Code: int(r), Name: ncclResultNames[r], Msg: n.ncclGetErrorString(r)}
	if n.ncclGetLastError != nil {
		if last := n.ncclGetLastError(comm); last != "" {
			e.Msg += ": " + last
		}
	}
	return e
}

// NewUniqueID creates the id of a new communicator (on one rank; the others receive it).
func (n *NCCL) NewUniqueID() (UniqueID, error) {
	var id UniqueID
	err := n.check("ncclGetUniqueId", n.ncclGetUniqueId(&id), 0)
	return id, err
}

// NCCLHandle is an NCCL communicator (ncclComm_t); Comm wraps one as a parallel.Comm.
type NCCLHandle uintptr

// InitRank joins rank of nranks to the communicator id, on the device whose context is
// current. Every rank calls it; it blocks until all have.
func (n *NCCL) InitRank(id UniqueID, nranks, rank int) (NCCLHandle, error) {
	var c uintptr
	err := n.check("ncclCommInitRank", n.ncclCommInitRank(&c, int32(nranks), id, int32(rank)), 0)
	return NCCLHandle(c), err
}

// Destroy frees c after its pending work.
func (n *NCCL) Destroy(c NCCLHandle) error {
	return n.check("ncclCommDestroy", n.ncclCommDestroy(uintptr(c)), uintptr(c))
}

// Abort frees c, cancelling pending work (after a peer failed).
func (n *NCCL) Abort(c NCCLHandle) error {
	return n.check("ncclCommAbort", n.ncclCommAbort(uintptr(c)), uintptr(c))
}

// AsyncError returns the error of c's asynchronous work so far (a failed peer), or nil.
func (n *NCCL) AsyncError(c NCCLHandle) error {
	var r int32
	if err := n.check("ncclCommGetAsyncError", n.ncclCommGetAsyncError(uintptr(c), &r), uintptr(c)); err != nil {
		return err
	}
	return n.check("asynchronous operation", r, uintptr(c))
}

// AllReduce queues an all-reduce of count elements on s.
func (n *NCCL) AllReduce(send, recv DevicePtr, count int, dt, op int32, c NCCLHandle, s Stream) error {
	return n.check("ncclAllReduce", n.ncclAllReduce(send, recv, uint64(count), dt, op, uintptr(c), s), uintptr(c))
}

// Broadcast queues a broadcast of count elements from root on s.
func (n *NCCL) Broadcast(send, recv DevicePtr, count int, dt int32, root int, c NCCLHandle, s Stream) error {
	return n.check("ncclBroadcast", n.ncclBroadcast(send, recv, uint64(count), dt, int32(root), uintptr(c), s), uintptr(c))
}

// ReduceScatter queues a reduce-scatter giving each rank recvCount elements on s.
func (n *NCCL) ReduceScatter(send, recv DevicePtr, recvCount int, dt, op int32, c NCCLHandle, s Stream) error {
	return n.check("ncclReduceScatter", n.ncclReduceScatter(send, recv, uint64(recvCount), dt, op, uintptr(c), s), uintptr(c))
}

// AllGather queues an all-gather of sendCount elements per rank on s.
func (n *NCCL) AllGather(send, recv DevicePtr, sendCount int, dt int32, c NCCLHandle, s Stream) error {
	return n.check("ncclAllGather", n.ncclAllGather(send, recv, uint64(sendCount), dt, uintptr(c), s), uintptr(c))
}

// Send queues sending count elements to peer on s.
func (n *NCCL) Send(buf DevicePtr, count int, dt int32, peer int, c NCCLHandle, s Stream) error {
	return n.check("ncclSend", n.ncclSend(buf, uint64(count), dt, int32(peer), uintptr(c), s), uintptr(c))
}

// Recv queues receiving count elements from peer on s.
func (n *NCCL) Recv(buf DevicePtr, count int, dt int32, peer int, c NCCLHandle, s Stream) error {
	return n.check("ncclRecv", n.ncclRecv(buf, uint64(count), dt, int32(peer), uintptr(c), s), uintptr(c))
}

// GroupStart and GroupEnd bracket calls that NCCL should issue together (a send and a
// receive that would otherwise deadlock).
func (n *NCCL) GroupStart() error { return n.check("ncclGroupStart", n.ncclGroupStart(), 0) }

// GroupEnd ends a group started by GroupStart.
func (n *NCCL) GroupEnd() error { return n.check("ncclGroupEnd", n.ncclGroupEnd(), 0) }
