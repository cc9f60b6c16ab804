package lanes_test

import (
	"errors"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/lanes"
)

// TestErrInvalid_MatchesBroker: lane errors match broker.ErrInvalid, and
// lanes.ValidateName and broker.ValidateName apply one rule.
func TestErrInvalid_MatchesBroker(t *testing.T) {
	t.Parallel()
	err := lanes.Validate(4, []lanes.Lane{{Name: "a", Reserved: -1}})
	if !errors.Is(err, broker.ErrInvalid) || !errors.Is(err, lanes.ErrInvalid) {
		t.Errorf("Validate = %v; want it to match broker.ErrInvalid and lanes.ErrInvalid", err)
	}
	for _, name := range []string{"", "batch", "-x", "a b", "batch:fair-3", string(make([]byte, 129))} {
		le, be := lanes.ValidateName("lane", name), broker.ValidateName("lane", name)
		if (le == nil) != (be == nil) {
			t.Fatalf("%q: lanes.ValidateName = %v, broker.ValidateName = %v", name, le, be)
		}
		if le == nil {
			continue
		}
		if le.Error() != be.Error() {
			t.Errorf("%q: texts differ: %q, %q", name, le, be)
		}
		if !errors.Is(le, broker.ErrInvalid) || !errors.Is(be, lanes.ErrInvalid) || !errors.Is(be, broker.ErrPermanent) {
			t.Errorf("%q: %v / %v do not match ErrInvalid (and permanent)", name, le, be)
		}
	}
}

// TestImports_StdlibOnly: the policy package depends on nothing outside the
// standard library (its tests may).
func TestImports_StdlibOnly(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") {
				t.Errorf("%s imports %s: package lanes uses the standard library only", name, path)
			}
		}
	}
}
