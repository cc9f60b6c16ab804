package runtimebench

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/hibiken/asynq"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/switchyard-dev/switchyard/adapters/sqs"
)

// The raw-client rows: the broker's own Go client used directly, the way
// a competent user runs a durable work queue with it, with the runtime
// rows' task count, publisher count and prefetch and a payload of about
// the runtime's size. RawClient publishes one message per call and waits
// for the broker's confirmation before the next; RawClientBatched uses
// the client's fast path (see rawClientShapes). Consumers are the same in
// both: the client's standard consume and ack.
const (
	RawClient        Mode = "raw-client"
	RawClientBatched Mode = "raw-client-batched"
)

// rawChunk is the window of the batched shape on a broker (a
// rawClientShapes key): confirms / acks awaited every rawChunk messages
// per publisher, 100, or 10 on SQS (its batch limit). The runtime's
// ledger-off-batched row calls EnqueueMany with chunks of the same size.
func rawChunk(scheme string) int {
	if scheme == "sqs" {
		return 10
	}
	return 100
}

// rawClientShapes says, per scheme, what the two raw-client rows do; it
// is printed under the table.
var rawClientShapes = map[string]string{
	"rabbitmq": "RabbitMQ (amqp091-go): durable quorum queue; per call = Publish (persistent) on a confirm-mode channel per publisher, wait for the confirm; batched = 100 publishes, then wait for their 100 confirms; consumer = one channel, Qos(prefetch), Consume with manual Ack per delivery",
	"nats":     "NATS (jetstream): work-queue file stream; per call = js.Publish; batched = 100 PublishAsync, then wait for their acks; consumer = durable pull consumer (AckExplicit, MaxAckPending = prefetch), Consume with PullMaxMessages(prefetch), Ack per message",
	"asynq":    "Redis (asynq): per call = Client.EnqueueContext; batched = none (asynq's Client has no batch enqueue); consumer = asynq.Server, Concurrency = slots, TaskCheckInterval 50 ms, no-op handler (the asynq adapter has its own loop, not asynq's Server: the Server is what an asynq user runs)",
	"sqs":      "SQS (aws-sdk-go-v2): standard queue; per call = SendMessage; batched = SendMessageBatch of 10; consumer = ceil(prefetch/10) goroutines each ReceiveMessage (10, long poll 1 s) then DeleteMessageBatch",
}

// rawScheme maps a broker URL's scheme to a rawClientShapes key ("" when
// there is no raw-client loop for it).
func rawScheme(u *url.URL) string {
	switch strings.ToLower(u.Scheme) {
	case "rabbitmq", "amqp", "amqps":
		return "rabbitmq"
	case "nats":
		return "nats"
	case "redis", "rediss", "asynq":
		return "asynq"
	case "sqs":
		return "sqs"
	}
	return ""
}

// tally counts deliveries by message index: a run ends when every index
// has been seen; Duplicates counts the rest.
type tally struct {
	seen       []atomic.Uint32
	uniq, dups atomic.Int64
	bad        atomic.Int64
	n          int64
	all        chan struct{}
}

func newTally(n int) *tally {
	return &tally{seen: make([]atomic.Uint32, n), n: int64(n), all: make(chan struct{})}
}

// mark records a delivered body ("<index>:<padding>").
func (t *tally) mark(body []byte) {
	s := string(body)
	if k := strings.IndexByte(s, ':'); k >= 0 {
		s = s[:k]
	}
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 || i >= len(t.seen) {
		t.bad.Add(1)
		return
	}
	if t.seen[i].Add(1) == 1 {
		if t.uniq.Add(1) == t.n {
			close(t.all)
		}
		return
	}
	t.dups.Add(1)
}

// rawBody is message i's body: about the size of the runtime's encoded
// task ({"t":<unix ns>} plus its envelope's kind).
func rawBody(i int) []byte {
	return []byte(fmt.Sprintf("%d:%019d:bench.runtime", i, time.Now().UnixNano()))
}

