package conformance_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/adapters/embedded"
	"github.com/switchyard-dev/switchyard/conformance"
)

// TestConformance is the package documentation's example, word for word
// (TestDocExampleIsThisFile checks it): a third party copying it gets a
// suite that passes.
func TestConformance(t *testing.T) {
	conformance.Run(t, func(t *testing.T) *conformance.Harness {
		url := "mem://" + conformance.Namespace(t)
		return &conformance.Harness{
			URL: url,
			// Bytes Switchyard did not write, put on a lane's queue with
			// the broker's own client.
			InjectRaw: func(ctx context.Context, lane string, body []byte) error {
				d, err := embedded.OpenURL(ctx, url)
				if err != nil {
					return err
				}
				defer d.Close()
				return d.InjectRaw(ctx, lane, body)
			},
			// What this harness cannot do, with the reason: those cases
			// are skipped with it, and the report lists them.
			Cannot: map[conformance.Ability]string{
				conformance.CanDisrupt:        "an in-memory broker has no server to stop",
				conformance.CanOutliveProcess: "an in-memory broker dies with the test process",
			},
		}
	})
}

// TestDocExampleIsThisFile: the example in the package documentation is
// TestConformance above, so the documented code is the code that runs.
func TestDocExampleIsThisFile(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "conformance.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	var snippet []string
	in := false
	for _, line := range strings.Split(f.Doc.Text(), "\n") {
		if strings.HasPrefix(line, "\tfunc TestConformance(") {
			in = true
		}
		if in {
			snippet = append(snippet, strings.TrimPrefix(line, "\t"))
			if line == "\t}" {
				break
			}
		}
	}
	if len(snippet) == 0 {
		t.Fatal("the package documentation has no TestConformance example")
	}
	src, err := os.ReadFile("doc_test.go")
	if err != nil {
		t.Fatal(err)
	}
	tf, err := parser.ParseFile(token.NewFileSet(), "doc_test.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var body string
	for _, d := range tf.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "TestConformance" {
			body = string(src[fn.Pos()-1 : fn.End()-1])
		}
	}
	if want := strings.Join(snippet, "\n"); body != want {
		t.Fatalf("the documented example and TestConformance differ:\n--- documented\n%s\n--- doc_test.go\n%s", want, body)
	}
}
