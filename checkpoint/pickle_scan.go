package checkpoint

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Bounds on what a pickle may make the unpickler do. A Megatron checkpoint's data.pkl
// is a few hundred kilobytes nested a few levels deep; these are far above that and far
// below what would exhaust a machine.
const (
	// maxPickleDepth bounds the MARKs open at once (nesting of tuples, lists, dicts
	// and calls built from marks).
	maxPickleDepth = 1000
	// maxPickleStack bounds the objects on the unpickler's stack at once (nesting by
	// APPEND, SETITEM, BUILD and the like keeps every level on the stack).
	maxPickleStack = 1 << 20
	// maxPickleAlloc bounds an estimate of the bytes the unpickler allocates in all,
	// live or garbage (a MARK alone costs gopickle a 16-slot stack).
	maxPickleAlloc = 1 << 30
)

// Estimated allocations of gopickle per opcode, in bytes: a MARK's new stack, an object
// pushed, and the buffers of an argument (read, then converted).
const (
	allocMark   = 16*16 + 24
	allocObject = 64
)

// scanPickle walks the opcodes of a pickle (protocols 0 to 5) without executing them.
// It checks that every opcode is known and every length-prefixed argument fits in the
// bytes that remain (gopickle allocates each argument at its declared length before
// reading it), and it follows the stack as the unpickler would, refusing a pickle that
// pops more than it pushed, nests deeper than maxPickleDepth marks or maxPickleStack
// objects, or would make gopickle allocate more than maxPickleAlloc bytes. After this
// scan no allocation exceeds the pickle's own size and the unpickler's memory is
// bounded. It returns an error naming the offset of the first bad opcode, or of a pickle
// that ends without STOP.
func scanPickle(b []byte) error {
	sc := pickleScanner{b: b}
	for sc.i < len(b) {
		at, op := sc.i, b[sc.i]
		sc.i++
		arg, ok := pickleArgs[op]
		if !ok {
			return fmt.Errorf("pickle: unknown opcode 0x%02x at byte %d", op, at)
		}
		if err := sc.argument(op, at, arg); err != nil {
			return err
		}
		if err := sc.stack(op, at, arg); err != nil {
			return err
		}
		if op == '.' { // STOP
			return nil
		}
	}
	return fmt.Errorf("pickle: ends at byte %d without STOP", len(b))
}

// pickleScanner is scanPickle's position and its model of the unpickler's stack.
type pickleScanner struct {
	b     []byte
	i     int   // the next byte
	marks []int // the objects below each open MARK, innermost last
	frame int   // objects above the innermost MARK
	items int   // objects on the stack in all
	alloc int64 // estimated bytes allocated so far
}

// need checks that n more bytes follow.
func (sc *pickleScanner) need(n uint64) error {
	if n > uint64(len(sc.b)-sc.i) {
		return fmt.Errorf("pickle: opcode at byte %d needs %d bytes, %d remain", sc.i, n, len(sc.b)-sc.i)
	}
	return nil
}

// uint reads a little-endian unsigned integer of size bytes.
func (sc *pickleScanner) uint(size int) (uint64, error) {
	if err := sc.need(uint64(size)); err != nil {
		return 0, err
	}
	var v uint64
	switch size {
	case 1:
		v = uint64(sc.b[sc.i])
	case 2:
		v = uint64(binary.LittleEndian.Uint16(sc.b[sc.i:]))
	case 4:
		v = uint64(binary.LittleEndian.Uint32(sc.b[sc.i:]))
	case 8:
		v = binary.LittleEndian.Uint64(sc.b[sc.i:])
	}
	sc.i += size
	return v, nil
}

// line skips a newline-terminated argument.
func (sc *pickleScanner) line() error {
	j := bytes.IndexByte(sc.b[sc.i:], '\n')
	if j < 0 {
		return fmt.Errorf("pickle: opcode argument at byte %d has no end of line", sc.i)
	}
	sc.i += j + 1
	sc.alloc += 2 * int64(j+32)
	return nil
}

// argument skips the argument of op (at byte at).
func (sc *pickleScanner) argument(op byte, at int, arg pickleArg) error {
	switch arg.kind {
	case argFixed:
		n, err := sc.uint(arg.size)
		if err == nil && op == 0x95 { // FRAME: the frame follows, read into a buffer
			if err = sc.need(n); err == nil {
				sc.alloc += int64(n)
			}
		}
		return err
	case argLine:
		for range arg.size {
			if err := sc.line(); err != nil {
				return err
			}
		}
	case argCounted:
		n, err := sc.uint(arg.size)
		if err != nil {
			return err
		}
		if arg.signed && int32(n) < 0 {
			return fmt.Errorf("pickle: negative length at byte %d", at)
		}
		if err := sc.need(n); err != nil {
			return err
		}
		sc.i += int(n)
		sc.alloc += 2 * int64(n)
	}
	return nil
}

