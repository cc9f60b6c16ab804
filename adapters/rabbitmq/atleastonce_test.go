package rabbitmq

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
)

// Tests of at-least-once dead-lettering: a delayed message whose work queue
// refuses it (max-length with reject-publish) or does not exist when it
// expires must stay in its delay queue and come back once the work queue
// takes it again. With the previous topology (classic delay queues,
// at-most-once dead-lettering) every such message was dropped silently.

// dlxTimeoutKey is the broker setting after which RabbitMQ's dead-letter
// worker resends a dead letter its target did not confirm (default 180 s).
// A worker reads it when its queue starts.
const dlxTimeoutKey = "dead_letter_worker_publisher_confirm_timeout"

// dlxEnvMu, and across test processes (go test -count, several packages or
// checkouts at once) an flock on dlxEnvLock, serialise the tests that
// change dlxTimeoutKey, so that each reads the broker's own value and
// restores it.
var dlxEnvMu sync.Mutex

const dlxEnvLock = "/tmp/switchyard-rabbitmq-dlx-env.lock"

func ctlEval(ctx context.Context, expr string) (string, error) {
	out, err := exec.CommandContext(ctx, "rabbitmqctl", "eval", expr).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("rabbitmqctl eval %s: %v: %s", expr, err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

var envValue = regexp.MustCompile(`^\{ok,(\d+)\}$`)

// withFastDLXRetry runs declare while the broker's dead-letter workers
// resend unconfirmed dead letters after 1 s instead of 180 s, so that the
// queues declare creates retry fast, then restores the setting. It skips
// the test when rabbitmqctl cannot reach the broker.
func withFastDLXRetry(t *testing.T, declare func() error) {
	t.Helper()
	needCtl(t)
	dlxEnvMu.Lock()
	defer dlxEnvMu.Unlock()
	lf, err := os.OpenFile(dlxEnvLock, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Skipf("lock file: %v", err)
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		t.Skipf("lock %s: %v", dlxEnvLock, err)
	}
	defer syscall.Flock(int(lf.Fd()), syscall.LOCK_UN)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	old, err := ctlEval(ctx, "application:get_env(rabbit, "+dlxTimeoutKey+").")
	if err != nil {
		t.Skipf("rabbitmqctl eval is unusable: %v", err)
	}
	restore := "application:unset_env(rabbit, " + dlxTimeoutKey + ")."
	if m := envValue.FindStringSubmatch(old); m != nil {
		restore = "application:set_env(rabbit, " + dlxTimeoutKey + ", " + m[1] + ")."
	} else if old != "undefined" {
		t.Skipf("unexpected %s value %q", dlxTimeoutKey, old)
	}
	if _, err := ctlEval(ctx, "application:set_env(rabbit, "+dlxTimeoutKey+", 1000)."); err != nil {
		t.Skipf("rabbitmqctl eval is unusable: %v", err)
	}
	defer func() {
		rctx, rcancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer rcancel()
		if _, err := ctlEval(rctx, restore); err != nil {
			t.Errorf("restoring %s: %v", dlxTimeoutKey, err)
			return
		}
		if now, err := ctlEval(rctx, "application:get_env(rabbit, "+dlxTimeoutKey+")."); err != nil || now != old {
			t.Errorf("%s is %q after restore, was %q (%v)", dlxTimeoutKey, now, old, err)
		}
	}()
	err = declare()
	// The queues' dead-letter workers start with their leaders, just after
	// the declare returns: let them read the setting.
	time.Sleep(500 * time.Millisecond)
	if err != nil {
		t.Fatalf("declare: %v", err)
	}
}

// setPolicy applies a policy to queue (an exact name) until the test ends.
func setPolicy(t *testing.T, queue, definition string) {
	t.Helper()
	name := "switchyard-test-" + randHex(4)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := rabbitmqctl(ctx, "set_policy", "-p", "/", "--apply-to", "queues", "--priority", "100", name, "^"+regexp.QuoteMeta(queue)+"$", definition); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := rabbitmqctl(ctx, "clear_policy", "-p", "/", name); err != nil {
			t.Errorf("clear policy: %v", err)
		}
	})
}

