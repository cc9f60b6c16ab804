package broker

import (
	"context"
	"strings"
	"time"
	"unicode/utf8"
)

// NackErrorer is an optional Driver interface: Nack that also records why
// the attempt failed where the broker's own tools show it (asynq's
// LastErr in its Inspector and asynqmon; a header on RabbitMQ). errText
// is never empty (Broker.NackWithError calls Nack otherwise), valid UTF-8
// and at most MaxNackErrorLen bytes. Everything else is as Nack.
type NackErrorer interface {
	NackWithError(ctx context.Context, d *Delivery, delay time.Duration, errText string) error
}

// MaxNackErrorLen bounds the error text NackWithError hands a driver;
// a longer one is cut at a character boundary, with "…" appended.
const MaxNackErrorLen = 2048

// NackErrorText is cause's text as NackWithError hands it to a driver:
// invalid UTF-8 replaced, cut to MaxNackErrorLen bytes. "" for nil.
func NackErrorText(cause error) string {
	if cause == nil {
		return ""
	}
	s := strings.ToValidUTF8(cause.Error(), "\uFFFD")
	if len(s) <= MaxNackErrorLen {
		return s
	}
	const ell = "…"
	cut := MaxNackErrorLen - len(ell)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ell
}

// NackWithError is Nack, and on a driver that can record it
// (NackErrorer) also leaves cause's text where the broker's tools show
// it. On other drivers, with a nil cause, or for a delay the Broker holds
// itself (beyond the driver's maximum), it is Nack.
func (b *Broker) NackWithError(ctx context.Context, d *Delivery, delay time.Duration, cause error) error {
	return b.nack(ctx, d, delay, NackErrorText(cause))
}

// driverNack nacks through the driver, with errText when it can record it.
func (b *Broker) driverNack(ctx context.Context, d *Delivery, delay time.Duration, errText string) error {
	if ne, ok := b.d.(NackErrorer); ok && errText != "" {
		return ne.NackWithError(ctx, d, delay, errText)
	}
	return b.d.Nack(ctx, d, delay)
}
