package nats

import (
	"bytes"
	"encoding/json"
	"strconv"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// pubAcks publishes to JetStream and reads the acknowledgements itself:
// core-NATS publishes with a reply subject under one wildcard inbox
// subscription, as nats.go's PublishMsgAsync does, but without its
// per-message future (two channels and a timer each), without decoding
// every acknowledgement's JSON under the publisher's lock, and with one
// result channel per Publish call. A plain acknowledgement
// ({"stream":…,"seq":…}) is recognised without decoding; duplicates and
// errors are decoded. In the ledger-off runtime benchmark nats.go's
// handleAsyncReply was about 9 % of the process's CPU.
//
// Like PublishMsgAsync it republishes a message that met no responders
// (no stream listening: a leader election) up to pubRetries times,
// pubRetryWait apart, before failing it with ErrNoStreamResponse.
type pubAcks struct {
	nc     *natsgo.Conn
	prefix string // reply subjects are prefix + a token
	sub    *natsgo.Subscription

	mu      sync.Mutex
	next    uint64
	waiting map[uint64]*pubWaiter
}

const (
	pubRetries   = 2
	pubRetryWait = 250 * time.Millisecond
)

// pubWaiter is one published message waiting for its acknowledgement.
type pubWaiter struct {
	i     int // its index in the Publish call
	msg   *natsgo.Msg
	tries int
	out   chan<- pubReply
}

// pubReply is a message's acknowledgement: ack, or err (a refusal, or no
// stream listening).
type pubReply struct {
	i   int
	ack jetstream.PubAck
	err error
}

func newPubAcks(nc *natsgo.Conn) (*pubAcks, error) {
	p := &pubAcks{nc: nc, prefix: nc.NewInbox() + ".", waiting: map[uint64]*pubWaiter{}}
	sub, err := nc.Subscribe(p.prefix+"*", p.reply)
	if err != nil {
		return nil, err
	}
	// A burst of acknowledgements must never be dropped as a slow consumer.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	p.sub = sub
	return p, nil
}

// send publishes m with a reply subject; its acknowledgement goes to out
// with index i. It returns the token to give to forget if the caller stops
// waiting.
func (p *pubAcks) send(m *natsgo.Msg, i int, out chan<- pubReply) (uint64, error) {
	p.mu.Lock()
	p.next++
	tok := p.next
	p.waiting[tok] = &pubWaiter{i: i, msg: m, out: out}
	p.mu.Unlock()
	m.Reply = p.prefix + strconv.FormatUint(tok, 36)
	if err := p.nc.PublishMsg(m); err != nil {
		p.forget(tok)
		return 0, err
	}
	return tok, nil
}

// forget drops the waiters of tokens whose acknowledgements are no longer
// awaited.
func (p *pubAcks) forget(toks ...uint64) {
	p.mu.Lock()
	for _, t := range toks {
		delete(p.waiting, t)
	}
	p.mu.Unlock()
}

var (
	ackPrefix     = []byte(`{"stream":`)
	ackError      = []byte(`"error"`)
	ackDuplicate  = []byte(`"duplicate"`)
	statusHeader  = "Status"
	statusNoReply = "503"
)

// reply handles an acknowledgement (the subscription's goroutine).
func (p *pubAcks) reply(m *natsgo.Msg) {
	tok, err := strconv.ParseUint(m.Subject[min(len(p.prefix), len(m.Subject)):], 36, 64)
	if err != nil {
		return
	}
	p.mu.Lock()
	w := p.waiting[tok]
	if w == nil {
		p.mu.Unlock()
		return // not awaited any more
	}
	if len(m.Data) == 0 && m.Header.Get(statusHeader) == statusNoReply {
		if w.tries < pubRetries {
			w.tries++
			p.mu.Unlock()
			time.AfterFunc(pubRetryWait, func() { p.retry(tok) })
			return
		}
		delete(p.waiting, tok)
		p.mu.Unlock()
		w.out <- pubReply{i: w.i, err: jetstream.ErrNoStreamResponse}
		return
	}
	delete(p.waiting, tok)
	p.mu.Unlock()
	w.out <- parsePubAck(w.i, m.Data)
}

// retry republishes a message that met no responders, if still awaited.
func (p *pubAcks) retry(tok uint64) {
	p.mu.Lock()
	w := p.waiting[tok]
	p.mu.Unlock()
	if w == nil {
		return
	}
	if err := p.nc.PublishMsg(w.msg); err != nil {
		p.mu.Lock()
		w = p.waiting[tok] // still awaited: the caller may have stopped waiting meanwhile
		delete(p.waiting, tok)
		p.mu.Unlock()
		if w != nil {
			w.out <- pubReply{i: w.i, err: err}
		}
	}
}

// parsePubAck reads an acknowledgement: a plain one without decoding it
// (only duplicates need the stored sequence), the others with the JSON
// decoder.
func parsePubAck(i int, data []byte) pubReply {
	if bytes.HasPrefix(data, ackPrefix) && !bytes.Contains(data, ackError) && !bytes.Contains(data, ackDuplicate) {
		return pubReply{i: i}
	}
	var r struct {
		jetstream.PubAck
		Error *jetstream.APIError `json:"error,omitempty"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return pubReply{i: i, err: jetstream.ErrInvalidJSAck}
	}
	if r.Error != nil {
		return pubReply{i: i, err: r.Error}
	}
	if r.Stream == "" {
		return pubReply{i: i, err: jetstream.ErrInvalidJSAck}
	}
	return pubReply{i: i, ack: r.PubAck}
}

func (p *pubAcks) close() {
	if p.sub != nil {
		_ = p.sub.Unsubscribe()
	}
}
