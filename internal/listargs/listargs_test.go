package listargs_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"megago/internal/listargs"
)

func TestJoin(t *testing.T) {
	for _, tc := range []struct {
		name       string
		args, want []string
	}{
		{"words until the next flag", []string{"--json-keys", "text", "title", "--workers", "2"}, []string{"--json-keys=text title", "--workers", "2"}},
		{"single dash", []string{"-json-keys", "text"}, []string{"--json-keys=text"}},
		{"no words", []string{"--json-keys", "--workers", "2"}, []string{"--json-keys", "--workers", "2"}},
		{"other flags untouched", []string{"--input", "a.json", "x"}, []string{"--input", "a.json", "x"}},
		{"already joined", []string{"--json-keys=a,b"}, []string{"--json-keys=a,b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, listargs.Join(tc.args, "json-keys"))
		})
	}
}

// Megatron's --data-path list as one flag value.
func ExampleJoin() {
	fmt.Printf("%q\n", listargs.Join([]string{"--data-path", "0.3", "A", "0.7", "B", "--split", "98,2,0"}, "data-path"))
	// Output:
	// ["--data-path=0.3 A 0.7 B" "--split" "98,2,0"]
}
