package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"megago/parallel/internal/transport"
)

// The TCP transport's wire format. Every message is a frame: a fixed 32-byte header
// followed by a payload of the length the header gives.
//
//	offset size field
//	0      4    magic "MGGO"
//	4      1    kind (hello, reject, table, collective, p2p, abort, probe, probe reply)
//	5      1    op: the collective (transport.Kind) for kindColl, 0 otherwise
//	6      1    dtype of the payload's elements, 0 when not a tensor
//	7      1    flags (flagLast: a Send's final frame; flagRetry: a refusal to retry)
//	8      8    group id (0 for the connection-level kinds)
//	16     8    sequence number: the group's collective count, the pair's message count,
//	            or a probe's number
//	24     4    payload length in bytes
//	28     4    reserved, zero
//
// Integers are little-endian. The decoder checks every field before it allocates the
// payload, and bounds the length by kind: a few hundred bytes before a peer has shown the
// job token, at most Config.SegmentBytes after.

const (
	frameMagic = "MGGO"
	headerSize = 32

	// helloMax bounds the payload of the frames an unauthenticated peer may send.
	helloMax = 1024
	// tokenMax bounds the job token's length.
	tokenMax = 512
	// abortMax bounds an abort frame's payload (two ranks and the reason).
	abortMax = 8 + 512
	// tableMax bounds the address table: 2 + 128 bytes for each of up to 2^16 ranks.
	tableMax = 4 + (2+128)<<16
	// protocolVersion is carried in hello frames; peers with another version are refused.
	protocolVersion = 2
)

type frameKind uint8

const (
	kindHello      frameKind = iota + 1 // token, rank, world size, listen port: who is calling
	kindReject                          // why a connection is refused, sent before closing it
	kindTable                           // rank 0 to every rank: where each rank listens
	kindColl                            // one segment of a collective
	kindP2P                             // one segment of a Send
	kindAbort                           // a rank gave up on a group: culprit and reason
	kindProbe                           // what is this rank waiting for? (see blame.go)
	kindProbeReply                      // the answer to a probe: a probeStatus
	kindLimit                           // first invalid kind
)

