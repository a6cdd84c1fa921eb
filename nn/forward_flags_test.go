package nn

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoFlagsInForward checks the promise of doc.go: variants are chosen when a layer
// is built, so no Forward method (Forward, ForwardWithBias, ForwardKV, any Forward…)
// contains an if or a switch whose condition reads the receiver — a field
// ("l.sp", "l.cfg.PostLN", "a.tp.Size() > 1") or a local copy of one
// ("c := a.cfg; if c.Position == RoPE"). Branches on arguments ("cache != nil",
// "p.Train") are allowed.
func TestNoFlagsInForward(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var offenders []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			offenders = append(offenders, forwardFlags(fset, d)...)
		}
	}
	if len(offenders) > 0 {
		t.Errorf("%d branches on the receiver inside Forward methods (choose the variant at construction):\n%s",
			len(offenders), strings.Join(offenders, "\n"))
	}
}

// TestNoFlagsInForwardChecker checks the checker on small methods, with how many branches it
// must report.
func TestNoFlagsInForwardChecker(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       int
	}{
		{"field", "if l.sp { return }", 1},
		{"nested field", "if l.cfg.PostLN { return }", 1},
		{"method of a field", "if l.tp.Size() > 1 { return }", 1},
		{"copy of a field", "c := l.cfg; if c.Position == RoPE { return }", 1},
		{"var copy of a field", "var c = &l.cfg; if c.Position == RoPE { return }", 1},
		{"switch tag", "switch l.act { case 1: }", 1},
		{"switch case", "switch { case l.sp: }", 1},
		{"if init", "if n := l.tp.Size(); n > 1 { return }", 1},
		{"inside a closure", "f := func() { if l.sp { return } }; f()", 1},
		{"argument", "if cache != nil && p.Train { return }", 0},
		{"value computed from a field", "n := l.tp.Size() * 2; if n > 1 { return }", 0},
		{"no branch", "l.f(x)", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "package nn\nfunc (l *L) Forward(p *Pass, cache *KVCache, x int) {\n" + tc.body + "\n}\n" +
				"func (l *L) helper() { if l.sp { return } }\n" // not a Forward method: not checked
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "x.go", src, 0)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range f.Decls {
				got = append(got, forwardFlags(fset, d)...)
			}
			if len(got) != tc.want {
				t.Errorf("%s: reported %q, want %d", tc.body, got, tc.want)
			}
		})
	}
}

// forwardFlags returns "file:line: Type.Method: condition" for each if or switch in the
// method d, if it is a Forward method, whose condition reads the receiver.
func forwardFlags(fset *token.FileSet, d ast.Decl) []string {
	fn, ok := d.(*ast.FuncDecl)
	if !ok || fn.Recv == nil || fn.Body == nil || !strings.HasPrefix(fn.Name.Name, "Forward") {
		return nil
	}
	recv := fn.Recv.List[0]
	if len(recv.Names) == 0 || recv.Names[0].Name == "_" {
		return nil // the body cannot name the receiver
	}
	rooted := map[string]bool{recv.Names[0].Name: true} // the receiver and local copies of its fields
	var out []string
	report := func(n ast.Node, conds ...ast.Node) {
		for _, c := range conds {
			if c != nil && readsReceiver(c, rooted) {
				pos := fset.Position(n.Pos())
				out = append(out, fmt.Sprintf("%s:%d: %s.%s: %s", pos.Filename, pos.Line,
					exprString(fset, recv.Type), fn.Name.Name, exprString(fset, c)))
				return
			}
		}
	}
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		switch s := n.(type) {
		case *ast.AssignStmt:
			if len(s.Lhs) == len(s.Rhs) {
				for i, rhs := range s.Rhs {
					if id, ok := s.Lhs[i].(*ast.Ident); ok && isReceiverPath(rhs, rooted) {
						rooted[id.Name] = true
					}
				}
			}
		case *ast.ValueSpec:
			if len(s.Names) == len(s.Values) {
				for i, v := range s.Values {
					if isReceiverPath(v, rooted) {
						rooted[s.Names[i].Name] = true
					}
				}
			}
		case *ast.IfStmt:
			report(s, s.Init, s.Cond)
		case *ast.SwitchStmt:
			conds := []ast.Node{s.Init, s.Tag}
			for _, cc := range s.Body.List {
				for _, e := range cc.(*ast.CaseClause).List {
					conds = append(conds, e)
				}
			}
			report(s, conds...)
		case *ast.TypeSwitchStmt:
			report(s, s.Init, s.Assign)
		}
		return true
	})
	return out
}

// isReceiverPath reports whether e is a selector chain rooted at a rooted name (l.cfg,
// l.cfg.Position, &l.cfg), which makes a local variable assigned from it a copy of the
// receiver's state.
func isReceiverPath(e ast.Expr, rooted map[string]bool) bool {
	switch x := e.(type) {
	case *ast.Ident:
		return rooted[x.Name]
	case *ast.SelectorExpr:
		return isReceiverPath(x.X, rooted)
	case *ast.UnaryExpr:
		return x.Op == token.AND && isReceiverPath(x.X, rooted)
	case *ast.ParenExpr:
		return isReceiverPath(x.X, rooted)
	case *ast.StarExpr:
		return isReceiverPath(x.X, rooted)
	}
	return false
}

// readsReceiver reports whether n contains a selector expression rooted at a rooted
// name, at any depth (l.sp, l.cfg.PostLN, a.tp.Size()).
func readsReceiver(n ast.Node, rooted map[string]bool) bool {
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok && isReceiverPath(sel.X, rooted) {
			found = true
		}
		return !found
	})
	return found
}

// exprString returns n's source text.
func exprString(fset *token.FileSet, n ast.Node) string {
	var b strings.Builder
	if err := printer.Fprint(&b, fset, n); err != nil {
		return err.Error()
	}
	return b.String()
}
