package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-dev/switchyard/broker"
)

func init() {
	broker.Register("nats", func(ctx context.Context, u *url.URL) (broker.Driver, error) {
		return Open(ctx, u)
	})
}

// NATS headers the driver writes. Portable fields travel in the body as a
// broker envelope; these carry what the driver itself needs.
const (
	headerRunAt      = "Sy-Run-At"      // unix nanoseconds, on delayed messages
	headerDeadLetter = "Sy-Dead-Letter" // broker.EncodeDeadLetter JSON, on dead letters
	headerID         = "Sy-Id"          // message ID, on dead letters (also undecodable ones)
	headerAttempt    = "Sy-Attempt"     // attempt number at dead-lettering time
)

// Consumer names that are not per lane.
const (
	delayedConsumer  = "delayed"
	advisoryConsumer = "advisories"
	// delayedAckWait bounds how late a delayed message can be when the
	// process moving it dies mid-move.
	delayedAckWait = 10 * time.Second
	// maxDeadLetterHeader bounds the dead-letter record kept in a header.
	maxDeadLetterHeader = 32 << 10
)

// Driver is a broker.Driver on NATS JetStream. Open it through
// broker.Open("nats://…") or with Open.
type Driver struct {
	cfg  *config
	nc   *natsgo.Conn
	js   jetstream.JetStream
	acks *pubAcks // Publish's acknowledgements (puback.go)
	caps broker.Capabilities
	log  *slog.Logger

	liveStream jetstream.Stream // live and delayed subjects (work queue)
	dlqStream  jetstream.Stream // dead letters (work queue)
	names      names

	mu        sync.Mutex
	consumers map[consumerKey]*laneConsumer
	nakked    map[string]map[uint64]time.Time // lane → stream seq → nack delay end (this process only)
	nakUsed   atomic.Bool                     // set once nakked holds anything

	keepMu sync.Mutex
	kept   map[*handle]struct{} // deliveries whose lease outlasts AckWait (lease.go)

	// fetched, when set (tests only), runs in Receive after messages were
	// fetched, before they are turned into deliveries.
	fetched func()

	closed  atomic.Bool
	closing <-chan struct{} // closed by Close: waiting fetches give up
	stop    context.CancelFunc
	bg      sync.WaitGroup
}

var _ broker.Driver = (*Driver)(nil)

// names are the stream names and subjects of one namespace.
type names struct {
	prefix   string // sy.<ns>
	live     string // SY_<ns>
	dlq      string // SY_<ns>_DLQ
	adv      string // SY_<ns>_ADV
	advSubj  string // $JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.SY_<ns>.*
	delayAll string // sy.<ns>.delayed.>
}

func newNames(ns string) names {
	n := names{
		prefix: "sy." + ns,
		live:   "SY_" + ns,
		dlq:    "SY_" + ns + "_DLQ",
		adv:    "SY_" + ns + "_ADV",
	}
	n.advSubj = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + n.live + ".*"
	n.delayAll = n.prefix + ".delayed.>"
	return n
}

func (n names) liveSubj(lane string) string    { return n.prefix + ".live." + token(lane) }
func (n names) delayedSubj(lane string) string { return n.prefix + ".delayed." + token(lane) }
func (n names) dlqSubj(lane string) string     { return n.prefix + ".dlq." + token(lane) }

type consumerKey struct {
	lane string
	dlq  bool
}

// laneConsumer is the durable pull consumer of one lane's live or
// dead-letter subject.
type laneConsumer struct {
	lane string
	dlq  bool
	name string
	c    jetstream.Consumer
	wait time.Duration // the consumer's AckWait: the lease
}