// publishers runs workers goroutines, each opening its send with open,
// taking chunks of size chunk of [0, n) and calling send on each; the
// first error stops them. The raw-client rows and the runtime's
// ledger-off-batched row share it, so their shapes are the same.
func publishers(ctx context.Context, workers, n, chunk int, open func() (func(lo, hi int) error, func(), error)) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for p := 0; p < workers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			send, done, err := open()
			if err != nil {
				errs <- err
				return
			}
			defer done()
			for ctx.Err() == nil {
				lo := int(next.Add(int64(chunk))) - chunk
				if lo >= n {
					return
				}
				if err := send(lo, min(lo+chunk, n)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// runRawClient measures one raw-client row on the broker at brokerURL
// (which carries the run's namespace ns).
func runRawClient(ctx context.Context, cfg Config, mode Mode, brokerURL, ns string) (Result, error) {
	u, err := url.Parse(brokerURL)
	if err != nil {
		return Result{}, err
	}
	if strings.EqualFold(u.Scheme, "embedded") {
		return Result{Mode: mode, Skipped: "embedded has no client library of its own: its raw row is the adapter loop"}, nil
	}
	scheme := rawScheme(u)
	if scheme == "" {
		return Result{Mode: mode, Skipped: "no raw-client loop for " + u.Scheme + " yet"}, nil
	}
	if scheme == "asynq" && mode == RawClientBatched {
		return Result{Mode: mode, Skipped: "asynq's Client has no batch enqueue"}, nil
	}
	batched := mode == RawClientBatched
	n := cfg.Tasks
	t := newTally(n)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var start func() (stop func(), err error)
	var open func() (func(lo, hi int) error, func(), error)
	chunk := 1
	if batched {
		chunk = rawChunk(scheme)
	}
	switch scheme {
	case "rabbitmq":
		start, open, err = rawRabbitMQ(runCtx, cfg, u, ns, t, batched)
	case "nats":
		start, open, err = rawNATS(runCtx, cfg, u, ns, t, batched)
	case "asynq":
		start, open, err = rawAsynq(runCtx, cfg, u, ns, t)
	case "sqs":
		start, open, err = rawSQS(runCtx, cfg, u, ns, t, batched)
	}
	if err != nil {
		return Result{}, fmt.Errorf("raw client: %w", err)
	}
	cpu0 := processCPU()
	t0 := time.Now()
	stop, err := start()
	if err != nil {
		return Result{}, fmt.Errorf("raw client: %w", err)
	}
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- publishers(runCtx, cfg.Publishers, n, chunk, open) }()
	timedOut := func() error {
		return fmt.Errorf("%s: %d of %d messages consumed when the run timed out", mode, t.uniq.Load(), n)
	}
	published := false
	select {
	case <-t.all:
	case err := <-errc:
		published = true
		if err != nil {
			return Result{}, fmt.Errorf("%s: publish: %w", mode, err)
		}
		select {
		case <-t.all:
		case <-ctx.Done():
			return Result{}, timedOut()
		}
	case <-ctx.Done():
		return Result{}, timedOut()
	}
	el := time.Since(t0)
	cpu := processCPU() - cpu0
	if !published {
		if err := <-errc; err != nil {
			return Result{}, fmt.Errorf("%s: publish: %w", mode, err)
		}
	}
	if b := t.bad.Load(); b > 0 {
		return Result{}, fmt.Errorf("%s: %d deliveries with a body not of this run", mode, b)
	}
	return Result{Mode: mode, Tasks: n, Elapsed: el, ClientCPU: cpu / time.Duration(n), Duplicates: int(t.dups.Load())}, nil
}

func rawRabbitMQ(ctx context.Context, cfg Config, u *url.URL, ns string, t *tally, batched bool) (func() (func(), error), func() (func(lo, hi int) error, func(), error), error) {
	a := *u
	a.RawQuery = ""
	if a.Scheme == "rabbitmq" {
		a.Scheme = "amqp"
	}
	conn, err := amqp.Dial(a.String())
	if err != nil {
		return nil, nil, err
	}
	queue := "switchyard." + ns + ".rawbench" // the name CleanNamespace removes
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		conn.Close()
		return nil, nil, err
	}
	start := func() (func(), error) {
		if err := ch.Qos(cfg.Prefetch, 0, false); err != nil {
			return nil, err
		}
		ds, err := ch.ConsumeWithContext(ctx, queue, "", false, false, false, false, nil)
		if err != nil {
			return nil, err
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for d := range ds {
				t.mark(d.Body)
				_ = d.Ack(false)
			}
		}()
		return func() {
			_ = ch.Close()
			<-done
			_ = conn.Close()
		}, nil
	}
	open := func() (func(lo, hi int) error, func(), error) {
		pc, err := conn.Channel()
		if err != nil {
			return nil, nil, err
		}
		if err := pc.Confirm(false); err != nil {
			return nil, nil, err
		}
		send := func(lo, hi int) error {
			dcs := make([]*amqp.DeferredConfirmation, 0, hi-lo)
			for i := lo; i < hi; i++ {
				dc, err := pc.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false,
					amqp.Publishing{DeliveryMode: amqp.Persistent, ContentType: "application/octet-stream", Body: rawBody(i)})
				if err != nil {
					return err
				}
				dcs = append(dcs, dc)
			}
			for _, dc := range dcs {
				ok, err := dc.WaitContext(ctx)
				if err != nil {
					return err
				}
				if !ok {
					return errors.New("rabbitmq: publish nacked")
				}
			}
			return nil
		}
		return send, func() { _ = pc.Close() }, nil
	}
	return start, open, nil
}

