package admin_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/admin"
	"github.com/switchyard-dev/switchyard/broker"
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
		{"\nops root 0123456789abcdef0", "line 2: the second field is not a role"},
		{"ops admin short", "secret (the last field) is shorter than 16 bytes"},
		{"a b c d e", "got 5 fields"},
		// Fields out of order: the secret in the role's place, the name's,
		// the tenant's.
		{"ops 0123456789abcdef0 admin", "line 1: the second field is not a role"},
		{"0123456789abcdef0 admin ops", "line 1: the secret (the last field) is shorter"},
		{"ops admin 0123456789abcdef0 acme", "line 1: the secret (the last field) is shorter"},
		{"ops acme admin 0123456789abcdef0", "line 1: the second field is not a role"},
	} {
		_, err := admin.ParseTokens(strings.NewReader(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseTokens(%q) = %v, want an error mentioning %q", c.in, err, c.want)
			continue
		}
		if !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("ParseTokens(%q) = %v, want broker.ErrInvalid", c.in, err)
		}
		for _, f := range strings.Fields(c.in) {
			if len(f) >= admin.MinSecretLen-4 && strings.Contains(err.Error(), f) {
				t.Errorf("ParseTokens(%q) = %v: the error quotes a field that may be the secret", c.in, err)
			}
		}
		if strings.Contains(err.Error(), "0123456789abcdef0") {
			t.Errorf("ParseTokens(%q): the error quotes the secret", c.in)
		}
	}
}
