package nats

import (
	"context"
	"errors"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-dev/switchyard/broker"
)

var _ broker.Browser = (*Driver)(nil)

// Browse implements broker.Browser by reading the streams by sequence
// (a direct get of the next message on the lane's subject), which neither
// delivers nor acks anything: ready messages are those past the lane
// consumer's delivered sequence, dead letters every message on the lane's
// dead-letter subject. The cursor is the stream sequence to read from.
// Ready messages have never been delivered (Attempt 0); a nacked message
// waiting for redelivery is in flight to JetStream and is not listed, as
// Stats does not count it ready.
func (d *Driver) Browse(ctx context.Context, req broker.BrowseRequest) (*broker.BrowsePage, error) {
	if err := d.checkOpen("browse"); err != nil {
		return nil, err
	}
	stream, subj := d.liveStream, d.names.liveSubj(req.Lane)
	var seq uint64 = 1
	if req.DeadLetters {
		stream, subj = d.dlqStream, d.names.dlqSubj(req.Lane)
	} else {
		lc, err := d.consumer(ctx, req.Lane, false)
		if err != nil {
			return nil, err
		}
		ci, err := lc.c.Info(ctx)
		if err != nil {
			return nil, classify("browse", err)
		}
		seq = ci.Delivered.Stream + 1
	}
	if req.After != "" {
		n, err := strconv.ParseUint(req.After, 10, 64)
		if err != nil || n == 0 {
			return nil, broker.Invalidf("browse: bad cursor %q", req.After)
		}
		seq = max(seq, n)
	}
	n := max(req.Max, 1)
	page := &broker.BrowsePage{}
	for {
		raw, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return page, nil
		}
		if err != nil {
			return nil, classify("browse", err)
		}
		if len(page.Messages) == n {
			page.Next = strconv.FormatUint(raw.Sequence, 10)
			return page, nil
		}
		seq = raw.Sequence + 1
		if req.DeadLetters {
			page.Messages = append(page.Messages, d.deadDelivery(req.Lane, raw.Data, raw.Header, raw.Sequence, raw.Time))
			continue
		}
		env, err := broker.DecodeEnvelope(raw.Data)
		if err != nil {
			// The next receive dead-letters it; show it as stored.
			env = &broker.Message{ID: "nats-" + d.names.live + "-" + strconv.FormatUint(raw.Sequence, 10), Body: raw.Data}
		}
		env.Lane = req.Lane
		page.Messages = append(page.Messages, &broker.Delivery{Message: *env})
	}
}
