package dl

// Binder resolves the symbols of one opened library into Go function variables,
// collecting the names it could not find so that one error lists them all.
type Binder struct {
	lib     *Lib
	missing []string
}

// NewBinder returns a binder for the symbols of lib.
func NewBinder(lib *Lib) *Binder { return &Binder{lib: lib} }

// Bind makes *fptr call the C function name; a missing symbol is recorded.
func (b *Binder) Bind(fptr any, name string) {
	if !b.Optional(fptr, name) {
		b.missing = append(b.missing, name)
	}
}

// Optional binds name when the library has it and reports whether it did (functions of
// newer library versions that megago can do without).
func (b *Binder) Optional(fptr any, name string) bool {
	addr := dlsym(b.lib.handle, name)
	if addr == 0 {
		return false
	}
	registerFunc(fptr, addr)
	return true
}

// Err returns a *LoadError naming the missing symbols of library l, or nil.
func (b *Binder) Err(l Library) error {
	if len(b.missing) == 0 {
		return nil
	}
	return &LoadError{Library: l.Name, Files: l.Files, Attempts: []Attempt{{Path: b.lib.path}}, Missing: b.missing}
}
