package cuda

// binder resolves the symbols of one opened library into Go function variables,
// collecting the names it could not find so that one error lists them all.
type binder struct {
	lib     *dynLib
	missing []string
}

// bind makes *fptr call the C function name; a missing symbol is recorded.
func (b *binder) bind(fptr any, name string) {
	if !b.optional(fptr, name) {
		b.missing = append(b.missing, name)
	}
}

// optional binds name when the library has it and reports whether it did (functions of
// newer library versions that megago can do without).
func (b *binder) optional(fptr any, name string) bool {
	addr := dlsym(b.lib.handle, name)
	if addr == 0 {
		return false
	}
	registerFunc(fptr, addr)
	return true
}

// err returns a *LoadError naming the missing symbols, or nil.
func (b *binder) err(l Library) error {
	if len(b.missing) == 0 {
		return nil
	}
	return &LoadError{Library: l.Name, Files: l.Files, Attempts: []Attempt{{Path: b.lib.path}}, Missing: b.missing}
}