// Open connects to the server named by u, creates or checks the namespace's
// streams, and starts the background loops that move due delayed messages
// and dead-letter messages that reached the consumer's delivery limit.
func Open(ctx context.Context, u *url.URL) (*Driver, error) {
	cfg, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	nc, err := cfg.connect(ctx)
	if err != nil {
		return nil, err
	}
	d, err := newDriver(ctx, cfg, nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return d, nil
}

func newDriver(ctx context.Context, cfg *config, nc *natsgo.Conn) (*Driver, error) {
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncTimeout(cfg.publishTimeout),
		jetstream.WithPublishAsyncMaxPending(4*cfg.maxBatch),
		jetstream.WithDefaultTimeout(cfg.connectTimeout),
	)
	if err != nil {
		return nil, classify("open", err)
	}
	d := &Driver{
		cfg:       cfg,
		nc:        nc,
		js:        js,
		log:       slog.Default().With("broker", "nats", "server", cfg.redactedServer(), "namespace", cfg.namespace),
		names:     newNames(cfg.nsToken),
		consumers: map[consumerKey]*laneConsumer{},
		nakked:    map[string]map[uint64]time.Time{},
		kept:      map[*handle]struct{}{},
	}
	if err := d.ensureTopology(ctx); err != nil {
		return nil, err
	}
	if d.acks, err = newPubAcks(nc); err != nil {
		return nil, classify("open: publish acknowledgements", err)
	}
	maxSize := int(nc.MaxPayload()) - 64<<10
	if maxSize < 4<<10 {
		maxSize = int(nc.MaxPayload()) / 2
	}
	dupWindow := d.liveStream.CachedInfo().Config.Duplicates
	d.caps = broker.Capabilities{
		MaxDelay:          0, // delays of any length: see the delayed subjects
		MaxLease:          0, // leases beyond AckWait are kept alive (lease.go)
		LeaseExtension:    true,
		Dedup:             true,
		DedupWindow:       dupWindow,
		Ordering:          false,
		DeadLetterReasons: true,
		MaxAttempts:       false,
		MaxMessageSize:    maxSize,
		MaxBatch:          cfg.maxBatch,
		OldestReadyAge:    true,
	}
	delayed, err := d.ensureConsumer(ctx, d.liveStream, jetstream.ConsumerConfig{
		Durable:       delayedConsumer,
		FilterSubject: d.names.delayAll,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       delayedAckWait,
		MaxDeliver:    -1,
		MaxAckPending: -1,
	})
	if err != nil {
		return nil, err
	}
	advStream, err := d.js.Stream(ctx, d.names.adv)
	if err != nil {
		return nil, classify("open: advisory stream", err)
	}
	adv, err := d.ensureConsumer(ctx, advStream, jetstream.ConsumerConfig{
		Durable:       advisoryConsumer,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxDeliver:    -1,
		MaxAckPending: 1000,
	})
	if err != nil {
		return nil, err
	}
	bg, stop := context.WithCancel(context.Background())
	d.stop = stop
	d.closing = bg.Done()
	d.bg.Add(3)
	go d.keeper(bg)
	go d.loop(bg, "delayed", delayed, 100, d.moveDelayed)
	go d.loop(bg, "advisories", adv, 10, d.handleAdvisory)
	return d, nil
}

// ensureTopology creates the namespace's streams or checks that the ones
// found are work-queue streams on the expected subjects.
func (d *Driver) ensureTopology(ctx context.Context) error {
	var err error
	d.liveStream, err = d.ensureStream(ctx, jetstream.StreamConfig{
		Name:        d.names.live,
		Description: "Switchyard live and delayed lanes of namespace " + d.cfg.namespace,
		Subjects:    []string{d.names.prefix + ".live.>", d.names.delayAll},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     d.cfg.storage,
		Replicas:    d.cfg.replicas,
		Duplicates:  d.cfg.dedupWindow,
		Discard:     jetstream.DiscardOld,
	})
	if err != nil {
		return err
	}
	d.dlqStream, err = d.ensureStream(ctx, jetstream.StreamConfig{
		Name:        d.names.dlq,
		Description: "Switchyard dead letters of namespace " + d.cfg.namespace,
		Subjects:    []string{d.names.prefix + ".dlq.>"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     d.cfg.storage,
		Replicas:    d.cfg.replicas,
		Duplicates:  d.cfg.dedupWindow,
	})
	if err != nil {
		return err
	}
	_, err = d.ensureStream(ctx, jetstream.StreamConfig{
		Name:        d.names.adv,
		Description: "Switchyard: MAX_DELIVERIES advisories of " + d.names.live,
		Subjects:    []string{d.names.advSubj},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     d.cfg.storage,
		Replicas:    d.cfg.replicas,
		MaxAge:      7 * 24 * time.Hour,
	})
	return err
}

func (d *Driver) ensureStream(ctx context.Context, want jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := d.js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = d.js.CreateStream(ctx, want)
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) {
			switch apiErr.ErrorCode {
			case jetstream.JSErrCodeStreamNameInUse:
				// Created concurrently by another process: check theirs.
				s, err = d.js.Stream(ctx, want.Name)
			case errCodeSubjectsOverlap:
				// The server also answers a concurrent create of the same
				// stream this way (seen with three processes opening one
				// new namespace at once). If the stream of this name is
				// there now, it is that one: check it. Otherwise the
				// overlap is another stream's, and the error stands.
				if got, gerr := d.js.Stream(ctx, want.Name); gerr == nil {
					s, err = got, nil
				}
			}
		}
	}
	if err != nil {
		return nil, classify("open: stream "+want.Name, err)
	}
	got := s.CachedInfo().Config
	var bad []string
	if got.Retention != jetstream.WorkQueuePolicy {
		bad = append(bad, fmt.Sprintf("retention is %s, need workqueue", got.Retention))
	}
	for _, subj := range want.Subjects {
		if !slices.Contains(got.Subjects, subj) {
			bad = append(bad, fmt.Sprintf("subjects %v lack %s", got.Subjects, subj))
		}
	}
	if got.Storage != want.Storage {
		bad = append(bad, fmt.Sprintf("storage is %s, the URL asks for %s", got.Storage, want.Storage))
	}
	if got.Sealed || got.DenyDelete {
		bad = append(bad, "it is sealed or denies deletes")
	}
	if len(bad) > 0 {
		return nil, broker.KindError("open", broker.Permanent, broker.ErrInvalid,
			"nats: existing stream %s does not fit Switchyard: %v (delete it or use another namespace)", want.Name, bad)
	}
	return s, nil
}

