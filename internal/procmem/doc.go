// Package procmem reads the process's own memory use for reports: the peak resident set
// size, which `megago bench` and the examples' end-of-run memory lines print.
package procmem
