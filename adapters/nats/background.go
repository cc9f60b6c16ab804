package nats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-dev/switchyard/broker"
)

// loop pulls from a background consumer until ctx ends, with the same short
// Fetch expiries as Receive. Errors (an outage) back off up to 2 s.
func (d *Driver) loop(ctx context.Context, what string, c jetstream.Consumer, batch int, handle func(context.Context, jetstream.Msg)) {
	defer d.bg.Done()
	lc := &laneConsumer{name: what, c: c}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		msgs, err := d.fetch(ctx, lc, 1, d.cfg.pullExpiry)
		if err == nil && len(msgs) == 1 && batch > 1 {
			more, _ := d.fetch(ctx, lc, batch-1, 0)
			msgs = append(msgs, more...)
		}
		for _, m := range msgs {
			handle(ctx, m)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			d.log.Debug("nats: background pull failed", "loop", what, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
	}
}

// moveDelayed publishes a due delayed message to its lane's live subject and
// acks it; one that is not due is nacked until it is. The live publish
// carries a Nats-Msg-Id derived from the delayed message's sequence, so a
// move retried after a crash stores one live message.
func (d *Driver) moveDelayed(ctx context.Context, m jetstream.Msg) {
	md, err := m.Metadata()
	if err != nil {
		return
	}
	runAt, _ := strconv.ParseInt(m.Headers().Get(headerRunAt), 10, 64)
	if wait := time.Until(time.Unix(0, runAt)); wait > 0 {
		_ = m.NakWithDelay(wait)
		return
	}
	lane := strings.TrimPrefix(m.Subject(), d.names.prefix+".delayed.")
	out := &natsgo.Msg{Subject: d.names.prefix + ".live." + lane, Data: m.Data(), Header: natsgo.Header{}}
	out.Header.Set(jetstream.MsgIDHeader, "moved-"+d.names.live+"-"+strconv.FormatUint(md.Sequence.Stream, 10))
	if _, err := d.publishSync(ctx, "move delayed", out); err != nil {
		d.log.Warn("nats: moving a due delayed message failed; retrying", "subject", m.Subject(), "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	if err := m.DoubleAck(ctx); err != nil {
		d.log.Debug("nats: ack of a moved delayed message failed; the move repeats (deduplicated)", "err", err)
	}
}

// maxDeliveriesAdvisory is the part of
// io.nats.jetstream.advisory.v1.max_deliver the driver reads.
type maxDeliveriesAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// handleAdvisory moves a message that reached the consumer's MaxDeliver to
// the dead-letter stream with broker.ReasonDeliveryLimit and deletes it from
// the live stream, where the server would otherwise keep it for good. The
// advisories are captured by a stream, so none is lost while no driver
// runs.
func (d *Driver) handleAdvisory(ctx context.Context, m jetstream.Msg) {
	var adv maxDeliveriesAdvisory
	if err := json.Unmarshal(m.Data(), &adv); err != nil || adv.Stream != d.names.live || adv.StreamSeq == 0 {
		_ = m.Term()
		return
	}
	if err := d.deadLetterStranded(ctx, adv); err != nil {
		d.log.Warn("nats: moving a message past max_deliver to the dead-letter stream failed; retrying", "seq", adv.StreamSeq, "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	_ = m.Ack()
}

func (d *Driver) deadLetterStranded(ctx context.Context, adv maxDeliveriesAdvisory) error {
	raw, err := d.liveStream.GetMsg(ctx, adv.StreamSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil // acked or moved already
	}
	if err != nil {
		return classify("dead-letter stranded", err)
	}
	livePrefix := d.names.prefix + ".live."
	if !strings.HasPrefix(raw.Subject, livePrefix) {
		return nil
	}
	laneTok := strings.TrimPrefix(raw.Subject, livePrefix)
	lane := laneTok
	id := "nats-" + d.names.live + "-" + strconv.FormatUint(adv.StreamSeq, 10)
	if env, err := broker.DecodeEnvelope(raw.Data); err == nil {
		id = env.ID
		lane = env.Lane
	}
	dl := &broker.DeadLetter{
		Reason: broker.ReasonDeliveryLimit,
		Error:  fmt.Sprintf("delivered %d times without an ack: the consumer's max_deliver (%s) was reached", adv.Deliveries, adv.Consumer),
		At:     time.Now().UTC(),
	}
	if token(lane) != laneTok {
		lane = laneTok
	}
	if err := d.moveToDLQ(ctx, lane, adv.StreamSeq, raw.Data, id, int(adv.Deliveries), dl); err != nil {
		return err
	}
	if err := d.liveStream.DeleteMsg(ctx, adv.StreamSeq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return classify("dead-letter stranded: delete", err)
	}
	return nil
}
