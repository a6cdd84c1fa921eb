//go:build !(linux && (amd64 || arm64))

package dl

import "errors"

// platformSupported reports whether this build can open CUDA libraries.
const platformSupported = false

func dlopen(string) (uintptr, error) {
	return 0, errors.New("opening CUDA libraries is supported on linux/amd64 and linux/arm64 only")
}

func dlsym(uintptr, string) uintptr { return 0 }

func registerFunc(any, uintptr) { panic("cuda: registerFunc on an unsupported platform") }
