package tcp

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"megago/parallel/internal/transport"
)

func TestFrameRoundTrip(t *testing.T) {
	h := header{kind: kindColl, op: transport.ReduceScatter, dtype: 2, flags: flagLast, group: 0xdeadbeefcafe, seq: 1<<40 + 3}
	p := []byte("payload bytes")
	h.length = uint32(len(p))
	b := make([]byte, headerSize)
	encodeHeader(b, h)
	got, gp, err := readFrame(bytes.NewReader(append(b, p...)), make([]byte, headerSize), 1<<20, nil)
	if err != nil || got != h || !bytes.Equal(gp, p) {
		t.Fatalf("readFrame = %+v, %q, %v; want %+v, %q", got, gp, err, h, p)
	}
}

// TestCollectiveWireCodes pins the op byte of each collective: the values are part of
// the wire format (protocolVersion), whatever order transport.Kind lists them in.
func TestCollectiveWireCodes(t *testing.T) {
	want := map[transport.Kind]byte{transport.AllReduce: 1, transport.AllGather: 2, transport.ReduceScatter: 3,
		transport.Broadcast: 4, transport.Barrier: 5, transport.Split: 6}
	b := make([]byte, headerSize)
	for k, code := range want {
		encodeHeader(b, header{kind: kindColl, op: k})
		if b[5] != code {
			t.Errorf("%v is sent as op %d, want %d", k, b[5], code)
		}
	}
}

func TestDecodeHeaderRejects(t *testing.T) {
	valid := func() []byte {
		b := make([]byte, headerSize)
		encodeHeader(b, header{kind: kindColl, length: 100})
		return b
	}
	tests := []struct {
		name    string
		edit    func(b []byte)
		mention string
	}{
		{"magic", func(b []byte) { b[0] = 'X' }, "bad magic"},
		{"kind zero", func(b []byte) { b[4] = 0 }, "unknown kind 0"},
		{"kind too big", func(b []byte) { b[4] = byte(kindLimit) }, "unknown kind"},
		{"flags", func(b []byte) { b[7] = 0x80 }, "unknown flags"},
		{"reserved", func(b []byte) { b[30] = 1 }, "reserved"},
		{"data above max", func(b []byte) { b[24], b[25], b[26] = 0, 0, 0x20 }, "exceeds the limit of 1048576"},
		{"hello above its limit", func(b []byte) { b[4] = byte(kindHello); b[25] = 0x10 }, "exceeds the limit of 1024"},
		{"abort above its limit", func(b []byte) { b[4] = byte(kindAbort); b[25] = 0x10 }, "exceeds the limit of 520"},
		{"table above its limit", func(b []byte) { b[4] = byte(kindTable); b[27] = 0x10 }, "exceeds the limit"},
		{"probe with a payload", func(b []byte) { b[4] = byte(kindProbe) }, "probe payload of 100 bytes exceeds the limit of 0"},
		{"probe reply above its limit", func(b []byte) { b[4] = byte(kindProbeReply) }, "exceeds the limit of 24"},
		{"retry flag with others", func(b []byte) { b[7] = flagRetry | 4 }, "unknown flags 0x6"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := valid()
			tc.edit(b)
			_, err := decodeHeader(b, 1<<20)
			if !errors.Is(err, errFrame) || !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("decodeHeader = %v, want a malformed-frame error mentioning %q", err, tc.mention)
			}
		})
	}
	if _, err := decodeHeader(valid()[:10], 1<<20); !errors.Is(err, errFrame) {
		t.Errorf("short header: %v", err)
	}
}

func TestReadFrameTruncated(t *testing.T) {
	b := make([]byte, headerSize)
	encodeHeader(b, header{kind: kindP2P, length: 10})
	_, _, err := readFrame(bytes.NewReader(append(b, 1, 2, 3)), make([]byte, headerSize), 100, nil)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated payload: %v, want io.ErrUnexpectedEOF", err)
	}
	_, _, err = readFrame(bytes.NewReader(b[:5]), make([]byte, headerSize), 100, nil)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated header: %v, want io.ErrUnexpectedEOF", err)
	}
}

