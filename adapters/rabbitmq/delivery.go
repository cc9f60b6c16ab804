package rabbitmq

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/switchyard-dev/switchyard/broker"
)

// handOut turns raw deliveries into leased broker deliveries. Undecodable
// messages on a live queue are dead-lettered here and not returned.
func (c *consumer) handOut(ctx context.Context, ch *amqp.Channel, got []amqp.Delivery, leaseFor time.Duration) []*broker.Delivery {
	out := make([]*broker.Delivery, 0, len(got))
	now := time.Now()
	for _, dv := range got {
		m, err := broker.DecodeEnvelope(dv.Body)
		if err != nil && !c.dead {
			c.deadLetterUndecodable(ctx, ch, dv, err)
			continue
		}
		if c.wasSuperseded(&dv) {
			// A copy replaced it, and its ack was lost with its channel.
			c.d.log.Info("rabbitmq: dropped a redelivered message already replaced by its republished copy", "queue", c.queue, "id", dv.MessageId)
			_ = ch.Ack(dv.DeliveryTag, false)
			continue
		}
		d := &broker.Delivery{}
		if m != nil {
			d.Message = *m
		} else {
			d.Message = broker.Message{ID: dv.MessageId, Lane: c.lane, Kind: dv.Type, Body: dv.Body}
		}
		if c.dead {
			d.DeadLetter, d.Attempt = deadLetterOf(dv, c.d.cfg.deliveryLimit)
		} else {
			d.Attempt = attemptOf(dv.Headers)
		}
		l := &lease{c: c, ch: ch, tag: dv.DeliveryTag, attempt: d.Attempt, raw: dv, undecodable: m == nil, deadline: now.Add(leaseFor)}
		d.LeaseDeadline = l.deadline
		d.Handle = l
		out = append(out, d)
	}
	if len(out) > 0 {
		// Register the leases before their timers can fire.
		c.mu.Lock()
		for _, d := range out {
			l := d.Handle.(*lease)
			c.leases[l] = struct{}{}
			if l.raw.ConsumerTag != "" {
				c.out[l.raw.ConsumerTag]++
			}
		}
		c.mu.Unlock()
		for _, d := range out {
			l := d.Handle.(*lease)
			l.mu.Lock()
			l.timer = time.AfterFunc(time.Until(l.deadline), l.expire)
			l.mu.Unlock()
		}
	}
	return out
}

// deadLetterUndecodable moves a message the envelope codec rejects to the
// lane's dead-letter queue with ReasonUndecodable. If that fails the
// message is requeued; RabbitMQ's delivery limit stops it looping forever.
func (c *consumer) deadLetterUndecodable(ctx context.Context, ch *amqp.Channel, dv amqp.Delivery, cause error) {
	attempt := attemptOf(dv.Headers)
	dl := &broker.DeadLetter{Reason: broker.ReasonUndecodable, Error: cause.Error(), At: time.Now().UTC(),
		Attempts: []broker.AttemptRecord{{Attempt: attempt, Start: time.Now().UTC(), Class: "permanent", Error: cause.Error()}}}
	js, err := broker.EncodeDeadLetter(dl)
	if err == nil {
		h := copyHeaders(dv.Headers)
		h[hdrDeadLetter] = string(js)
		h[hdrAttempt] = int64(attempt)
		pub := republishing(dv, h)
		if pub.MessageId == "" {
			pub.MessageId = broker.NewID()
		}
		err = c.d.pub.sendOne(ctx, "rabbitmq: dead-letter undecodable", outMsg{queue: c.d.cfg.deadQueue(c.lane), pub: pub})
	}
	if err != nil {
		c.d.log.Warn("rabbitmq: could not dead-letter an undecodable message; requeued", "queue", c.queue, "err", err)
		_ = ch.Nack(dv.DeliveryTag, false, true)
		return
	}
	_ = ch.Ack(dv.DeliveryTag, false)
}

// attemptOf computes a live delivery's attempt from its headers. Each part
// is clamped to 0..broker.MaxAttemptsLimit, so a tampered header can neither
// wrap the attempt around nor make it negative.
func attemptOf(h amqp.Table) int {
	clamp := func(n int) int { return max(0, min(n, broker.MaxAttemptsLimit)) }
	return clamp(intHeader(h, hdrPrior)) + clamp(intHeader(h, hdrDeliveryCount)) + 1
}

// deadLetterOf reads the dead-letter record of a message in a dead-letter
// queue: the framework's header, or RabbitMQ's own delivery-limit
// dead-lettering, which carries no reason of ours.
func deadLetterOf(dv amqp.Delivery, limit int) (*broker.DeadLetter, int) {
	if v, ok := dv.Headers[hdrDeadLetter]; ok {
		var b []byte
		switch x := v.(type) {
		case string:
			b = []byte(x)
		case []byte:
			b = x
		}
		if dl, err := broker.DecodeDeadLetter(b); err == nil && dl.Reason != "" {
			return dl, intHeader(dv.Headers, hdrAttempt)
		}
	}
	dl := &broker.DeadLetter{
		Reason: broker.ReasonDeliveryLimit,
		Error: fmt.Sprintf("RabbitMQ dead-lettered the message after its delivery limit (x-delivery-limit=%d): it was delivered that many times in a row "+
			"without being settled (its consumers crashed, lost their connection or let the lease expire); nacks do not count", limit),
	}
	if deaths, ok := dv.Headers["x-death"].([]any); ok {
		for _, e := range deaths {
			if t, ok := e.(amqp.Table); ok && t["reason"] == "delivery_limit" {
				if at, ok := t["time"].(time.Time); ok {
					dl.At = at.UTC()
				}
			}
		}
	}
	return dl, intHeader(dv.Headers, hdrPrior) + limit + 1
}

// intHeader reads a count header, 0 when absent or unreadable, clamped to
// 0..math.MaxInt32: any client may set these headers, and a negative or
// huge count must not wrap an attempt number around.
func intHeader(h amqp.Table, key string) int {
	return int(max(0, min(int64(math.MaxInt32), intHeader64(h, key))))
}

func intHeader64(h amqp.Table, key string) int64 {
	switch v := h[key].(type) {
	case int:
		return int64(v)
	case int8:
		return int64(v)
	case int16:
		return int64(v)
	case int32:
		return int64(v)
	case int64:
		return v
	case uint8:
		return int64(v)
	case uint16:
		return int64(v)
	case uint32:
		return int64(v)
	case uint64:
		return int64(min(v, math.MaxInt64))
	case string:
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	return 0
}

// copyHeaders copies h without the headers RabbitMQ sets on delivery and
// dead-lettering, which must not travel with a republished copy.
func copyHeaders(h amqp.Table) amqp.Table {
	c := make(amqp.Table, len(h)+2)
	for k, v := range h {
		switch k {
		case hdrDeliveryCount, "x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason",
			"x-last-death-exchange", "x-last-death-queue", "x-last-death-reason":
			continue
		}
		c[k] = v
	}
	return c
}

// republishing builds a persistent copy of a delivery with headers h (and
// a copy ID of its own).
func republishing(dv amqp.Delivery, h amqp.Table) amqp.Publishing {
	if h == nil {
		h = amqp.Table{}
	}
	h[hdrCopy] = newCopyID()
	return amqp.Publishing{
		Headers:      h,
		ContentType:  dv.ContentType,
		DeliveryMode: amqp.Persistent,
		MessageId:    dv.MessageId,
		Type:         dv.Type,
		Timestamp:    dv.Timestamp,
		AppId:        dv.AppId,
		Body:         dv.Body,
	}
}
