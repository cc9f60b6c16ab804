package asynq

import (
	"strconv"
	"time"
)

// keys holds the Redis keys of one queue.
type keys struct {
	name, prefix, task                                 string
	pending, active, lease, scheduled, retry, archived string
	paused, olock, dlease, notify, processed, failed   string
}

func (d *Driver) keys(lane string) *keys {
	q := d.QueueName(lane)
	p := "asynq:{" + q + "}:"
	return &keys{
		name: q, prefix: p, task: p + "t:",
		pending: p + "pending", active: p + "active", lease: p + "lease",
		scheduled: p + "scheduled", retry: p + "retry", archived: p + "archived",
		paused: p + "paused", olock: p + "sy:olock", dlease: p + "sy:dlease", notify: p + "sy:notify",
		processed: p + "processed", failed: p + "failed",
	}
}

func (k *keys) idem(tenant, key string) string {
	return k.prefix + "sy:idem:" + strconv.Itoa(len(tenant)) + ":" + tenant + ":" + key
}

func (k *keys) daily(counter string, now time.Time) string {
	return counter + ":" + now.UTC().Format("2006-01-02")
}

// statsTTL matches asynq's expiry of its daily counters.
const statsTTL = 90 * 24 * time.Hour

func score(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)
}