func TestPayloadCodecs(t *testing.T) {
	h := hello{version: protocolVersion, rank: 3, world: 8, port: 40000, token: []byte("tok")}
	got, err := decodeHello(encodeHello(h))
	if err != nil || got.rank != 3 || got.world != 8 || got.port != 40000 || string(got.token) != "tok" {
		t.Errorf("hello round trip: %+v, %v", got, err)
	}
	addrs := []string{"", "10.0.0.2:4000", "[::1]:5"}
	if a, err := decodeTable(encodeTable(addrs), 3); err != nil || strings.Join(a, ",") != strings.Join(addrs, ",") {
		t.Errorf("table round trip: %q, %v", a, err)
	}
	if a, err := decodeAbort(encodeAbort(abortMsg{-1, 5, "why"})); err != nil || a != (abortMsg{-1, 5, "why"}) {
		t.Errorf("abort round trip: %+v %v", a, err)
	}
	bad := []struct {
		name string
		err  error
	}{
		{"short hello", func() error { _, err := decodeHello(make([]byte, helloFixed-1)); return err }()},
		{"long token", func() error { _, err := decodeHello(make([]byte, helloFixed+tokenMax+1)); return err }()},
		{"table for another world", func() error { _, err := decodeTable(encodeTable(addrs), 4); return err }()},
		{"truncated table", func() error { b := encodeTable(addrs); _, err := decodeTable(b[:len(b)-1], 3); return err }()},
		{"table with trailing bytes", func() error { _, err := decodeTable(append(encodeTable(addrs), 0), 3); return err }()},
		{"short abort", func() error { _, err := decodeAbort([]byte{1, 2, 3, 4, 5}); return err }()},
	}
	for _, b := range bad {
		if !errors.Is(b.err, errFrame) {
			t.Errorf("%s: %v, want a malformed-frame error", b.name, b.err)
		}
	}
}

// FuzzDecodeFrame feeds the frame decoder arbitrary bytes: it must return an error or a
// frame whose payload respects the limit, never panic or allocate more than the limit;
// payloads it accepts go through the payload decoders, which must not panic either.
func FuzzDecodeFrame(f *testing.F) {
	frame := func(h header, p []byte) []byte {
		h.length = uint32(len(p))
		b := make([]byte, headerSize, headerSize+len(p))
		encodeHeader(b, h)
		return append(b, p...)
	}
	f.Add(frame(header{kind: kindHello}, encodeHello(hello{version: protocolVersion, rank: 1, world: 2, port: 80, token: []byte("t")})))
	f.Add(frame(header{kind: kindTable}, encodeTable([]string{"", "127.0.0.1:1"})))
	f.Add(frame(header{kind: kindColl, op: transport.AllReduce, dtype: 2, group: 1, seq: 7}, make([]byte, 64)))
	f.Add(frame(header{kind: kindP2P, flags: flagLast}, []byte{1, 2, 3}))
	f.Add(frame(header{kind: kindAbort}, encodeAbort(abortMsg{2, 0, "connection lost"})))
	f.Add(frame(header{kind: kindReject}, []byte("wrong job token")))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n0123456789"))
	f.Add(append([]byte(frameMagic), bytes.Repeat([]byte{0xff}, 60)...))
	f.Add([]byte{})
	const limit = 1 << 16
	f.Fuzz(func(t *testing.T, data []byte) {
		alloc := func(n int) []byte {
			if n > max(limit, tableMax) { // the address table has a fixed limit of its own
				t.Fatalf("allocated %d bytes, limit %d", n, limit)
			}
			return make([]byte, n)
		}
		r := bytes.NewReader(data)
		hb := make([]byte, headerSize)
		for {
			h, p, err := readFrame(r, hb, limit, alloc)
			if err != nil {
				return
			}
			if int(h.length) != len(p) {
				t.Fatalf("header says %d bytes, payload has %d", h.length, len(p))
			}
			again := make([]byte, headerSize)
			encodeHeader(again, h)
			if !bytes.Equal(again, hb) {
				t.Fatalf("header %x decodes to %+v, which encodes to %x", hb, h, again)
			}
			switch h.kind {
			case kindHello:
				decodeHello(p)
			case kindTable:
				decodeTable(p, int(h.seq%8))
			case kindAbort:
				decodeAbort(p)
			}
		}
	})
}