func rawNATS(ctx context.Context, cfg Config, u *url.URL, ns string, t *tally, batched bool) (func() (func(), error), func() (func(lo, hi int) error, func(), error), error) {
	a := *u
	a.RawQuery, a.Path = "", ""
	nc, err := natsgo.Connect(a.String())
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	subject := ns + ".rawbench"
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: ns + "_rawbench", Subjects: []string{subject},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage}) // the name CleanNamespace removes
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	start := func() (func(), error) {
		cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy,
			MaxAckPending: cfg.Prefetch, AckWait: 30 * time.Second})
		if err != nil {
			return nil, err
		}
		cc, err := cons.Consume(func(m jetstream.Msg) {
			t.mark(m.Data())
			_ = m.Ack()
		}, jetstream.PullMaxMessages(cfg.Prefetch))
		if err != nil {
			return nil, err
		}
		return func() { cc.Stop(); nc.Close() }, nil
	}
	open := func() (func(lo, hi int) error, func(), error) {
		send := func(lo, hi int) error {
			if !batched {
				for i := lo; i < hi; i++ {
					if _, err := js.Publish(ctx, subject, rawBody(i)); err != nil {
						return err
					}
				}
				return nil
			}
			fs := make([]jetstream.PubAckFuture, 0, hi-lo)
			for i := lo; i < hi; i++ {
				f, err := js.PublishAsync(subject, rawBody(i))
				if err != nil {
					return err
				}
				fs = append(fs, f)
			}
			for _, f := range fs {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					return err
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		}
		return send, func() {}, nil
	}
	return start, open, nil
}

func rawAsynq(ctx context.Context, cfg Config, u *url.URL, ns string, t *tally) (func() (func(), error), func() (func(lo, hi int) error, func(), error), error) {
	opt := asynq.RedisClientOpt{Addr: u.Host}
	if p, ok := u.User.Password(); ok {
		opt.Password = p
	}
	queue := ns + ":rawbench" // keys asynq:{<ns>:rawbench}:…, which CleanNamespace removes
	client := asynq.NewClient(opt)
	start := func() (func(), error) {
		srv := asynq.NewServer(opt, asynq.Config{Concurrency: cfg.Slots, Queues: map[string]int{queue: 1},
			TaskCheckInterval: 50 * time.Millisecond, LogLevel: asynq.FatalLevel})
		if err := srv.Start(asynq.HandlerFunc(func(_ context.Context, task *asynq.Task) error {
			t.mark(task.Payload())
			return nil
		})); err != nil {
			return nil, err
		}
		return func() { srv.Shutdown(); _ = client.Close() }, nil
	}
	open := func() (func(lo, hi int) error, func(), error) {
		send := func(lo, hi int) error {
			for i := lo; i < hi; i++ {
				if _, err := client.EnqueueContext(ctx, asynq.NewTask("bench.runtime", rawBody(i)), asynq.Queue(queue)); err != nil {
					return err
				}
			}
			return nil
		}
		return send, func() {}, nil
	}
	return start, open, nil
}

func rawSQS(ctx context.Context, cfg Config, u *url.URL, ns string, t *tally, batched bool) (func() (func(), error), func() (func(lo, hi int) error, func(), error), error) {
	a := *u
	q := a.Query()
	q.Set("create", "false")
	a.RawQuery = q.Encode()
	d, err := sqs.Open(ctx, &a)
	if err != nil {
		return nil, nil, err
	}
	c := d.Client()
	out, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(ns + "_rawbench")}) // the prefix CleanNamespace removes
	if err != nil {
		d.Close()
		return nil, nil, err
	}
	qurl := out.QueueUrl
	start := func() (func(), error) {
		pollers := (cfg.Prefetch + 9) / 10
		stopc := make(chan struct{})
		var wg sync.WaitGroup
		for p := 0; p < pollers; p++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stopc:
						return
					case <-ctx.Done():
						return
					default:
					}
					r, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: qurl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
					if err != nil || len(r.Messages) == 0 {
						continue
					}
					del := make([]sqstypes.DeleteMessageBatchRequestEntry, len(r.Messages))
					for i, m := range r.Messages {
						t.mark([]byte(aws.ToString(m.Body)))
						del[i] = sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
					}
					_, _ = c.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: qurl, Entries: del})
				}
			}()
		}
		return func() { close(stopc); wg.Wait(); d.Close() }, nil
	}
	open := func() (func(lo, hi int) error, func(), error) {
		send := func(lo, hi int) error {
			if !batched {
				for i := lo; i < hi; i++ {
					if _, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: qurl, MessageBody: aws.String(string(rawBody(i)))}); err != nil {
						return err
					}
				}
				return nil
			}
			es := make([]sqstypes.SendMessageBatchRequestEntry, 0, hi-lo)
			for i := lo; i < hi; i++ {
				es = append(es, sqstypes.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(string(rawBody(i)))})
			}
			r, err := c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: qurl, Entries: es})
			if err != nil {
				return err
			}
			if len(r.Failed) > 0 {
				return fmt.Errorf("sqs: %d of a batch failed: %s", len(r.Failed), aws.ToString(r.Failed[0].Message))
			}
			return nil
		}
		return send, func() {}, nil
	}
	return start, open, nil
}
