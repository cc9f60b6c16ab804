package admin_test

import (
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/admin"
)

func TestParseTokens(t *testing.T) {
	t.Parallel()
	in := `# name role [tenant] secret
ops      admin           0123456789abcdef0
viewer   read            0123456789abcdef1

producer enqueue  acme   0123456789abcdef2
`
	got, err := admin.ParseTokens(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []admin.Token{
		{Name: "ops", Role: admin.RoleAdmin, Secret: "0123456789abcdef0"},
		{Name: "viewer", Role: admin.RoleRead, Secret: "0123456789abcdef1"},
		{Name: "producer", Role: admin.RoleEnqueue, Tenant: "acme", Secret: "0123456789abcdef2"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("token %d = %+v, want %+v", i, got[i], want[i])
		}
	}

	for _, c := range []struct{ in, want string }{
		{"ops admin", "line 1: want \"name role [tenant] secret\", got 2 fields"},
		{"\nops root 0123456789abcdef0", "line 2: token \"ops\": unknown role \"root\""},
		{"ops admin short", "secret shorter than 16 bytes"},
		{"a b c d e", "got 5 fields"},
	} {
		_, err := admin.ParseTokens(strings.NewReader(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseTokens(%q) = %v, want an error mentioning %q", c.in, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "0123456789abcdef0") {
			t.Errorf("ParseTokens(%q): the error quotes the secret", c.in)
		}
	}
}
