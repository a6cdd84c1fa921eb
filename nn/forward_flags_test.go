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

// TestForwardTestsNoFlags checks the promise of doc.go: variants are chosen when a layer
// is built, so no Forward method (Forward, ForwardWithBias, ForwardKV, any Forward…)
// contains an if or a switch whose condition reads the receiver — a field
// ("l.sp", "l.cfg.PostLN", "a.tp.Size() > 1") or a local copy of one
// ("c := a.cfg; if c.Position == RoPE"). Branches on arguments ("cache != nil",
// "p.Train") are allowed.
func TestForwardTestsNoFlags(t *testing.T) {
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
				out = append(out, fmt.Sprintf("%s:%d: %s: %s", pos.Filename, pos.Line, fn.Name.Name, exprString(fset, c)))
				return
			}
		}
	}
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		switch s := n.(type) {
		case *ast.AssignStmt:
			for i, rhs := range s.Rhs {
				if id, ok := s.Lhs[min(i, len(s.Lhs)-1)].(*ast.Ident); ok && len(s.Lhs) == len(s.Rhs) && isReceiverPath(rhs, rooted) {
					rooted[id.Name] = true
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
