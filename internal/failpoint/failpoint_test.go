package failpoint

import (
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"slices"
	"testing"
)

// All lists every failpoint constant declared in failpoint.go, once: a
// failpoint missing from All would never be crashed at by the suite.
func TestAllListsEveryFailpoint(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "failpoint.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			for _, v := range spec.(*ast.ValueSpec).Values {
				if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					declared = append(declared, constant.StringVal(constant.MakeFromLiteral(lit.Value, lit.Kind, 0)))
				}
			}
		}
	}
	if len(declared) == 0 {
		t.Fatal("found no failpoint constants")
	}
	all := slices.Clone(All)
	slices.Sort(declared)
	slices.Sort(all)
	if !slices.Equal(declared, all) {
		t.Fatalf("failpoint.All = %q\ndeclared     = %q", all, declared)
	}
	if len(slices.Compact(all)) != len(All) {
		t.Fatal("failpoint.All lists a failpoint twice")
	}
}
