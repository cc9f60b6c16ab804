package limits_test

import (
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/limits"
	"github.com/switchyard-dev/switchyard/limits/limitstest"
)

func TestMemoryStore_Conformance(t *testing.T) {
	t.Parallel()
	limitstest.Run(t, func(t *testing.T, now func() time.Time) (limits.Store, limits.UsageStore) {
		s := limits.NewMemoryStore(now)
		return s, s
	})
}
