package rabbitmq

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/switchyard-dev/switchyard/broker"
)

// Close must not close the connection while a declaration whose caller
// gave up is still waiting for the broker's answer: RabbitMQ goes on
// completing it, and a cleanup that deletes the queue then can crash its
// dead-letter worker (see "Limits of the server" in the package
// documentation).

// slowDeclare starts, through withAdmin, a declaration of queue that
// signals entered and then waits for release before sending queue.declare.
// Its caller gives up (ctx cancelled) as soon as the declaration has
// started, as a Receive or Publish abandoned by a shutting-down process
// would. events gets "declared" (or the declaration's error) once the
// broker has answered.
func slowDeclare(t *testing.T, d *Driver, queue string, release <-chan struct{}, events chan<- string) {
	t.Helper()
	entered := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := make(chan error, 1)
	go func() {
		res <- d.withAdmin(ctx, "test: declare", func(ch *amqp.Channel) error {
			close(entered)
			<-release
			_, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{
				amqp.QueueTypeArg: amqp.QueueTypeQuorum, "x-delivery-limit": deadDeliveryLimit})
			if err != nil {
				events <- "declare failed: " + err.Error()
			} else {
				events <- "declared"
			}
			return err
		})
	}()
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the declaration did not start within 30s")
	}
	cancel()
	select {
	case err := <-res:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("withAdmin after its caller gave up = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("withAdmin did not return within 10s of its caller giving up")
	}
}

// TestClose_WaitsForAdmin: Close, called while a declaration its caller
// gave up is in progress, waits for the broker's answer before it closes
// the connection, and the queue exists afterwards.
func TestClose_WaitsForAdmin(t *testing.T) {
	u := testURL(t, newNS(t), "", "", nil)
	const lane = "closewait"
	t.Cleanup(func() { cleanupNamespace(u, lane) })
	d := openDriver(t, u)
	waiting := make(chan int, 1)
	d.closeHook = func(n int) { waiting <- n }
	queue := d.cfg.deadQueue(lane)
	release := make(chan struct{})
	events := make(chan string, 2)
	slowDeclare(t, d, queue, release, events)

	closed := make(chan struct{})
	go func() {
		d.Close()
		events <- "closed"
		close(closed)
	}()
	select {
	case n := <-waiting:
		if n != 1 {
			t.Errorf("Close waits for %d operations, want 1", n)
		}
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("Close did not wait for the declaration in progress")
	}
	select {
	case <-closed:
		t.Fatal("Close returned while the declaration was held")
	default:
	}
	close(release)
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return within 30s of the declaration's release")
	}
	if first, second := <-events, <-events; first != "declared" || second != "closed" {
		t.Fatalf("events %q, %q; want the declaration answered, then Close returned", first, second)
	}
	// The declaration was complete: the queue is there.
	check := openDriver(t, u)
	if err := check.withAdmin(ctxT(t, 30*time.Second), "test: check", func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		return err
	}); err != nil {
		t.Fatalf("queue %s after Close: %v", queue, err)
	}
}

// TestClose_AdminWaitBounded: an administrative operation that does not
// end delays Close by at most its bound, and what it sends after Close
// fails without reaching the broker; an operation that has not begun
// when Close starts waiting is refused.
func TestClose_AdminWaitBounded(t *testing.T) {
	u := testURL(t, newNS(t), "", "", nil)
	const lane = "closebound"
	t.Cleanup(func() { cleanupNamespace(u, lane) })
	d := openDriver(t, u)
	d.adminWait = 200 * time.Millisecond
	waiting := make(chan int, 1)
	d.closeHook = func(n int) { waiting <- n }
	release := make(chan struct{})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	events := make(chan string, 2)
	slowDeclare(t, d, d.cfg.deadQueue(lane), release, events)

	closed := make(chan struct{})
	go func() {
		d.Close()
		close(closed)
	}()
	select {
	case <-waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not wait for the declaration in progress")
	}
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return within 30s with a declaration held")
	}
	err := d.withAdmin(ctxT(t, 10*time.Second), "test: after close", func(*amqp.Channel) error { return nil })
	if !errors.Is(err, broker.ErrClosed) {
		t.Errorf("withAdmin after Close = %v, want ErrClosed", err)
	}
	close(release)
	select {
	case ev := <-events:
		if ev == "declared" {
			t.Fatal("the held declaration reached the broker after Close")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the held declaration did not end within 30s")
	}
}

// TestClose_FromInsideAdmin: Close called from inside an administrative
// operation returns (after its bound) instead of waiting for itself.
func TestClose_FromInsideAdmin(t *testing.T) {
	d := openDriver(t, testURL(t, newNS(t), "", "", nil))
	d.adminWait = 200 * time.Millisecond
	closed := make(chan struct{})
	res := make(chan error, 1)
	go func() {
		res <- d.withAdmin(context.Background(), "test: close inside", func(*amqp.Channel) error {
			d.Close()
			close(closed)
			return nil
		})
	}()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close from inside an administrative operation did not return within 30s")
	}
	select {
	case err := <-res:
		if err != nil {
			t.Errorf("operation that closed the driver = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the operation did not return within 10s")
	}
}

// TestAdminOps: the counter behind Close's wait.
func TestAdminOps(t *testing.T) {
	var a adminOps
	idle, n := a.close()
	if n != 0 {
		t.Fatalf("close with none in progress: n = %d", n)
	}
	select {
	case <-idle:
	default:
		t.Fatal("close with none in progress: not idle at once")
	}
	if a.begin() {
		t.Fatal("begin after close succeeded")
	}

	var b adminOps
	if !b.begin() || !b.begin() {
		t.Fatal("begin before close failed")
	}
	b.end()
	idle, n = b.close()
	if n != 1 {
		t.Fatalf("close with one in progress: n = %d", n)
	}
	if !b.isClosing() {
		t.Fatal("isClosing after close = false")
	}
	select {
	case <-idle:
		t.Fatal("idle with one in progress")
	default:
	}
	b.end()
	select {
	case <-idle:
	default:
		t.Fatal("not idle after the last one ended")
	}
}
