package testenv

import (
	"errors"
	"strings"
	"testing"
)

func TestHostPort(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"amqp://guest:guest@127.0.0.1:5672/": "127.0.0.1:5672",
		"amqp://mq/":                         "mq:5672",
		"nats://127.0.0.1:4222":              "127.0.0.1:4222",
		"127.0.0.1:6379":                     "127.0.0.1:6379",
		"http://127.0.0.1:9324":              "127.0.0.1:9324",
		"postgres://postgres@db/test":        "db:5432",
	}
	for in, want := range cases {
		if got, err := HostPort(in); err != nil || got != want {
			t.Errorf("HostPort(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := HostPort("no-port-here"); err == nil {
		t.Error("HostPort of a bare word succeeded")
	}
}

// TestResolve_Unreachable: an endpoint that refuses connections gives the
// reason (with the password hidden), and a silent default says so.
func TestResolve_Unreachable(t *testing.T) {
	t.Setenv("SWITCHYARD_TEST_ONLY_URL", "amqp://user:secret@127.0.0.1:1/")
	s := Service{Name: "test-only", EnvVar: "SWITCHYARD_TEST_ONLY_URL"}
	ep, why := s.find()
	if ep != "" || !strings.Contains(why, "not reachable") || strings.Contains(why, "secret") {
		t.Fatalf("find() = %q, %q; want unreachable without the password", ep, why)
	}
	old := dialCheck
	defer func() { dialCheck = old }()
	dialCheck = func(string) error { return errors.New("refused") }
	t.Setenv("SWITCHYARD_TEST_ONLY_URL", "")
	s = Service{Name: "test-only-2", EnvVar: "SWITCHYARD_TEST_ONLY_URL", Default: "127.0.0.1:1"}
	if ep, why := s.find(); ep != "" || !strings.Contains(why, "nothing at the default") {
		t.Fatalf("find() = %q, %q", ep, why)
	}
}
