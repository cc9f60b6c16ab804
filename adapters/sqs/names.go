package sqs

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// SQS queue names: 1–80 characters of [A-Za-z0-9_-], FIFO names ending in
// ".fifo" (counted in the 80).
const (
	maxQueueName = 80
	fifoSuffix   = ".fifo"
	dlqSuffix    = "-dlq"
	delaySuffix  = "-delay"
)

// queueNames returns the live and dead-letter queue names of lane:
//
//	<namespace>_<lane>[.fifo]  and  <namespace>_<lane>-dlq[.fifo]
//
// FIFO lanes also have a standard delay queue, <namespace>_<lane>-delay
// (see delayName).
//
// The namespace holds no "_", so the first "_" ends it and namespaces never
// collide. A lane that is already a valid, short enough queue-name part and
// does not end in "-dlq" or "-delay" is used as is; any other lane is sanitised,
// shortened and suffixed with a hash of its full name, so distinct lanes
// always get distinct queues and a live queue never looks like a
// dead-letter queue.
func queueNames(namespace, lane string, fifo bool) (live, dead string) {
	budget := maxQueueName - len(namespace) - 1 - len(dlqSuffix)
	if fifo {
		budget -= len(fifoSuffix)
	}
	part := lanePart(lane, budget)
	live = namespace + "_" + part
	dead = live + dlqSuffix
	if fifo {
		live += fifoSuffix
		dead += fifoSuffix
	}
	return live, dead
}

// delayName is the standard queue that holds a FIFO lane's messages until
// their RunAt (FIFO queues have no per-message delay).
func delayName(namespace, lane string) string {
	live, _ := queueNames(namespace, lane, true)
	return live[:len(live)-len(fifoSuffix)] + delaySuffix
}

func lanePart(lane string, budget int) string {
	clean := true
	var b strings.Builder
	for i := 0; i < len(lane); i++ {
		c := lane[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
			clean = false
		}
	}
	s := b.String()
	if clean && len(s) <= budget && !strings.HasSuffix(s, dlqSuffix) && !strings.HasSuffix(s, delaySuffix) {
		return s
	}
	h := sha256.Sum256([]byte(lane))
	suffix := "_" + hex.EncodeToString(h[:5])
	if keep := budget - len(suffix); len(s) > keep {
		s = s[:max(keep, 0)]
	}
	return s + suffix
}

// FIFO group and deduplication IDs: up to 128 characters of ASCII 33–126.
const maxFIFOID = 128

func fifoSafe(s string) bool {
	if len(s) == 0 || len(s) > maxFIFOID {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 33 || s[i] > 126 {
			return false
		}
	}
	return true
}

func hashID(prefix string, parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return prefix + hex.EncodeToString(h.Sum(nil))
}

// groupID is the MessageGroupId of m on a FIFO queue. Messages with an
// ordering key share the key's group ("k:" + key); a message without one
// gets a group of its own ("m:" + ID), so unordered messages are never
// serialised behind each other.
func groupID(m *broker.Message) string {
	if m.OrderingKey != "" {
		if g := "k:" + m.OrderingKey; fifoSafe(g) {
			return g
		}
		return hashID("k#", m.OrderingKey)
	}
	if g := "m:" + m.ID; fifoSafe(g) {
		return g
	}
	return hashID("m#", m.ID)
}

// dedupID is the MessageDeduplicationId of m on a FIFO queue. With an
// idempotency key it is a hash of (tenant, key), so SQS deduplicates the
// key per lane and tenant for its 5-minute window. Without one it is a
// hash of the message's identity and its delay state, so a retried send of
// the same publish is dropped by SQS, while Broker's re-publications of a
// held message (same ID, new RunAt) are not.
func dedupID(m *broker.Message) string {
	if m.IdempotencyKey != "" {
		return hashID("i", m.Tenant, m.IdempotencyKey)
	}
	return hashID("p", m.ID, strconv.FormatInt(nanos(m.RunAt), 10), strconv.FormatInt(nanos(m.EnqueuedAt), 10),
		m.Headers[broker.HeaderHoldUntil], m.Headers[broker.HeaderAttemptBase])
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return broker.UnixNano(t) // clamped, never wrapped
}
