package launch

import (
	"bytes"
	"io"
	"sync"
)

// maxLine is the longest line kept whole; longer ones are cut into lines of this size.
const maxLine = 64 << 10

// prefixWriter copies whole lines to w, each with prefix, holding mu (shared by all the
// writers of a job) for every write so lines of different processes never interleave.
// An incomplete line waits for its end, or for Flush.
type prefixWriter struct {
	mu     *sync.Mutex
	w      io.Writer
	prefix string
	line   []byte // the incomplete last line
	out    []byte // scratch
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	n := len(b)
	p.out = p.out[:0]
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			p.line = append(p.line, b...)
			for len(p.line) >= maxLine {
				p.out = p.appendLine(p.out, p.line[:maxLine])
				p.line = append(p.line[:0], p.line[maxLine:]...)
			}
			break
		}
		line := b[:i]
		if len(p.line) > 0 {
			p.line = append(p.line, line...)
			line = p.line
		}
		for len(line) > maxLine {
			p.out = p.appendLine(p.out, line[:maxLine])
			line = line[maxLine:]
		}
		p.out = p.appendLine(p.out, line)
		p.line = p.line[:0]
		b = b[i+1:]
	}
	if len(p.out) == 0 {
		return n, nil
	}
	p.mu.Lock()
	_, err := p.w.Write(p.out)
	p.mu.Unlock()
	return n, err
}

// Flush writes an incomplete last line, ended with a newline.
func (p *prefixWriter) Flush() error {
	if len(p.line) == 0 {
		return nil
	}
	out := p.appendLine(nil, p.line)
	p.line = p.line[:0]
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err := p.w.Write(out)
	return err
}

func (p *prefixWriter) appendLine(out, line []byte) []byte {
	out = append(out, p.prefix...)
	out = append(out, line...)
	return append(out, '\n')
}
