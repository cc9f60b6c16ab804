package rabbitmq

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/switchyard-dev/switchyard/broker"
)

// AMQP headers the adapter sets on the messages it publishes. They live in
// the AMQP header table, not in Message.Headers.
const (
	// hdrPrior is the number of deliveries a message had before this copy
	// was published (a delayed nack, a released prefetch, a closing
	// consumer's lease). Attempt = prior + x-delivery-count + 1.
	hdrPrior = "switchyard-prior-attempts"
	// hdrDeadLetter is the JSON dead-letter record (broker.EncodeDeadLetter)
	// on messages in a dead-letter queue.
	hdrDeadLetter = "switchyard-dead-letter"
	// hdrAttempt is the attempt a message had when it was dead-lettered.
	hdrAttempt = "switchyard-attempt"
	// hdrLastError is the error of the attempt that failed before this
	// copy was published (Driver.NackWithError).
	hdrLastError = "switchyard-last-error"
	// hdrCopy identifies one published copy of a message: every publish
	// and republish sets a new one (newCopyID), and a redelivery carries
	// its copy's. It lets a redelivered copy that a republished one has
	// replaced be recognised (consumer.supersede).
	hdrCopy = "switchyard-copy"
	// hdrDeliveryCount is set by quorum queues on redeliveries.
	hdrDeliveryCount = "x-delivery-count"

	contentType = "application/vnd.switchyard.envelope"
)

// outMsg is one message to publish to a queue.
type outMsg struct {
	queue string
	pub   amqp.Publishing
}

// publisher owns the confirm-mode channel. Many goroutines publish on it at
// once; together they keep at most confirmWindow publishes unconfirmed.
//
// Every publish is mandatory: a message the broker cannot route (its queue
// was deleted behind the driver's back) comes back as a basic.return just
// before its positive confirm, and is its own call's error (returned), never
// a confirmed and silently dropped message.
type publisher struct {
	d   *Driver
	mu  sync.Mutex
	ch  *amqp.Channel
	gen uint64
	sem chan struct{}

	// backoff is refusedBackoff (tests lengthen it); resends counts the
	// refused publishes sent again.
	backoff []time.Duration
	resends atomic.Int64

	retMu    sync.Mutex
	returned map[string]returnedMsg // by hdrCopy: messages returned unroutable, not yet taken by their caller
	nret     atomic.Int64           // len(returned), read without the lock on the hot path
}

// returnedMsg is a message the broker returned, and when.
type returnedMsg struct {
	r  amqp.Return
	at time.Time
}

func newPublisher(d *Driver) *publisher {
	return &publisher{d: d, sem: make(chan struct{}, d.cfg.confirmWindow), returned: map[string]returnedMsg{}, backoff: refusedBackoff}
}

// watchReturns records the channel's returned messages. amqp091-go's reader
// goroutine hands a return to each listener in turn, blocking, before it
// reads the confirm that follows it; a return is recorded after it is
// received from first and before it is received from second, so by the
// time the reader goroutine goes on to the message's confirm (and wakes its
// caller) the record is made.
func (p *publisher) watchReturns(first, second <-chan amqp.Return) {
	for r := range first {
		if id, ok := r.Headers[hdrCopy].(string); ok {
			now := time.Now()
			p.retMu.Lock()
			// A record older than twice the confirm timeout belongs to a caller
			// that stopped waiting before its return came: drop it.
			for k, m := range p.returned {
				if now.Sub(m.at) > 2*p.d.cfg.confirmTimeout {
					delete(p.returned, k)
					p.nret.Add(-1)
				}
			}
			if _, dup := p.returned[id]; !dup {
				p.returned[id] = returnedMsg{r: r, at: now}
				p.nret.Add(1)
			}
			p.retMu.Unlock()
		}
		<-second
	}
}

// takeReturned removes and returns the record of the message with copy ID
// id, if the broker returned it.
func (p *publisher) takeReturned(id string) (amqp.Return, bool) {
	if p.nret.Load() == 0 {
		return amqp.Return{}, false
	}
	p.retMu.Lock()
	defer p.retMu.Unlock()
	m, ok := p.returned[id]
	if ok {
		delete(p.returned, id)
		p.nret.Add(-1)
	}
	return m.r, ok
}