func (k frameKind) String() string {
	names := [...]string{"", "hello", "reject", "table", "collective", "p2p", "abort", "probe", "probe reply"}
	if k > 0 && k < kindLimit {
		return names[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// The op byte of a kindColl frame carries the transport.Kind of its collective
// (AllReduce = 1, ..., Split = 6), so that a rank that called a different collective than
// its peer reports a mismatch instead of misreading the data. Other frames carry 0.

const (
	// flagLast marks the last frame of a Send.
	flagLast uint8 = 1
	// flagRetry marks a reject frame whose cause passes (the listener is busy): the
	// joiner tries again, where other refusals are final.
	flagRetry uint8 = 2
)

// header is a decoded frame header.
type header struct {
	kind   frameKind
	op     transport.Kind // the collective of a kindColl frame, 0 otherwise
	dtype  uint8
	flags  uint8
	group  uint64
	seq    uint64
	length uint32
}

// errFrame is wrapped by every error about a malformed frame.
var errFrame = errors.New("malformed frame")

// encodeHeader writes h into b, which must hold headerSize bytes.
func encodeHeader(b []byte, h header) {
	le := binary.LittleEndian
	copy(b, frameMagic)
	b[4], b[5], b[6], b[7] = byte(h.kind), byte(h.op), h.dtype, h.flags
	le.PutUint64(b[8:], h.group)
	le.PutUint64(b[16:], h.seq)
	le.PutUint32(b[24:], h.length)
	le.PutUint32(b[28:], 0)
}

// decodeHeader parses and checks a header. max bounds the payload of data frames
// (kindColl, kindP2P); the other kinds have fixed, small bounds.
func decodeHeader(b []byte, max uint32) (header, error) {
	if len(b) < headerSize {
		return header{}, fmt.Errorf("%w: header of %d bytes, want %d", errFrame, len(b), headerSize)
	}
	le := binary.LittleEndian
	if string(b[:4]) != frameMagic {
		return header{}, fmt.Errorf("%w: bad magic %q", errFrame, b[:4])
	}
	h := header{kind: frameKind(b[4]), op: transport.Kind(b[5]), dtype: b[6], flags: b[7],
		group: le.Uint64(b[8:]), seq: le.Uint64(b[16:]), length: le.Uint32(b[24:])}
	if le.Uint32(b[28:]) != 0 {
		return header{}, fmt.Errorf("%w: reserved field is not zero", errFrame)
	}
	if h.kind == 0 || h.kind >= kindLimit {
		return header{}, fmt.Errorf("%w: unknown kind %d", errFrame, b[4])
	}
	if h.flags&^(flagLast|flagRetry) != 0 {
		return header{}, fmt.Errorf("%w: unknown flags %#x", errFrame, h.flags)
	}
	limit := kindLimitBytes(h.kind, max)
	if h.length > limit {
		return header{}, fmt.Errorf("%w: %v payload of %d bytes exceeds the limit of %d", errFrame, h.kind, h.length, limit)
	}
	return h, nil
}

// kindLimitBytes is the largest payload a frame of kind k may carry.
func kindLimitBytes(k frameKind, max uint32) uint32 {
	switch k {
	case kindHello, kindReject:
		return helloMax
	case kindAbort:
		return abortMax
	case kindTable:
		return tableMax
	case kindProbe:
		return 0
	case kindProbeReply:
		return probeStatusSize
	}
	return max
}

// readFrame reads one frame from r. The payload is allocated with alloc (make when nil)
// only after the header has been checked against max.
func readFrame(r io.Reader, hb []byte, max uint32, alloc func(int) []byte) (header, []byte, error) {
	if _, err := io.ReadFull(r, hb[:headerSize]); err != nil {
		return header{}, nil, err
	}
	h, err := decodeHeader(hb, max)
	if err != nil {
		return header{}, nil, err
	}
	var p []byte
	if alloc != nil {
		p = alloc(int(h.length))
	} else {
		p = make([]byte, h.length)
	}
	if _, err := io.ReadFull(r, p); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return header{}, nil, fmt.Errorf("%v payload: %w", h.kind, err)
	}
	return h, p, nil
}

// hello is the first frame on every connection, in both directions.
type hello struct {
	version uint16
	rank    int
	world   int
	port    int // where the sender listens for peers (0 when it does not)
	segment int // the sender's Config.SegmentBytes
	token   []byte
}

// helloFixed is the size of a hello's fields before the token.
const helloFixed = 16

func encodeHello(h hello) []byte {
	b := make([]byte, helloFixed+len(h.token))
	le := binary.LittleEndian
	le.PutUint16(b, h.version)
	le.PutUint32(b[2:], uint32(h.rank))
	le.PutUint32(b[6:], uint32(h.world))
	le.PutUint16(b[10:], uint16(h.port))
	le.PutUint32(b[12:], uint32(h.segment))
	copy(b[helloFixed:], h.token)
	return b
}

func decodeHello(b []byte) (hello, error) {
	if len(b) < helloFixed || len(b) > helloFixed+tokenMax {
		return hello{}, fmt.Errorf("%w: hello of %d bytes", errFrame, len(b))
	}
	le := binary.LittleEndian
	h := hello{version: le.Uint16(b), rank: int(le.Uint32(b[2:])), world: int(le.Uint32(b[6:])),
		port: int(le.Uint16(b[10:])), segment: int(le.Uint32(b[12:])), token: b[helloFixed:]}
	if h.version != protocolVersion {
		return hello{}, fmt.Errorf("%w: protocol version %d, want %d", errFrame, h.version, protocolVersion)
	}
	return h, nil
}

// encodeTable encodes the address ("host:port") of every rank.
func encodeTable(addrs []string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(addrs)))
	for _, a := range addrs {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(a)))
		b = append(b, a...)
	}
	return b
}

// decodeTable decodes a table of world addresses.
func decodeTable(b []byte, world int) ([]string, error) {
	le := binary.LittleEndian
	if len(b) < 4 || int(le.Uint32(b)) != world {
		return nil, fmt.Errorf("%w: address table not for %d ranks", errFrame, world)
	}
	b = b[4:]
	addrs := make([]string, 0, world)
	for range world {
		if len(b) < 2 || len(b)-2 < int(le.Uint16(b)) {
			return nil, fmt.Errorf("%w: address table truncated", errFrame)
		}
		n := int(le.Uint16(b))
		addrs = append(addrs, string(b[2:2+n]))
		b = b[2+n:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the address table", errFrame, len(b))
	}
	return addrs, nil
}

// abortMsg is the payload of an abort frame: a rank gave up on a group.
type abortMsg struct {
	culprit  int // world rank at fault, -1 when none
	reporter int // world rank that saw the failure first
	reason   string
}

func encodeAbort(a abortMsg) []byte {
	reason := a.reason
	if len(reason) > abortMax-8 {
		reason = reason[:abortMax-8]
	}
	b := binary.LittleEndian.AppendUint32(nil, uint32(int32(a.culprit)))
	b = binary.LittleEndian.AppendUint32(b, uint32(int32(a.reporter)))
	return append(b, reason...)
}

func decodeAbort(b []byte) (abortMsg, error) {
	if len(b) < 8 {
		return abortMsg{}, fmt.Errorf("%w: abort of %d bytes", errFrame, len(b))
	}
	le := binary.LittleEndian
	return abortMsg{culprit: int(int32(le.Uint32(b))), reporter: int(int32(le.Uint32(b[4:]))), reason: string(b[8:])}, nil
}
