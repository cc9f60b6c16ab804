package asynq

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// notifier wakes waiting receives when a publish, nack or recovery makes a
// task ready on a queue. It listens on one Pub/Sub connection; channels are
// subscribed lazily, per queue. A lost notification (a reconnect, a plain
// asynq client, which publishes none) costs at most one poll interval.
type notifier struct {
	ps *redis.PubSub

	mu      sync.Mutex
	subbed  map[string]bool
	waiters map[string]chan struct{}
	done    chan struct{}
}

func newNotifier(c *redis.Client) *notifier {
	n := &notifier{
		ps:      c.Subscribe(context.Background()),
		subbed:  map[string]bool{},
		waiters: map[string]chan struct{}{},
		done:    make(chan struct{}),
	}
	go n.loop()
	return n
}

func (n *notifier) loop() {
	defer close(n.done)
	ch := n.ps.Channel(redis.WithChannelHealthCheckInterval(5 * time.Second))
	for m := range ch {
		n.mu.Lock()
		if w := n.waiters[m.Channel]; w != nil {
			close(w)
			delete(n.waiters, m.Channel)
		}
		n.mu.Unlock()
	}
}

// wait returns a channel closed at the next notification on channel. Take
// it before looking at the queue, so that a notification in between is not
// missed.
func (n *notifier) wait(ctx context.Context, channel string) <-chan struct{} {
	n.mu.Lock()
	sub := !n.subbed[channel]
	if sub {
		n.subbed[channel] = true
	}
	w := n.waiters[channel]
	if w == nil {
		w = make(chan struct{})
		n.waiters[channel] = w
	}
	n.mu.Unlock()
	if sub {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		err := n.ps.Subscribe(sctx, channel)
		cancel()
		if err != nil {
			// Try again on the next wait; polling covers the gap.
			n.mu.Lock()
			delete(n.subbed, channel)
			n.mu.Unlock()
		}
	}
	return w
}

func (n *notifier) close() {
	n.ps.Close()
	<-n.done
}
