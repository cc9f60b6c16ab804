package sqliteopen

import (
	"context"
	"errors"
	"testing"
)

func TestRetryBusy(t *testing.T) {
	n := 0
	err := RetryBusy(context.Background(), func() error {
		if n++; n < 3 {
			return errors.New("sqlite: database is locked (5) (SQLITE_BUSY)")
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("err %v after %d tries; want success on the third", err, n)
	}
	other := errors.New("not a database")
	n = 0
	if err := RetryBusy(context.Background(), func() error { n++; return other }); err != other || n != 1 {
		t.Fatalf("err %v after %d tries; want the error at once", err, n)
	}
}
