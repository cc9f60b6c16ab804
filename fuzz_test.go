package switchyard

import (
	"errors"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// FuzzParseCronSpec: no spec makes the cron parser panic (nor the
// schedule's Next), refusals are broker.ErrInvalid, and an accepted
// schedule's next tick is after the time asked about (or none).
func FuzzParseCronSpec(f *testing.F) {
	for _, s := range []string{"*/5 * * * *", "0 9 * * 1-5", "@hourly", "@daily", "CRON_TZ=Europe/Paris 0 9 * * *", "TZ=UTC @weekly",
		"@every 1m", "TZ=Nowhere/Else 0 * * * *", "TZ=", "60 * * * *", "* * * *", "0 0 30 2 *", "1-0 * * * *", "*/0 * * * *",
		"0 0 1 1 0-7/8", "", "   ", "@reboot", "0 0 * * SUN-SAT", "0-59/1,3-4 0-23 1-31 1-12 0-6"} {
		f.Add(s)
	}
	from := time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, spec string) {
		sched, err := parseCronSpec(spec)
		if err != nil {
			if !errors.Is(err, broker.ErrInvalid) {
				t.Fatalf("parseCronSpec(%q) = %v, not ErrInvalid", spec, err)
			}
			return
		}
		if next := sched.Next(from); !next.IsZero() && !next.After(from) {
			t.Fatalf("parseCronSpec(%q): next tick after %v is %v", spec, from, next)
		}
	})
}
