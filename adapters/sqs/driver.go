package sqs

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/switchyard-dev/switchyard/broker"
)

func init() {
	broker.Register("sqs", func(ctx context.Context, u *url.URL) (broker.Driver, error) {
		return Open(ctx, u)
	})
}

// attrDeadLetter is the message attribute that carries the framework's
// dead-letter record (JSON of broker.DeadLetter) on dead-letter queues.
const attrDeadLetter = "switchyard-dead-letter"

// envOverhead bounds what broker.EncodeEnvelope adds to Message.Size: the
// magic and version, six length prefixes, two timestamps, the attempt
// limit, the header count and two length prefixes per header.
const envOverhead = 3 + 6*2 + 2*10 + 5 + 2 + broker.MaxHeaders*4

// Driver is the SQS implementation of broker.Driver. Open it with
// broker.Open("sqs://…") or with Open.
type Driver struct {
	cfg    *Config
	client *awssqs.Client
	caps   broker.Capabilities
	closed atomic.Bool

	mu    sync.Mutex
	lanes map[string]*laneQueues

	groups *groupTracker // FIFO only
	dedup  *dedupCache   // FIFO only

	bg     context.Context // cancelled by Close; background movers
	stopBg context.CancelFunc
	wg     sync.WaitGroup
	log    *slog.Logger
}

var _ broker.Driver = (*Driver)(nil)

// laneQueues are the resolved queues of one lane.
type laneQueues struct {
	mu      sync.Mutex
	ready   bool
	url     string // live queue URL
	dlqURL  string // dead-letter queue URL
	maxSize int    // the live queue's MaximumMessageSize
	dlqMax  int    // the dead-letter queue's MaximumMessageSize
	// FIFO lanes: the standard queue holding messages until their RunAt,
	// and whether this driver runs its mover.
	delayURL string
	moving   bool
	// livePace and deadPace space the short polls of the two queues
	// (receive.go).
	livePace, deadPace pollPace
}

// Open opens a driver from an sqs:// URL (see the package documentation).
// Credentials and, unless the URL names one, the region come from the
// standard AWS configuration chain.
func Open(ctx context.Context, u *url.URL) (*Driver, error) {
	cfg, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	return OpenConfig(ctx, cfg)
}

// OpenConfig opens a driver from a configuration (see Config for the
// defaults ParseURL fills in; OpenConfig fills in none).
func OpenConfig(ctx context.Context, cfg *Config) (*Driver, error) {
	if cfg == nil {
		return nil, broker.Invalidf("sqs: nil config")
	}
	if p := cfg.problems(); len(p) > 0 {
		return nil, broker.Invalidf("sqs: %s", strings.Join(p, "; "))
	}
	c := *cfg
	cfg = &c
	attempts := cfg.SDKMaxAttempts
	opts := []func(*config.LoadOptions) error{
		// The SDK retries throttling, 5xx and connection errors with
		// jittered backoff, a little: the scheduler retries above it, so
		// this retryer is deliberately short (see "Errors" in doc.go).
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = attempts
				o.MaxBackoff = 2 * time.Second
			})
		}),
		config.WithHTTPClient(awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
			t.MaxIdleConnsPerHost = 64
		})),
	}
	if cfg.Region != "" {
		opts = append(opts, config.WithRegion(cfg.Region))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		// The chain's errors name files and profiles, never secrets.
		return nil, broker.Wrap("open", broker.Permanent, fmt.Errorf("sqs: loading the AWS configuration: %w", err))
	}
	if awsCfg.Region == "" {
		return nil, broker.Invalidf("sqs: no AWS region: set ?region= in the URL or AWS_REGION")
	}
	client := awssqs.NewFromConfig(awsCfg, func(o *awssqs.Options) {
		hideWriterTo(o) // see reqbody.go
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
	})
	return newDriver(cfg, client), nil
}

func newDriver(cfg *Config, client *awssqs.Client) *Driver {
	d := &Driver{cfg: cfg, client: client, lanes: map[string]*laneQueues{}, log: cfg.Logger}
	if d.log == nil {
		d.log = slog.Default()
	}
	d.bg, d.stopBg = context.WithCancel(context.Background())
	d.caps = broker.Capabilities{
		MaxDelay:          maxDelaySQS,
		MaxLease:          maxVisibilitySQS,
		LeaseExtension:    true,
		DeadLetterReasons: true,
		MaxMessageSize:    maxMessageSize(cfg.MaxMessageSize),
		MaxBatch:          maxBatchSQS,
	}
	if cfg.FIFO {
		d.caps.Dedup = true
		d.caps.DedupWindow = 5 * time.Minute
		d.caps.Ordering = true
		d.groups = newGroupTracker()
		d.dedup = newDedupCache(5*time.Minute - 10*time.Second)
	}
	return d
}

