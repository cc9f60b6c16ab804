package asynq_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
)

// TestArchiveCap: with archive_max_size set, the oldest dead letters beyond
// it are deleted (and logged); without it, none are.
func TestArchiveCap(t *testing.T) {
	t.Parallel()
	addr := testenv.Redis.Endpoint(t)
	for _, tc := range []struct {
		query string
		want  int64
	}{{"", 3}, {"&archive_max_size=2", 2}} {
		ns := conformance.Namespace(t)
		t.Cleanup(func() { cleanupNamespace(addr, ns) })
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		b, err := broker.Open(ctx, "redis://"+addr+"/0?namespace="+ns+tc.query, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		var ids []string
		for i := 0; i < 3; i++ {
			r, err := b.PublishOne(ctx, &broker.Message{Lane: "batch", Kind: "k", Body: []byte{byte(i)}})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, r.ID)
			ds := recv(t, b, "batch", 1, time.Minute)
			if len(ds) != 1 {
				t.Fatal("nothing received")
			}
			if err := b.DeadLetter(ctx, ds[0], &broker.DeadLetter{Reason: broker.ReasonPermanent, Error: "x"}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond) // distinct archived-at scores
		}
		s, err := b.Stats(ctx, "batch")
		if err != nil {
			t.Fatal(err)
		}
		if s.DeadLettered != tc.want {
			t.Errorf("%q: %d dead letters kept, want %d", tc.query, s.DeadLettered, tc.want)
		}
		dead, err := b.Receive(ctx, broker.ReceiveRequest{Lane: "batch", Max: 10, Lease: time.Minute, DeadLetters: true})
		if err != nil {
			t.Fatal(err)
		}
		if tc.want == 2 && (len(dead) != 2 || dead[0].ID != ids[1] || dead[1].ID != ids[2]) {
			t.Errorf("kept %d dead letters, want the newest two", len(dead))
		}
	}
}
