package switchyard_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
)

// nopDriver accepts every publish at once and stores nothing: what
// Client.Enqueue costs above the driver.
type nopDriver struct{ broker.Driver }

func (nopDriver) Capabilities() broker.Capabilities {
	return broker.Capabilities{Dedup: true, Ordering: true}
}
func (nopDriver) Publish(_ context.Context, msgs []*broker.Message) ([]broker.PublishResult, error) {
	rs := make([]broker.PublishResult, len(msgs))
	for i, m := range msgs {
		rs[i].ID = m.ID
	}
	return rs, nil
}
func (nopDriver) Close() error { return nil }

// BenchmarkClient_EnqueuePath is Client.Enqueue's own work (message,
// JSON, ID, validation, the broker's checks) over a driver that does
// nothing, ledger off.
//
//	go test . -run '^$' -bench Client_EnqueuePath -benchmem
func BenchmarkClient_EnqueuePath(b *testing.B) {
	br, err := broker.New(nopDriver{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	client, _ := switchyard.NewClient(br, nil)
	ctx := context.Background()
	payload := fmt.Sprintf("%064d", 0)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := client.Enqueue(ctx, noopArgs{Payload: payload}, nil); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
