package limits

import (
	"strings"
)

// Field names one dimension of a Key.
type Field string

// The dimensions a limit can be keyed by.
const (
	Provider Field = "provider"
	Model    Field = "model"
	Tenant   Field = "tenant"
	Kind     Field = "kind"
	Tool     Field = "tool"
)

var fields = []Field{Provider, Model, Tenant, Kind, Tool}

// Key says who makes a call: which provider and model (or tool), for which
// tenant and which workflow kind. Empty fields are unknown or not
// applicable.
type Key struct {
	Provider string
	Model    string
	Tenant   string
	Kind     string
	Tool     string
}

// Get returns the value of field f.
func (k Key) Get(f Field) string {
	switch f {
	case Provider:
		return k.Provider
	case Model:
		return k.Model
	case Tenant:
		return k.Tenant
	case Kind:
		return k.Kind
	case Tool:
		return k.Tool
	}
	return ""
}

// String renders the non-empty fields as "provider=openai,model=gpt-x".
func (k Key) String() string {
	var b strings.Builder
	for _, f := range fields {
		if v := k.Get(f); v != "" {
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteString(string(f))
			b.WriteByte('=')
			b.WriteString(v)
		}
	}
	return b.String()
}

// matches reports whether every non-empty field of pattern equals k's.
func (k Key) matches(pattern Key) bool {
	for _, f := range fields {
		if p := pattern.Get(f); p != "" && p != k.Get(f) {
			return false
		}
	}
	return true
}

// escape makes a value safe inside a bucket name (separators are '|' and
// '=').
func escape(s string) string {
	if !strings.ContainsAny(s, "|=%") {
		return s
	}
	r := strings.NewReplacer("%", "%25", "|", "%7C", "=", "%3D")
	return r.Replace(s)
}

func validField(f Field) bool {
	for _, g := range fields {
		if f == g {
			return true
		}
	}
	return false
}
