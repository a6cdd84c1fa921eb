//go:build linux && (amd64 || arm64)

package dl

import "github.com/ebitengine/purego"

// platformSupported reports whether this build can open CUDA libraries.
const platformSupported = true

// dlopen opens a shared library with its symbols resolved now and kept local.
func dlopen(path string) (uintptr, error) {
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
}

// dlsym returns the address of name in the library, or 0.
func dlsym(handle uintptr, name string) uintptr {
	p, err := purego.Dlsym(handle, name)
	if err != nil {
		return 0
	}
	return p
}

// registerFunc makes *fptr (a Go func variable) call the C function at addr.
func registerFunc(fptr any, addr uintptr) { purego.RegisterFunc(fptr, addr) }