// ensureConsumer finds the durable consumer or creates it, then checks that
// its configuration is what the driver needs. NATS 2.9 silently updates a
// consumer on a create with a different configuration and ignores options
// it does not know, so the configuration is always read back and compared.
func (d *Driver) ensureConsumer(ctx context.Context, s jetstream.Stream, want jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	stream := s.CachedInfo().Config.Name
	c, err := s.Consumer(ctx, want.Durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		if _, err = s.CreateConsumer(ctx, want); err == nil {
			c, err = s.Consumer(ctx, want.Durable)
		}
	}
	if err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && (apiErr.ErrorCode == 10099 || apiErr.ErrorCode == 10100) {
			return nil, broker.KindError("open", broker.Permanent, broker.ErrInvalid,
				"nats: consumer %s on stream %s: another consumer's filter overlaps %q (%v); remove consumers Switchyard did not create", want.Durable, stream, want.FilterSubject, err)
		}
		return nil, classify(fmt.Sprintf("consumer %s on stream %s", want.Durable, stream), err)
	}
	got := c.CachedInfo().Config
	var bad []string
	if got.FilterSubject != want.FilterSubject || len(got.FilterSubjects) > 0 {
		bad = append(bad, fmt.Sprintf("filter is %q%v, need %q", got.FilterSubject, got.FilterSubjects, want.FilterSubject))
	}
	if got.DeliverSubject != "" {
		bad = append(bad, "it is a push consumer, need pull")
	}
	if got.AckPolicy != jetstream.AckExplicitPolicy {
		bad = append(bad, fmt.Sprintf("ack policy is %s, need explicit", got.AckPolicy))
	}
	if got.AckWait != want.AckWait {
		bad = append(bad, fmt.Sprintf("ack wait is %s, the URL asks for ack_wait=%s", got.AckWait, want.AckWait))
	}
	if got.MaxDeliver != want.MaxDeliver {
		bad = append(bad, fmt.Sprintf("max deliver is %d, the URL asks for %d", got.MaxDeliver, want.MaxDeliver))
	}
	if got.MaxAckPending != want.MaxAckPending {
		bad = append(bad, fmt.Sprintf("max ack pending is %d, the URL asks for %d", got.MaxAckPending, want.MaxAckPending))
	}
	if len(got.BackOff) > 0 {
		bad = append(bad, "it has a redelivery backoff, which changes leases")
	}
	if len(bad) > 0 {
		return nil, broker.KindError("open", broker.Permanent, broker.ErrInvalid,
			"nats: existing consumer %s on stream %s does not fit: %v (delete it, or open with the same settings)", want.Durable, stream, bad)
	}
	return c, nil
}

// consumer returns the lane's live or dead-letter consumer, creating it on
// first use.
func (d *Driver) consumer(ctx context.Context, lane string, dlq bool) (*laneConsumer, error) {
	if err := broker.ValidateName("lane", lane); err != nil {
		return nil, err
	}
	key := consumerKey{lane, dlq}
	d.mu.Lock()
	defer d.mu.Unlock()
	if lc := d.consumers[key]; lc != nil {
		return lc, nil
	}
	s, subj, name := d.liveStream, d.names.liveSubj(lane), "live-"+token(lane)
	if dlq {
		s, subj, name = d.dlqStream, d.names.dlqSubj(lane), "dlq-"+token(lane)
	}
	maxDeliver := d.cfg.maxDeliver
	if dlq {
		maxDeliver = -1
	}
	c, err := d.ensureConsumer(ctx, s, jetstream.ConsumerConfig{
		Durable:       name,
		FilterSubject: subj,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       d.cfg.ackWait,
		MaxDeliver:    maxDeliver,
		MaxAckPending: d.cfg.maxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, err
	}
	lc := &laneConsumer{lane: lane, dlq: dlq, name: name, c: c, wait: d.cfg.ackWait}
	d.consumers[key] = lc
	return lc, nil
}

// Capabilities reports what JetStream does natively (see the package
// documentation).
func (d *Driver) Capabilities() broker.Capabilities { return d.caps }

// Close stops the background loops and closes the connection. Unacked
// deliveries come back after their AckWait. It is safe to call twice.
func (d *Driver) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	d.stop()
	d.bg.Wait()
	d.acks.close()
	_ = d.nc.FlushTimeout(time.Second)
	d.nc.Close()
	return nil
}

// Conn returns the driver's NATS connection, for tests and tools that need
// the raw client. Closing it breaks the driver.
func (d *Driver) Conn() *natsgo.Conn { return d.nc }

// StreamNames returns the names of the live, dead-letter and advisory
// streams of the driver's namespace.
func (d *Driver) StreamNames() (live, dlq, advisories string) {
	return d.names.live, d.names.dlq, d.names.adv
}

// LiveSubject returns the subject a lane's ready messages are published to;
// a foreign publisher can put messages there (they are dead-lettered as
// undecodable unless they are broker envelopes).
func (d *Driver) LiveSubject(lane string) string { return d.names.liveSubj(lane) }

func (d *Driver) checkOpen(op string) error {
	if d.closed.Load() {
		return broker.ClosedError(op)
	}
	return nil
}
