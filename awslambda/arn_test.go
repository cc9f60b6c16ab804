package awslambda

import (
	"strings"
	"testing"
	"time"
)

func FuzzQueueOfARN(f *testing.F) {
	for _, s := range []string{"arn:aws:sqs:us-east-1:000000000000:ns_interactive", "", ":", "no-colons", "arn:aws:sqs:::"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, arn string) {
		q := queueOfARN(arn)
		if strings.Contains(q, ":") || !strings.HasSuffix(arn, q) {
			t.Fatalf("queueOfARN(%q) = %q", arn, q)
		}
	})
}

func TestDurations_P90(t *testing.T) {
	d := newDurations()
	if got := d.p90("k"); got != 0 {
		t.Fatalf("p90 of nothing = %s", got)
	}
	for i := 1; i <= 100; i++ {
		d.add("k", time.Duration(i)*time.Millisecond)
	}
	// The window keeps the last 64 (37..100 ms): p90 is the 57th, 94 ms.
	if got := d.p90("k"); got != 94*time.Millisecond {
		t.Fatalf("p90 = %s, want 94ms", got)
	}
}