// maxMessageSize is the largest Message.Size whose base64 envelope fits a
// queue body of maxBody bytes.
func maxMessageSize(maxBody int) int {
	return maxBody/4*3 - envOverhead
}

// Client returns the SDK client, for tests and tools.
func (d *Driver) Client() *awssqs.Client { return d.client }

// QueueURLs returns the live and dead-letter queue URLs of lane, creating
// the queues when the driver may.
func (d *Driver) QueueURLs(ctx context.Context, lane string) (live, dead string, err error) {
	lq, err := d.lane(ctx, "queues", lane)
	if err != nil {
		return "", "", err
	}
	return lq.url, lq.dlqURL, nil
}

// Capabilities reports what SQS does natively.
func (d *Driver) Capabilities() broker.Capabilities { return d.caps }

// Close releases FIFO messages the driver holds back (see Receive) and
// marks the driver closed. Delivered, unacked messages come back after
// their visibility timeouts.
func (d *Driver) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	d.stopBg()
	d.wg.Wait()
	if d.groups != nil {
		if hs := d.groups.drain(); len(hs) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			d.changeVisibility(ctx, hs, 0)
		}
	}
	return nil
}

// lane resolves (and, when allowed, creates) the queues of lane.
func (d *Driver) lane(ctx context.Context, op, lane string) (*laneQueues, error) {
	if d.closed.Load() {
		return nil, broker.ClosedError(op)
	}
	if err := broker.ValidateName("lane", lane); err != nil {
		return nil, err
	}
	d.mu.Lock()
	lq := d.lanes[lane]
	if lq == nil {
		lq = &laneQueues{}
		d.lanes[lane] = lq
	}
	d.mu.Unlock()
	lq.mu.Lock()
	defer lq.mu.Unlock()
	if lq.ready {
		return lq, nil
	}
	live, dead := queueNames(d.cfg.Namespace, lane, d.cfg.FIFO)
	dlqURL, dlqMax, err := d.resolveQueue(ctx, dead, nil, d.cfg.FIFO)
	if err != nil {
		return nil, classify(op, err)
	}
	var attrs map[string]string
	if d.cfg.Create {
		arn, err := d.client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
			QueueUrl: aws.String(dlqURL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
		})
		if err != nil {
			return nil, classify(op, err)
		}
		attrs = map[string]string{
			string(types.QueueAttributeNameRedrivePolicy): fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`,
				arn.Attributes[string(types.QueueAttributeNameQueueArn)], d.cfg.MaxReceives),
		}
	}
	url, maxSize, err := d.resolveQueue(ctx, live, attrs, d.cfg.FIFO)
	if err != nil {
		return nil, classify(op, err)
	}
	if d.cfg.FIFO {
		delayURL, _, err := d.resolveQueue(ctx, delayName(d.cfg.Namespace, lane), map[string]string{}, false)
		if err != nil {
			return nil, classify(op, err)
		}
		lq.delayURL = delayURL
	}
	lq.url, lq.dlqURL, lq.maxSize, lq.dlqMax, lq.ready = url, dlqURL, maxSize, dlqMax, true
	return lq, nil
}

// forget drops a lane's cached queues after SQS said one does not exist,
// so that the next call resolves (and recreates) them.
func (d *Driver) forget(lane string, err error) {
	var qe *types.QueueDoesNotExist
	if !errors.As(err, &qe) {
		return
	}
	d.mu.Lock()
	delete(d.lanes, lane)
	d.mu.Unlock()
}

// resolveQueue creates the queue (when allowed) or looks it up, and returns
// its URL and MaximumMessageSize.
func (d *Driver) resolveQueue(ctx context.Context, name string, extra map[string]string, fifo bool) (string, int, error) {
	var url string
	if d.cfg.Create {
		attrs := map[string]string{
			string(types.QueueAttributeNameMaximumMessageSize): strconv.Itoa(d.cfg.MaxMessageSize),
		}
		if extra == nil { // the dead-letter queue: keep dead letters as long as SQS allows
			attrs[string(types.QueueAttributeNameMessageRetentionPeriod)] = "1209600"
		}
		for k, v := range extra {
			attrs[k] = v
		}
		if fifo {
			attrs[string(types.QueueAttributeNameFifoQueue)] = "true"
		}
		out, err := d.client.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
		if err == nil {
			// Created now, or existing with exactly these attributes.
			return aws.ToString(out.QueueUrl), d.cfg.MaxMessageSize, nil
		}
		var exists *types.QueueNameExists
		if !errors.As(err, &exists) {
			return "", 0, err
		}
		// It exists with other attributes (made by hand or by an older
		// configuration): use it as it is.
	}
	out, err := d.client.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err != nil {
		return "", 0, err
	}
	url = aws.ToString(out.QueueUrl)
	attrs, err := d.client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameMaximumMessageSize},
	})
	if err != nil {
		return "", 0, err
	}
	size, err := strconv.Atoi(attrs.Attributes[string(types.QueueAttributeNameMaximumMessageSize)])
	if err != nil || size <= 0 {
		size = d.cfg.MaxMessageSize
	}
	return url, size, nil
}

// SQS bodies are text (XML 1.0 characters). A message body is the
// Switchyard envelope (broker.EncodeEnvelope) in one of two forms:
//
//	~<base64 of the envelope without Body>\n<Body as is>   when Body is valid SQS text
//	<base64 of the whole envelope>                         otherwise
//
// The first keeps JSON and other text bodies readable and a third smaller;
// "~" is outside the base64 alphabet, so the forms never mix up.
const textMark = '~'

// encodeBody is the SQS body of m.
func encodeBody(m *broker.Message) string {
	if validSQSText(m.Body) {
		head := *m
		head.Body = nil
		env := broker.EncodeEnvelope(&head)
		var b strings.Builder
		b.Grow(2 + base64.StdEncoding.EncodedLen(len(env)) + len(m.Body))
		b.WriteByte(textMark)
		b.WriteString(base64.StdEncoding.EncodeToString(env))
		b.WriteByte('\n')
		b.Write(m.Body)
		return b.String()
	}
	return base64.StdEncoding.EncodeToString(broker.EncodeEnvelope(m))
}

// decodeBody reverses encodeBody; errors match broker.ErrUndecodable.
func decodeBody(s string) (*broker.Message, error) {
	var (
		env  []byte
		body string
		text bool
		err  error
	)
	if len(s) > 0 && s[0] == textMark {
		head, rest, ok := strings.Cut(s[1:], "\n")
		if !ok {
			return nil, fmt.Errorf("%w: text envelope without a body separator", broker.ErrUndecodable)
		}
		env, err = base64.StdEncoding.DecodeString(head)
		body, text = rest, true
	} else {
		env, err = base64.StdEncoding.DecodeString(s)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: envelope is not base64", broker.ErrUndecodable)
	}
	m, err := broker.DecodeEnvelope(env)
	if err != nil {
		return nil, err
	}
	if err := broker.ValidateName("kind", m.Kind); err != nil {
		return nil, fmt.Errorf("%w: %v", broker.ErrUndecodable, err)
	}
	if text {
		if len(m.Body) > 0 {
			return nil, fmt.Errorf("%w: text envelope carries a second body", broker.ErrUndecodable)
		}
		if body != "" {
			m.Body = []byte(body)
		}
	}
	return m, nil
}

// validSQSText reports whether b can be an SQS body as it is: UTF-8 made
// of #x9, #xA, #xD, #x20–#xD7FF, #xE000–#xFFFD and #x10000–#x10FFFF.
func validSQSText(b []byte) bool {
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			if c < 0x20 && c != 0x9 && c != 0xA && c != 0xD {
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 || r >= 0xD800 && r <= 0xDFFF || r == 0xFFFE || r == 0xFFFF {
			return false
		}
		i += n
	}
	return true
}

// seconds rounds d up to whole seconds within [lo, hi].
func seconds(d time.Duration, lo, hi int32) int32 {
	s := int64((d + time.Second - 1) / time.Second)
	if s < int64(lo) {
		return lo
	}
	if s > int64(hi) {
		return hi
	}
	return int32(s)
}
