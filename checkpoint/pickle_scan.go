package checkpoint

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// scanPickle walks the opcodes of a pickle (protocols 0 to 5) without executing them
// and checks that every length-prefixed argument fits in the bytes that remain, and that
// every opcode is known. gopickle allocates each argument's buffer at the declared
// length before reading it, so an unchecked pickle could ask for terabytes; after this
// scan no allocation exceeds the pickle's own size. It returns an error naming the
// offset of the first bad opcode, or of a pickle that ends without STOP.
func scanPickle(b []byte) error {
	i := 0
	need := func(n uint64) error {
		if n > uint64(len(b)-i) {
			return fmt.Errorf("pickle: opcode at byte %d needs %d bytes, %d remain", i, n, len(b)-i)
		}
		return nil
	}
	uint := func(size int) (uint64, error) {
		if err := need(uint64(size)); err != nil {
			return 0, err
		}
		var v uint64
		switch size {
		case 1:
			v = uint64(b[i])
		case 2:
			v = uint64(binary.LittleEndian.Uint16(b[i:]))
		case 4:
			v = uint64(binary.LittleEndian.Uint32(b[i:]))
		case 8:
			v = binary.LittleEndian.Uint64(b[i:])
		}
		i += size
		return v, nil
	}
	line := func() error {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return fmt.Errorf("pickle: opcode argument at byte %d has no end of line", i)
		}
		i += j + 1
		return nil
	}
	for i < len(b) {
		at, op := i, b[i]
		i++
		arg, ok := pickleArgs[op]
		if !ok {
			return fmt.Errorf("pickle: unknown opcode 0x%02x at byte %d", op, at)
		}
		var err error
		switch arg.kind {
		case argNone:
		case argFixed:
			var n uint64
			if n, err = uint(arg.size); err == nil && op == 0x95 { // FRAME: the frame follows
				err = need(n)
			}
		case argLine:
			for range arg.size {
				if err = line(); err != nil {
					break
				}
			}
		case argCounted:
			var n uint64
			if n, err = uint(arg.size); err == nil {
				if arg.signed && int32(n) < 0 {
					err = fmt.Errorf("pickle: negative length at byte %d", at)
				} else if err = need(n); err == nil {
					i += int(n)
				}
			}
		}
		if err != nil {
			return err
		}
		if op == '.' { // STOP
			return nil
		}
	}
	return fmt.Errorf("pickle: ends at byte %d without STOP", len(b))
}

type argKind uint8

const (
	argNone    argKind = iota
	argFixed           // size bytes
	argLine            // size newline-terminated lines
	argCounted         // a size-byte little-endian length, then that many bytes
)

type pickleArg struct {
	kind   argKind
	size   int
	signed bool // a counted length read as int32 (negative is invalid)
}

// pickleArgs gives each opcode's argument, as Python's pickletools describes them.
var pickleArgs = func() map[byte]pickleArg {
	m := map[byte]pickleArg{}
	for _, op := range []byte("(.012NQRabdelostu}])\x81\x85\x86\x87\x88\x89\x8f\x90\x91\x92\x93\x94\x97\x98") {
		m[op] = pickleArg{kind: argNone}
	}
	fixed := map[byte]int{'J': 4, 'K': 1, 'M': 2, 'h': 1, 'j': 4, 'q': 1, 'r': 4, 'G': 8, '\x80': 1, '\x82': 1,
		'\x83': 2, '\x84': 4, '\x95': 8} // 0x95 FRAME: its size
	for op, n := range fixed {
		m[op] = pickleArg{kind: argFixed, size: n}
	}
	for _, op := range "FILPSVgp" { // one line: floats, ints, longs, strings, memo keys
		m[byte(op)] = pickleArg{kind: argLine, size: 1}
	}
	m['c'] = pickleArg{kind: argLine, size: 2} // GLOBAL module\nname\n
	m['i'] = pickleArg{kind: argLine, size: 2} // INST
	counted := map[byte]pickleArg{
		'T': {argCounted, 4, true}, 'U': {argCounted, 1, false}, 'X': {argCounted, 4, false},
		'B': {argCounted, 4, false}, 'C': {argCounted, 1, false}, '\x8a': {argCounted, 1, false},
		'\x8b': {argCounted, 4, true}, '\x8c': {argCounted, 1, false}, '\x8d': {argCounted, 8, false},
		'\x8e': {argCounted, 8, false}, '\x96': {argCounted, 8, false},
	}
	for op, a := range counted {
		m[op] = a
	}
	return m
}()
