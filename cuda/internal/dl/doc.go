// Package dl finds, opens and binds the CUDA libraries at run time, without cgo: the
// search for a library by its file names (Library, SearchEnv), opening it with
// github.com/ebitengine/purego (Library.Open, OpenPath), and binding its C functions to
// Go func variables (Binder). It also holds the errors every binding returns:
// ErrNoDevice, LoadError (a library not found, not opened or too old) and Error (a failed
// call, with the library's own name and description of the result code). Package cuda
// re-exports the errors; everything else here is internal to cuda.
package dl
