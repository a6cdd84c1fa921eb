package tensor

// Scopes whose lifetimes overlap without nesting. A pipeline schedule runs the forward
// pass of micro-batch 1 while micro-batch 0's activations wait for their backward pass,
// then frees micro-batch 0's before micro-batch 1's: a stack cannot express that. Each
// micro-batch therefore gets a scope that is suspended between its forward and its
// backward pass:
//
//	s := dev.NewScope() // forward of micro-batch i: its activations go into s
//	...
//	s.Suspend()         // off the stack; the activations stay alive
//	...                 // other micro-batches come and go
//	s.Resume()          // backward of micro-batch i: its temporaries go into s too
//	...
//	s.Close()           // everything micro-batch i allocated returns to the pool

// Suspend takes s, which must be the innermost open scope, off its device's stack
// without releasing anything it owns: tensors created afterwards go to the scope that
// was open before s, and s's tensors stay usable until s is closed. Resume puts it back;
// Close releases it whether suspended or not. Keep on one of its tensors still moves it to
// the scope s was opened in, so close s before that scope. It panics if s is closed,
// already suspended, or not the innermost open scope.
func (s *Scope) Suspend() {
	d := s.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case s.closed:
		panic("tensor: Scope.Suspend: scope is closed")
	case s.suspended:
		panic("tensor: Scope.Suspend: scope is already suspended")
	case len(d.scopes) == 0 || d.scopes[len(d.scopes)-1] != s:
		panic("tensor: Scope.Suspend: not the innermost open scope")
	}
	d.scopes = d.scopes[:len(d.scopes)-1]
	s.suspended = true
}

// Resume makes the suspended scope s the innermost open scope again, nested in whatever
// scope is innermost now. It panics if s is not suspended.
func (s *Scope) Resume() {
	d := s.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if !s.suspended || s.closed {
		panic("tensor: Scope.Resume: scope is not suspended")
	}
	s.suspended = false
	d.scopes = append(d.scopes, s)
}

// Suspended reports whether s is suspended.
func (s *Scope) Suspended() bool {
	s.dev.mu.Lock()
	defer s.dev.mu.Unlock()
	return s.suspended
}
