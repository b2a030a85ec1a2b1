package engine

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSchedulerIsTheManagersOneDriver checks what kvcache's and sched's
// docs say: the engine's code only reads its kvcache.Manager; every call
// that changes it goes through the scheduler.
func TestSchedulerIsTheManagersOneDriver(t *testing.T) {
	changes := []string{"Allocate", "Append", "Commit", "Fork", "Free", "Preempt", "SwapIn", "Tick", "SetEviction", "Reset"}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if inner, ok := sel.X.(*ast.SelectorExpr); ok && inner.Sel.Name == "mgr" {
				checked++
				if slices.Contains(changes, sel.Sel.Name) {
					t.Errorf("%s: the engine calls mgr.%s itself; ask the scheduler", fset.Position(sel.Pos()), sel.Sel.Name)
				}
			}
			return true
		})
	}
	if checked == 0 {
		t.Fatal("found no use of the manager at all: the test reads the wrong files")
	}
}