// channel returns the confirm channel of the current connection, opening it
// when needed.
func (p *publisher) channel(ctx context.Context, op string) (*amqp.Channel, error) {
	s, err := p.d.conn.current(op)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if ch := p.ch; ch != nil && p.gen == s.gen && !ch.IsClosed() {
		p.mu.Unlock()
		return ch, nil
	}
	p.mu.Unlock()
	// Detached: a channel opened for a caller that gave up is kept for the
	// next one rather than left open and unused.
	return detached(ctx, op, func(context.Context) (*amqp.Channel, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.ch != nil && p.gen == s.gen && !p.ch.IsClosed() {
			return p.ch, nil
		}
		ch, err := s.conn.Channel()
		if err != nil {
			return nil, classify(op, err)
		}
		if err := ch.Confirm(false); err != nil {
			ch.Close() // no one else has it
			return nil, classify(op, err)
		}
		// Two unbuffered listeners: see watchReturns. amqp091-go closes
		// both when the channel closes.
		first := ch.NotifyReturn(make(chan amqp.Return))
		second := ch.NotifyReturn(make(chan amqp.Return))
		go p.watchReturns(first, second)
		p.ch, p.gen = ch, s.gen
		return ch, nil
	}, nil)
}

// refusedBackoff is the wait before each resend of publishes the broker
// refused with a negative confirm (a queue at its max-length with
// x-overflow reject-publish, a quorum queue between leaders).
var refusedBackoff = []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond, 160 * time.Millisecond}

// errRefused marks a publish the broker refused (negative confirm): it was
// not enqueued, so sending it again makes no duplicate.
var errRefused = errors.New("broker refused the message (negative confirm)")

// send publishes msgs and waits for their confirms. It returns one error per
// message: nil when the broker confirmed it; transient when it was not sent
// or the broker refused it (negative confirm) every time it was resent
// (refusedBackoff); unknown outcome when it was sent and no confirm arrived
// (channel closed, timeout, cancelled ctx), which is never resent.
func (p *publisher) send(ctx context.Context, op string, msgs []outMsg) []error {
	errs := p.sendOnce(ctx, op, msgs)
	for _, wait := range p.backoff {
		var again []outMsg
		var at []int
		for i, err := range errs {
			if errors.Is(err, errRefused) {
				m := msgs[i]
				// A new copy ID: the refused copy's return record, if
				// any, must not be taken for this one's.
				m.pub.Headers = maps.Clone(m.pub.Headers)
				if m.pub.Headers == nil {
					m.pub.Headers = amqp.Table{}
				}
				m.pub.Headers[hdrCopy] = newCopyID()
				again = append(again, m)
				at = append(at, i)
			}
		}
		if len(again) == 0 {
			break
		}
		p.resends.Add(int64(len(again)))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return errs
		case <-t.C:
		}
		for j, err := range p.sendOnce(ctx, op, again) {
			errs[at[j]] = err
		}
	}
	return errs
}

