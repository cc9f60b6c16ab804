package switchyard_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
)

// TestClient_EnqueueRefusesWrappingTimes: a delay that overflows when added
// to now, a deadline or run-at outside the supported years, and an attempt
// limit beyond broker.MaxAttemptsLimit are refused with ErrInvalid, and
// nothing is published (before, they were accepted and ran at once).
func TestClient_EnqueueRefusesWrappingTimes(t *testing.T) {
	t.Parallel()
	b, c, _ := setup(t)
	ctx := context.Background()
	for name, o := range map[string]*switchyard.EnqueueOpts{
		"delay 2562047h": {Delay: 2562047 * time.Hour},
		"deadline 9999":  {Deadline: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)},
		"deadline 0001":  {Deadline: time.Date(1, 6, 1, 0, 0, 0, 0, time.UTC)},
		"run-at 2263":    {RunAt: time.Date(2263, 1, 1, 0, 0, 0, 0, time.UTC)},
		"3e9 attempts":   {MaxAttempts: 3000000000},
	} {
		if _, err := c.Enqueue(ctx, echoArgs{N: 1}, o); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("%s: Enqueue = %v, want ErrInvalid", name, err)
		}
	}
	for _, lane := range []string{"batch", "scheduled"} {
		if s, err := b.Stats(ctx, lane); err != nil || s.Ready+s.Delayed != 0 {
			t.Errorf("lane %s after refused enqueues: %+v, %v; want empty", lane, s, err)
		}
	}
}

// TestClient_EnqueueRefusesBadOrderingKeys: an ordering key over
// broker.MaxKeyLen bytes or with a control character is a typed error at
// enqueue (never truncated), and nothing is published.
func TestClient_EnqueueRefusesBadOrderingKeys(t *testing.T) {
	t.Parallel()
	b, c, _ := setup(t)
	ctx := context.Background()
	long := make([]byte, broker.MaxKeyLen+1)
	for i := range long {
		long[i] = 'k'
	}
	for name, key := range map[string]string{
		"too long": string(long),
		"newline":  "conv\n1",
		"NUL":      "conv\x001",
		"DEL":      "conv\x7f",
	} {
		_, err := c.Enqueue(ctx, echoArgs{N: 1}, &switchyard.EnqueueOpts{OrderingKey: key})
		if !errors.Is(err, broker.ErrInvalid) || !strings.Contains(err.Error(), "ordering key") {
			t.Errorf("%s: Enqueue = %v, want ErrInvalid naming the ordering key", name, err)
		}
	}
	if _, err := c.Enqueue(ctx, echoArgs{N: 1}, &switchyard.EnqueueOpts{OrderingKey: string(long[:broker.MaxKeyLen])}); err != nil {
		t.Errorf("a key of exactly %d bytes: %v", broker.MaxKeyLen, err)
	}
	if s, err := b.Stats(ctx, "batch"); err != nil || s.Ready+s.Delayed != 1 {
		t.Errorf("lane batch: %+v, %v; want only the valid task", s, err)
	}
}