// rawChannel opens a confirm-mode channel of a connection of the test's
// own, closed at the end of the test.
func rawChannel(t *testing.T) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(testenv.RabbitMQ.Endpoint(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	return ch
}

// awaitRefusing waits until a probe publish to queue is refused (the policy
// took effect). Probes the queue accepted carry body "probe".
func awaitRefusing(t *testing.T, ch *amqp.Channel, queue string) {
	t.Helper()
	for range 100 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false, amqp.Publishing{Body: []byte("probe")})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		acked, err := dc.WaitContext(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if !acked {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("queue %s never refused a publish", queue)
}

// openDelayLane opens a driver on a new namespace and declares lane's
// work queue and its delay queue for delay, with the broker's dead-letter
// retry shortened while they are created (withFastDLXRetry); the
// namespace is deleted when the test ends.
func openDelayLane(t *testing.T, lane string, delay time.Duration) (string, *Driver) {
	t.Helper()
	u := testURL(t, newNS(t), "", "", nil)
	t.Cleanup(func() { cleanupNamespace(u, lane) })
	d := openDriver(t, u)
	withFastDLXRetry(t, func() error {
		_, err := d.declareDelay(ctxT(t, 20*time.Second), "test", lane, bucketFor(delay))
		return err
	})
	return u, d
}

// publishDelayed publishes n messages to lane that run after delay, with
// IDs m-0…m-(n-1), each Publish call with a bounded context.
func publishDelayed(t *testing.T, d broker.Driver, lane string, n int, delay time.Duration) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	var msgs []*broker.Message
	runAt := time.Now().Add(delay)
	for i := range n {
		id := fmt.Sprintf("m-%d", i)
		ids[id] = true
		msgs = append(msgs, &broker.Message{ID: id, Lane: lane, Kind: "k", Body: []byte(id), RunAt: runAt, EnqueuedAt: time.Now()})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rs, err := d.Publish(ctx, msgs)
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	for _, r := range rs {
		if r.Err != nil {
			t.Fatalf("publish %s: %v", r.ID, r.Err)
		}
	}
	return ids
}

// awaitDelayedGone waits until the lane's delay queues report no message
// (the delayed ones expired), then a little longer for their dead-lettering
// to be tried.
func awaitDelayedGone(t *testing.T, d *Driver, lane string) {
	t.Helper()
	for range 200 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		st, err := d.Stats(ctx, lane)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if st.Delayed == 0 {
			time.Sleep(time.Second)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("delayed messages never expired")
}

// drain receives and acks from lane until every ID of want came, or
// within passes, then once more to catch duplicates, and reports lost and
// duplicated IDs.
func drain(t *testing.T, d broker.Driver, lane string, want map[string]bool, within time.Duration) (lost, dups int) {
	t.Helper()
	seen := map[string]int{}
	got := 0
	deadline := time.Now().Add(within)
	extra := false
	for {
		if got >= len(want) && !extra {
			extra = true
			deadline = time.Now().Add(2 * time.Second)
		}
		if !time.Now().Before(deadline) {
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		ds, err := d.Receive(ctx, broker.ReceiveRequest{Lane: lane, Max: 50, Wait: min(time.Until(deadline), time.Second), Lease: time.Minute})
		if err != nil {
			cancel()
			t.Fatalf("receive: %v", err)
		}
		if len(ds) > 0 {
			if err := d.Ack(ctx, ds); err != nil {
				cancel()
				t.Fatalf("ack: %v", err)
			}
		}
		cancel()
		for _, dv := range ds {
			if !want[dv.ID] {
				continue // a probe
			}
			if seen[dv.ID]++; seen[dv.ID] == 1 {
				got++
			} else {
				dups++
			}
		}
	}
	return len(want) - got, dups
}

// TestDelayed_WorkQueueRefuses: delayed messages expire while their work
// queue is at its max-length with reject-publish (a policy), and come back,
// once each, as consumers drain it. A regression test: it passes on the
// previous topology too (on RabbitMQ 3.10 a classic queue's at-most-once
// dead-lettering enqueues into a quorum queue past its max-length), but an
// at-least-once dead-letter worker is refused and must retry.
func TestDelayed_WorkQueueRefuses(t *testing.T) {
	const lane, n, delay = "work", 100, 300 * time.Millisecond
	_, d := openDelayLane(t, lane, delay)
	work := d.cfg.workQueue(lane)
	// The work queue holds at most 10 messages: probes fill it.
	setPolicy(t, work, `{"max-length":10,"overflow":"reject-publish"}`)
	awaitRefusing(t, rawChannel(t), work)
	want := publishDelayed(t, d, lane, n, delay)
	awaitDelayedGone(t, d, lane)
	// Consumers take the probes and then the delayed messages, ten at a
	// time at most: the queue keeps refusing while they drain it.
	lost, dups := drain(t, d, lane, want, 90*time.Second)
	t.Logf("%d delayed messages expired into a refusing work queue: %d lost, %d duplicated", n, lost, dups)
	if lost != 0 || dups != 0 {
		t.Fatalf("%d lost, %d duplicated of %d; want 0 and 0", lost, dups, n)
	}
}

// TestDelayed_WorkQueueDeleted: the work queue is deleted while messages
// wait in a delay queue (published with a RunAt, or nacked with a delay:
// a retry with backoff) and declared again (by a driver that opens after
// they expired); they come back once each. Fails on the previous topology
// (100 of 100 lost in each: at-most-once dead-lettering drops what it
// cannot route).
func TestDelayed_WorkQueueDeleted(t *testing.T) {
	for _, mode := range []string{"runat", "nack"} {
		t.Run(mode, func(t *testing.T) {
			// A delay that outlasts the nacks: a message back in the work
			// queue when the test deletes it is lost by the test's hand.
			const lane, n, delay = "work", 100, 3 * time.Second
			u, d := openDelayLane(t, lane, delay)
			var want map[string]bool
			if mode == "runat" {
				want = publishDelayed(t, d, lane, n, delay)
			} else {
				want = publishDelayed(t, d, lane, n, 0)
				for left := n; left > 0; {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					ds, err := d.Receive(ctx, broker.ReceiveRequest{Lane: lane, Max: left, Wait: time.Second, Lease: time.Minute})
					for _, dv := range ds {
						if err == nil {
							err = d.Nack(ctx, dv, delay)
						}
					}
					cancel()
					if err != nil {
						t.Fatal(err)
					}
					if len(ds) == 0 {
						t.Fatalf("%d messages did not come to be nacked", left)
					}
					left -= len(ds)
				}
			}
			if st, err := d.Stats(ctxT(t, 20*time.Second), lane); err != nil || st.Delayed != n {
				t.Fatalf("before the delete: %+v, %v; want all %d delayed", st, err, n)
			}
			// No publish is in flight: deleting a quorum queue during
			// publishes closes the publishing connection on RabbitMQ 3.x.
			if _, err := rawChannel(t).QueueDelete(d.cfg.workQueue(lane), false, false, false); err != nil {
				t.Fatal(err)
			}
			awaitDelayedGone(t, d, lane)
			d2 := openDriver(t, u)
			lost, dups := drain(t, d2, lane, want, 60*time.Second)
			t.Logf("%d delayed messages (%s) expired while their work queue was deleted: %d lost, %d duplicated", n, mode, lost, dups)
			if lost != 0 || dups != 0 {
				t.Fatalf("%d lost, %d duplicated of %d; want 0 and 0", lost, dups, n)
			}
		})
	}
}

// TestReceive_QueueDeletedUnderneath: a driver that declared a lane finds
// its work queue deleted behind its back; Receive (consume, and poll with
// Wait 0) declares it again instead of failing with 404 NOT_FOUND, and the
// lane works again. Fails on the previous version (a permanent 404).
func TestReceive_QueueDeletedUnderneath(t *testing.T) {
	const lane = "work"
	ns := newNS(t)
	u := testURL(t, ns, "", "", nil)
	t.Cleanup(func() { cleanupNamespace(u, lane) })
	for _, wait := range []time.Duration{time.Second, 0} {
		t.Run(fmt.Sprint("wait=", wait), func(t *testing.T) {
			d := openDriver(t, u)
			mustPublish(t, d, &broker.Message{Lane: lane, Kind: "k", Body: []byte("before")})
			if _, err := rawChannel(t).QueueDelete(d.cfg.workQueue(lane), false, false, false); err != nil {
				t.Fatal(err)
			}
			ds, err := d.Receive(ctxT(t, 20*time.Second), broker.ReceiveRequest{Lane: lane, Max: 1, Wait: wait})
			if err != nil || len(ds) != 0 {
				t.Fatalf("receive from a deleted queue: %d, %v; want 0, nil", len(ds), err)
			}
			mustPublish(t, d, &broker.Message{Lane: lane, Kind: "k", Body: []byte("after")})
			dv := receiveOne(t, d, broker.ReceiveRequest{Lane: lane, Lease: time.Minute}, 20*time.Second)
			if dv == nil || string(dv.Body) != "after" {
				t.Fatalf("after the redeclare: %v", dv)
			}
			if err := d.Ack(ctxT(t, 20*time.Second), []*broker.Delivery{dv}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestConcurrentDeclare: eight drivers declare one namespace's queues at
// once and publish 400 messages, half of them delayed; none is refused or
// lost, none duplicated.
func TestConcurrentDeclare(t *testing.T) {
	const lane, drivers, per = "work", 8, 50
	ns := newNS(t)
	u := testURL(t, ns, "", "", nil)
	t.Cleanup(func() { cleanupNamespace(u, lane) })
	ds := make([]*Driver, drivers)
	for i := range ds {
		ds[i] = openDriver(t, u)
	}
	want := map[string]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, drivers*per)
	start := make(chan struct{})
	for i, d := range ds {
		var msgs []*broker.Message
		for j := range per {
			id := fmt.Sprintf("d%d-%d", i, j)
			want[id] = true
			m := &broker.Message{ID: id, Lane: lane, Kind: "k", Body: []byte(id), EnqueuedAt: time.Now()}
			if j%2 == 1 {
				m.RunAt = time.Now().Add(200 * time.Millisecond)
			}
			msgs = append(msgs, m)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			rs, err := d.Publish(ctx, msgs)
			if err != nil {
				errs <- err
				return
			}
			for _, r := range rs {
				if r.Err != nil {
					errs <- fmt.Errorf("%s: %w", r.ID, r.Err)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	var refused []error
	for err := range errs {
		refused = append(refused, err)
	}
	if len(refused) > 0 {
		t.Fatalf("%d of %d publishes failed, first: %v", len(refused), drivers*per, refused[0])
	}
	lost, dups := drain(t, ds[0], lane, want, 60*time.Second)
	if lost != 0 || dups != 0 {
		t.Fatalf("%d lost, %d duplicated of %d; want 0 and 0", lost, dups, drivers*per)
	}
}

// TestDeclare_PreviousVersionQueues: queues declared with the previous
// version's arguments (classic delay queue, at-most-once work queue) are
// used as they are; a queue with other arguments is a permanent error.
func TestDeclare_PreviousVersionQueues(t *testing.T) {
	const lane, delay = "work", 100 * time.Millisecond
	ns := newNS(t)
	u := testURL(t, ns, "", "", nil)
	t.Cleanup(func() { cleanupNamespace(u, lane, "other") })
	d := openDriver(t, u)
	ch := rawChannel(t)
	work, dlq := d.cfg.workQueue(lane), d.cfg.deadQueue(lane)
	if _, err := ch.QueueDeclare(work, true, false, false, false, amqp.Table{
		amqp.QueueTypeArg: amqp.QueueTypeQuorum, "x-delivery-limit": int64(d.cfg.deliveryLimit),
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq, "x-dead-letter-strategy": "at-most-once",
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(d.cfg.delayQueue(lane, bucketFor(delay)), true, false, false, false, amqp.Table{
		amqp.QueueTypeArg: amqp.QueueTypeClassic, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": work,
	}); err != nil {
		t.Fatal(err)
	}
	want := publishDelayed(t, d, lane, 3, delay)
	if lost, dups := drain(t, d, lane, want, 20*time.Second); lost != 0 || dups != 0 {
		t.Fatalf("previous version's queues: %d lost, %d duplicated", lost, dups)
	}
	other := d.cfg.workQueue("other")
	if _, err := ch.QueueDeclare(other, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeClassic}); err != nil {
		t.Fatal(err)
	}
	rs, err := d.Publish(ctxT(t, 20*time.Second), []*broker.Message{{Lane: "other", Kind: "k", Body: []byte("x")}})
	if err == nil {
		err = rs[0].Err
	}
	if broker.ClassOf(err) != broker.Permanent || !strings.Contains(fmt.Sprint(err), other) {
		t.Fatalf("publish to a queue with foreign arguments: %v; want a permanent error naming it", err)
	}
}

// TestPublish_RefusedIsResent: a publish the work queue refuses (max-length
// 1 with reject-publish, full) is sent again after a backoff, with a new
// copy ID, and lands once when the queue has room; before, it failed at
// once with a transient error. The backoff is lengthened so that the test
// can make room between the refusal and the resend.
func TestPublish_RefusedIsResent(t *testing.T) {
	needCtl(t)
	const lane = "work"
	ns := newNS(t)
	u := testURL(t, ns, "", "", nil)
	t.Cleanup(func() { cleanupNamespace(u, lane) })
	d := openDriver(t, u)
	d.pub.backoff = []time.Duration{3 * time.Second, 3 * time.Second, 3 * time.Second}
	mustPublish(t, d, &broker.Message{ID: "filler", Lane: lane, Kind: "k", Body: []byte("filler")})
	work := d.cfg.workQueue(lane)
	setPolicy(t, work, `{"max-length":1,"overflow":"reject-publish"}`)
	awaitRefusing(t, rawChannel(t), work)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		rs, err := d.Publish(ctx, []*broker.Message{{ID: "late", Lane: lane, Kind: "k", Body: []byte("late"), EnqueuedAt: time.Now()}})
		if err == nil {
			err = rs[0].Err
		}
		done <- err
	}()
	for i := 0; d.pub.resends.Load() == 0; i++ {
		if i == 200 {
			t.Fatal("the publish was never refused")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Taking the filler makes room: the resend lands.
	lost, dups := drain(t, d, lane, map[string]bool{"filler": true, "late": true}, 30*time.Second)
	if err := <-done; err != nil {
		t.Fatalf("refused publish, resent: %v", err)
	}
	if lost != 0 || dups != 0 {
		t.Fatalf("%d lost, %d duplicated of the filler and the resent message", lost, dups)
	}
}
