package dl_test

import (
	"errors"
	"fmt"
	"strings"

	"megago/cuda/internal/dl"
)

// A library that is nowhere to be found is an error wrapping ErrNoDevice (which package
// cuda exports) that says which files were looked for and where. (Here the environment is a fake with nothing
// in it and the library's name is made up, so the output is the same on every machine.)
func ExampleLibrary_Locate() {
	lib := dl.Library{Name: "example", Files: []string{"libmegago-example.so.1"}, Toolkit: true}
	env := dl.DefaultSearchEnv()
	env.Getenv = func(k string) string {
		if k == "CUDA_HOME" {
			return "/opt/cuda"
		}
		return ""
	}
	env.GOARCH = "amd64"
	_, err := lib.Locate(env)
	fmt.Println(errors.Is(err, dl.ErrNoDevice))
	msg := err.Error()
	fmt.Println(msg[:strings.Index(msg, " in ")])
	fmt.Println(strings.Contains(msg, "/opt/cuda/lib64, /opt/cuda/lib, /opt/cuda/targets/x86_64-linux/lib"))
	// Output:
	// true
	// cuda: example not found: looked for libmegago-example.so.1
	// true
}
