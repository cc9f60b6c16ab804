package sqs

import (
	"regexp"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/broker"
)

var queueNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$|^[A-Za-z0-9_-]{1,75}\.fifo$`)

func TestQueueNames(t *testing.T) {
	t.Parallel()
	ns := strings.Repeat("n", maxNamespaceLen)
	lanes := []string{"interactive", "human-review", "a.b", "a:b", "a_b", "x-dlq", "x-delay", "x", strings.Repeat("l", broker.MaxNameLen),
		strings.Repeat("l", broker.MaxNameLen-1) + "m", "Batch", "batch"}
	seen := map[string]string{}
	for _, fifo := range []bool{false, true} {
		for _, lane := range lanes {
			live, dead := queueNames(ns, lane, fifo)
			names := []string{live, dead}
			if fifo {
				names = append(names, delayName(ns, lane))
			}
			for _, n := range names {
				if !queueNameRE.MatchString(n) {
					t.Errorf("lane %q (fifo %v): queue name %q is not a valid SQS name", lane, fifo, n)
				}
				if other, dup := seen[n]; dup {
					t.Errorf("queue name %q used for %q and %s", n, lane, other)
				}
				seen[n] = lane
			}
		}
	}
	if live, dead := queueNames("app", "interactive", false); live != "app_interactive" || dead != "app_interactive-dlq" {
		t.Errorf("readable names: %s, %s", live, dead)
	}
	if live, dead := queueNames("app", "interactive", true); live != "app_interactive.fifo" || dead != "app_interactive-dlq.fifo" || delayName("app", "interactive") != "app_interactive-delay" {
		t.Errorf("readable FIFO names: %s, %s", live, dead)
	}
}

func TestGroupAndDedupIDs(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", broker.MaxKeyLen)
	for _, m := range []*broker.Message{
		{ID: "id-1", OrderingKey: "user-42"},
		{ID: "id-1"},
		{ID: long},
		{ID: "id", OrderingKey: long},
		{ID: "id", OrderingKey: "has space and ünïcode"},
		{ID: "id", IdempotencyKey: long, Tenant: long},
	} {
		for _, id := range []string{groupID(m), dedupID(m)} {
			if !fifoSafe(id) {
				t.Errorf("%+v: id %q is not a valid FIFO id", m, id)
			}
		}
	}
	a := &broker.Message{ID: "1", OrderingKey: "k"}
	b := &broker.Message{ID: "2", OrderingKey: "k"}
	if groupID(a) != groupID(b) {
		t.Error("same ordering key, different groups")
	}
	if groupID(&broker.Message{ID: "1"}) == groupID(&broker.Message{ID: "2"}) {
		t.Error("messages without an ordering key share a group")
	}
	k1 := &broker.Message{ID: "1", IdempotencyKey: "k", Tenant: "a"}
	k2 := &broker.Message{ID: "2", IdempotencyKey: "k", Tenant: "a"}
	k3 := &broker.Message{ID: "3", IdempotencyKey: "k", Tenant: "b"}
	if dedupID(k1) != dedupID(k2) || dedupID(k1) == dedupID(k3) {
		t.Error("dedup IDs must follow (tenant, key)")
	}
	hop1 := &broker.Message{ID: "1", Headers: map[string]string{broker.HeaderHoldUntil: "2030-01-01T00:00:00Z"}}
	hop2 := hop1.Clone()
	hop2.RunAt = hop2.RunAt.Add(1)
	if dedupID(hop1) == dedupID(hop2) {
		t.Error("a held message's re-publication would be deduplicated against itself")
	}
}

func TestLaneOf(t *testing.T) {
	t.Parallel()
	for _, fifo := range []bool{false, true} {
		d := &Driver{cfg: &Config{Namespace: "app", FIFO: fifo}}
		for _, lane := range []string{"interactive", "human-review", "a_b", "x-dlq-ish"} {
			live, dead := queueNames("app", lane, fifo)
			names := []string{live, dead}
			if fifo {
				names = append(names, delayName("app", lane))
			}
			for _, n := range names {
				if got, ok := d.laneOf(n); !ok || got != lane {
					t.Errorf("fifo=%v: laneOf(%q) = %q, %v; want %q", fifo, n, got, ok, lane)
				}
			}
		}
		hashedLive, _ := queueNames("app", "a.b", fifo)
		other, _ := queueNames("app", "x", !fifo)
		for _, n := range []string{hashedLive, other, "other_x", "appx_y"} {
			if got, ok := d.laneOf(n); ok {
				t.Errorf("fifo=%v: laneOf(%q) = %q, want none", fifo, n, got)
			}
		}
	}
}