// sendOnce is one try of send: negative confirms are errRefused.
func (p *publisher) sendOnce(ctx context.Context, op string, msgs []outMsg) []error {
	errs := make([]error, len(msgs))
	ch, err := p.channel(ctx, op)
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	cctx, cancel := context.WithTimeout(ctx, p.d.cfg.confirmTimeout)
	defer cancel()
	type pending struct {
		i  int
		dc *amqp.DeferredConfirmation
	}
	pend := make([]pending, 0, min(len(msgs), cap(p.sem)))
	head := 0
	wait := func(pd pending) {
		defer func() { <-p.sem }()
		select {
		case <-pd.dc.Done():
			r, returned := p.takeReturned(copyOf(msgs[pd.i].pub))
			if pd.dc.Acked() {
				if returned {
					// Unroutable: not stored. The queue is declared again
					// on the next publish.
					p.d.forgetQueue(msgs[pd.i].queue)
					errs[pd.i] = broker.Errorf(op, broker.Transient, "broker returned the message unroutable (%d %s): queue %s does not exist", r.ReplyCode, r.ReplyText, msgs[pd.i].queue)
				}
				return
			}
			if ch.IsClosed() {
				errs[pd.i] = broker.Errorf(op, broker.UnknownOutcome, "channel closed before the publish confirm arrived: %w", broker.ErrUnknownOutcome)
				return
			}
			errs[pd.i] = broker.Errorf(op, broker.Transient, "%w", errRefused)
		case <-cctx.Done():
			p.takeReturned(copyOf(msgs[pd.i].pub)) // the caller stops waiting: drop any record
			cause := cctx.Err()
			if ctx.Err() == nil {
				cause = fmt.Errorf("no publish confirm within %s: %w", p.d.cfg.confirmTimeout, cause)
			}
			errs[pd.i] = &broker.Error{Op: op, Class: broker.UnknownOutcome, Err: cause}
		}
	}
	notSent := func(from int, cause error) {
		for j := from; j < len(msgs); j++ {
			errs[j] = cause
		}
	}
send:
	for i := range msgs {
		for acquired := false; !acquired; {
			select {
			case p.sem <- struct{}{}:
				acquired = true
				continue
			default:
			}
			if head < len(pend) {
				wait(pend[head])
				head++
				continue
			}
			select {
			case p.sem <- struct{}{}:
				acquired = true
			case <-ctx.Done():
				notSent(i, classify(op, ctx.Err()))
				break send
			}
		}
		if copyOf(msgs[i].pub) == "" {
			// Every publish carries a copy ID, by which its return (if
			// unroutable) is told apart from the others'.
			if msgs[i].pub.Headers == nil {
				msgs[i].pub.Headers = amqp.Table{}
			}
			msgs[i].pub.Headers[hdrCopy] = newCopyID()
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", msgs[i].queue, true, false, msgs[i].pub)
		if err != nil || dc == nil {
			<-p.sem
			if err == nil {
				err = errors.New("channel is not in confirm mode")
			}
			notSent(i, classify(op, err))
			break
		}
		pend = append(pend, pending{i, dc})
	}
	for ; head < len(pend); head++ {
		wait(pend[head])
	}
	return errs
}

// copyOf returns pub's copy ID (hdrCopy), or "".
func copyOf(pub amqp.Publishing) string {
	id, _ := pub.Headers[hdrCopy].(string)
	return id
}

// sendOne publishes one message and returns its error.
func (p *publisher) sendOne(ctx context.Context, op string, m outMsg) error {
	return p.send(ctx, op, []outMsg{m})[0]
}

// maxShortstr is the longest AMQP short string (message-id, type): a
// longer one makes amqp091-go fail the frame, which closes the connection
// for every lane.
const maxShortstr = 255

// publishing builds the AMQP message for an encoded envelope. The
// envelope carries the ID; the message-id property repeats it for tools
// when it fits an AMQP short string (IDs may be up to broker.MaxKeyLen,
// 256 bytes).
func publishing(m *broker.Message, body []byte, headers amqp.Table) amqp.Publishing {
	id := m.ID
	if len(id) > maxShortstr {
		id = ""
	}
	if headers == nil {
		headers = amqp.Table{}
	}
	headers[hdrCopy] = newCopyID()
	return amqp.Publishing{
		Headers:      headers,
		ContentType:  contentType,
		DeliveryMode: amqp.Persistent,
		MessageId:    id,
		Type:         m.Kind,
		Timestamp:    time.Now(),
		AppId:        "switchyard",
		Body:         body,
	}
}

// expiration formats a delay as a per-message TTL in whole milliseconds,
// rounded up so that the message never comes back early.
func expiration(d time.Duration) string {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	if ms < 1 {
		ms = 1
	}
	return fmt.Sprint(int64(ms))
}

// copyPrefix and copySeq make copy IDs: unique per process by the counter,
// across processes by the random prefix.
var (
	copyPrefix = randomPrefix()
	copySeq    atomic.Uint64
)

func randomPrefix() string {
	b := make([]byte, 8)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b) + "-"
}

// newCopyID returns a new value for hdrCopy.
func newCopyID() string {
	return copyPrefix + strconv.FormatUint(copySeq.Add(1), 36)
}
