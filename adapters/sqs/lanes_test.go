package sqs_test

import (
	"slices"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/conformance/testenv"
)

func TestDriver_Lanes(t *testing.T) {
	t.Parallel()
	for _, fifo := range []bool{false, true} {
		d := openDriver(t, testURL(testenv.SQS.Endpoint(t), namespace(t), fifo, ""))
		for _, lane := range []string{"interactive", "batch"} {
			if _, err := d.Stats(ctxT(t, 10*time.Second), lane); err != nil {
				t.Fatal(err)
			}
		}
		// ListQueues is eventually consistent on AWS: poll.
		var lanes []string
		deadline := time.Now().Add(90 * time.Second)
		for {
			var err error
			lanes, err = d.Lanes(ctxT(t, 10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if slices.Equal(lanes, []string{"batch", "interactive"}) || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Second)
		}
		if !slices.Equal(lanes, []string{"batch", "interactive"}) {
			t.Errorf("fifo=%v: lanes %v, want [batch interactive]", fifo, lanes)
		}
	}
}
