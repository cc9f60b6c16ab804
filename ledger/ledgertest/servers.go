package ledgertest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

func serversOf(t *testing.T, l ledger.Ledger) ledger.Servers {
	t.Helper()
	s := ledger.ServersOf(l)
	if s == nil {
		t.Skip("this store has no server registry (ledger.Servers is optional)")
	}
	return s
}

// Servers: a store implementing ledger.Servers keeps one record per
// server ID, stamps its heartbeat with the store's clock, replaces it on
// every registration, lists records by ID, removes and prunes them, and
// refuses bad records with broker.ErrInvalid.
func Servers(t *testing.T, mk Maker) {
	l := mk(t)
	reg := serversOf(t, l)
	c := ctx(t)
	if got, err := reg.ListServers(c); err != nil || len(got) != 0 {
		t.Fatalf("ListServers on an empty store = %+v, %v", got, err)
	}
	started := time.Now().Add(-time.Minute).Truncate(time.Microsecond)
	b := ledger.Server{ID: "w-b", Host: "host-b", PID: 42, Lanes: []string{"interactive", "batch"},
		Slots: 8, Busy: 3, Version: "v1.2.3", Started: started, Interval: 10 * time.Second,
		Heartbeat: time.Unix(1, 0)} // ignored: the store stamps it
	a := ledger.Server{ID: "w-a", Host: "host-a", PID: 7, Lanes: []string{"scheduled"}, Slots: 2,
		Started: started, Interval: time.Second}
	before := time.Now().Add(-time.Second)
	for _, s := range []ledger.Server{b, a} {
		if err := reg.RegisterServer(c, s); err != nil {
			t.Fatalf("RegisterServer %s: %v", s.ID, err)
		}
	}
	got, err := reg.ListServers(c)
	if err != nil || len(got) != 2 || got[0].ID != "w-a" || got[1].ID != "w-b" {
		t.Fatalf("ListServers = %+v, %v; want w-a, w-b", got, err)
	}
	g := got[1]
	if g.Host != "host-b" || g.PID != 42 || !slices.Equal(g.Lanes, b.Lanes) || g.Slots != 8 || g.Busy != 3 ||
		g.Version != "v1.2.3" || !g.Started.Equal(started) || g.Interval != 10*time.Second {
		t.Errorf("w-b read back as %+v, registered %+v", g, b)
	}
	if g.Heartbeat.Before(before) || g.Heartbeat.After(time.Now().Add(time.Second)) {
		t.Errorf("w-b heartbeat %v is not the store's now", g.Heartbeat)
	}
	if g.Gone(time.Now()) || !g.Gone(time.Now().Add(time.Minute)) {
		t.Errorf("Gone: a fresh record with a 10s interval must be live now and gone a minute later")
	}
	if len(got[0].Lanes) != 1 || got[0].Busy != 0 || got[0].Version != "" {
		t.Errorf("w-a read back as %+v", got[0])
	}

	// A second registration replaces the record.
	b.Busy, b.Lanes = 8, []string{"batch"}
	if err := reg.RegisterServer(c, b); err != nil {
		t.Fatal(err)
	}
	got, err = reg.ListServers(c)
	if err != nil || len(got) != 2 || got[1].Busy != 8 || !slices.Equal(got[1].Lanes, []string{"batch"}) ||
		got[1].Heartbeat.Before(g.Heartbeat) {
		t.Fatalf("after re-registering w-b: %+v, %v", got, err)
	}

	// Bad records are refused, and nothing is written.
	for name, bad := range map[string]ledger.Server{
		"empty id":       {Started: started},
		"long id":        {ID: strings.Repeat("x", broker.MaxKeyLen+1), Started: started},
		"control char":   {ID: "w\n1", Started: started},
		"negative pid":   {ID: "w-bad", PID: -1, Started: started},
		"busy > slots":   {ID: "w-bad", Slots: 1, Busy: 2, Started: started},
		"negative slots": {ID: "w-bad", Slots: -1, Started: started},
		"bad lane":       {ID: "w-bad", Lanes: []string{"no,comma"}, Started: started},
		"neg interval":   {ID: "w-bad", Interval: -time.Second, Started: started},
	} {
		wantIs(t, "RegisterServer with "+name, reg.RegisterServer(c, bad), broker.ErrInvalid)
	}
	wantIs(t, "RemoveServer of an empty id", reg.RemoveServer(c, ""), broker.ErrInvalid)
	if got, _ := reg.ListServers(c); len(got) != 2 {
		t.Fatalf("refused registrations wrote records: %+v", got)
	}

	// Remove: gone at once; removing again does nothing.
	if err := reg.RemoveServer(c, "w-a"); err != nil {
		t.Fatal(err)
	}
	if err := reg.RemoveServer(c, "w-a"); err != nil {
		t.Fatalf("removing a removed server: %v", err)
	}
	got, err = reg.ListServers(c)
	if err != nil || len(got) != 1 || got[0].ID != "w-b" {
		t.Fatalf("after RemoveServer(w-a): %+v, %v", got, err)
	}

	// Prune deletes only records whose heartbeat is before the cut.
	if n, err := reg.PruneServers(c, time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Fatalf("PruneServers an hour ago = %d, %v; want 0", n, err)
	}
	if n, err := reg.PruneServers(c, time.Now().Add(time.Second)); err != nil || n != 1 {
		t.Fatalf("PruneServers now = %d, %v; want 1", n, err)
	}
	if got, err := reg.ListServers(c); err != nil || len(got) != 0 {
		t.Fatalf("after pruning: %+v, %v", got, err)
	}

	// Through WithCodec (the root package wraps every ledger): the same
	// registry.
	if ledger.ServersOf(ledger.WithCodec(l, nopCodec{})) == nil {
		t.Error("ServersOf does not see through WithCodec")
	}
}

// nopCodec seals nothing; it only makes WithCodec wrap.
type nopCodec struct{}

func (nopCodec) Seal(_ context.Context, p, _ []byte) ([]byte, error) { return p, nil }
func (nopCodec) Open(_ context.Context, s, _ []byte) ([]byte, error) { return s, nil }