// stack applies op's effect on the unpickler's stack and checks the bounds.
func (sc *pickleScanner) stack(op byte, at int, arg pickleArg) error {
	e := arg.effect
	if op == '0' && sc.frame == 0 && len(sc.marks) > 0 { // POP of an empty frame pops its MARK
		e = stackEffect{mark: markPop}
	}
	switch e.mark {
	case markPush:
		if len(sc.marks) == maxPickleDepth {
			return fmt.Errorf("pickle: MARK at byte %d nests deeper than %d", at, maxPickleDepth)
		}
		sc.marks = append(sc.marks, sc.frame)
		sc.frame = 0
		sc.alloc += allocMark
	case markPop:
		if len(sc.marks) == 0 {
			return fmt.Errorf("pickle: opcode 0x%02x at byte %d needs a MARK, there is none", op, at)
		}
		sc.items -= sc.frame
		sc.frame = sc.marks[len(sc.marks)-1]
		sc.marks = sc.marks[:len(sc.marks)-1]
	}
	if sc.frame < int(e.pop) {
		return fmt.Errorf("pickle: opcode 0x%02x at byte %d pops %d objects, the stack has %d", op, at, e.pop, sc.frame)
	}
	sc.frame += int(e.push) - int(e.pop)
	sc.items += int(e.push) - int(e.pop)
	sc.alloc += allocObject * int64(e.push)
	switch {
	case sc.items > maxPickleStack:
		return fmt.Errorf("pickle: opcode at byte %d leaves more than %d objects on the stack", at, maxPickleStack)
	case sc.alloc > maxPickleAlloc:
		return fmt.Errorf("pickle: opcode at byte %d would take the unpickler past %d bytes of allocations", at, maxPickleAlloc)
	}
	return nil
}

type argKind uint8

const (
	argNone    argKind = iota
	argFixed           // size bytes
	argLine            // size newline-terminated lines
	argCounted         // a size-byte little-endian length, then that many bytes
)

// markOp is what an opcode does with the MARKs.
type markOp uint8

const (
	markNone markOp = iota
	markPush        // MARK
	markPop         // takes the objects above the innermost MARK, and the MARK
)

// stackEffect is an opcode's effect on the stack: its mark operation, then pop objects
// popped and push pushed.
type stackEffect struct {
	mark      markOp
	pop, push int8
}

type pickleArg struct {
	kind   argKind
	size   int
	signed bool // a counted length read as int32 (negative is invalid)
	effect stackEffect
}

// pickleArgs gives each opcode's argument, as Python's pickletools describes them, and
// its stack effect.
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
		'T': {argCounted, 4, true, stackEffect{}}, 'U': {argCounted, 1, false, stackEffect{}}, 'X': {argCounted, 4, false, stackEffect{}},
		'B': {argCounted, 4, false, stackEffect{}}, 'C': {argCounted, 1, false, stackEffect{}}, '\x8a': {argCounted, 1, false, stackEffect{}},
		'\x8b': {argCounted, 4, true, stackEffect{}}, '\x8c': {argCounted, 1, false, stackEffect{}}, '\x8d': {argCounted, 8, false, stackEffect{}},
		'\x8e': {argCounted, 8, false, stackEffect{}}, '\x96': {argCounted, 8, false, stackEffect{}},
	}
	for op, a := range counted {
		m[op] = a
	}
	for ops, e := range pickleEffects {
		for _, op := range []byte(ops) {
			a := m[op]
			a.effect = e
			m[op] = a
		}
	}
	return m
}()

// pickleEffects gives the stack effect of the opcodes (pickletools' stack_before and
// stack_after); opcodes not listed (PROTO, FRAME) leave the stack alone.
var pickleEffects = map[string]stackEffect{
	"(": {mark: markPush},
	// push one object: constants, strings, bytes, globals, memo gets, empty containers
	"FIJKLMNPSTUVXcghj}])GBC\x82\x83\x84\x88\x89\x8a\x8b\x8c\x8d\x8e\x8f\x96\x97": {push: 1},
	".0":              {pop: 1},                         // STOP, POP
	"1":               {mark: markPop},                  // POP_MARK
	"2":               {pop: 1, push: 2},                // DUP
	"pqr\x94":         {pop: 1, push: 1},                // PUT, MEMOIZE: need a top
	"Q\x85\x98":       {pop: 1, push: 1},                // BINPERSID, TUPLE1, READONLY_BUFFER
	"Rab\x81\x86\x93": {pop: 2, push: 1},                // REDUCE, APPEND, BUILD, NEWOBJ, TUPLE2, STACK_GLOBAL
	"s\x87\x92":       {pop: 3, push: 1},                // SETITEM, TUPLE3, NEWOBJ_EX
	"dilot\x91":       {mark: markPop, push: 1},         // DICT, INST, LIST, OBJ, TUPLE, FROZENSET
	"eu\x90":          {mark: markPop, pop: 1, push: 1}, // APPENDS, SETITEMS, ADDITEMS: the container stays
}
