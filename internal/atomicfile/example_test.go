package atomicfile_test

import (
	"fmt"
	"os"
	"path/filepath"

	"megago/internal/atomicfile"
)

// A file written atomically is either wholly there or not at all.
func Example() {
	dir, _ := os.MkdirTemp("", "atomicfile")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "latest_checkpointed_iteration.txt")
	if err := atomicfile.WriteFile(path, []byte("100\n")); err != nil {
		fmt.Println(err)
		return
	}
	b, _ := os.ReadFile(path)
	fmt.Print(string(b))
	// Output: 100
}
