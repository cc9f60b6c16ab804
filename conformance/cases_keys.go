package conformance

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// TestDedup: the same idempotency key twice within the window yields one
// message; the same key under another tenant is another message (point 6).
func TestDedup(t *testing.T, h *Harness) {
	b := Open(t, h, nil)
	first := &broker.Message{Lane: "interactive", Kind: "invoice.send", Body: []byte("1"), IdempotencyKey: "order-991", Tenant: "acme"}
	second := &broker.Message{Lane: "interactive", Kind: "invoice.send", Body: []byte("2"), IdempotencyKey: "order-991", Tenant: "acme"}
	other := &broker.Message{Lane: "interactive", Kind: "invoice.send", Body: []byte("3"), IdempotencyKey: "order-991", Tenant: "globex"}
	r1 := publish(t, b, first)[0]
	r2 := publish(t, b, second)[0]
	r3 := publish(t, b, other)[0]
	if r1.Duplicate || r3.Duplicate {
		t.Fatalf("first publishes reported as duplicates: %+v %+v", r1, r3)
	}
	if r2.Duplicate && r2.ID != r1.ID {
		t.Errorf("duplicate reports ID %s, want the first message's %s", r2.ID, r1.ID)
	}
	ds := receiveN(t, b, "interactive", 3, 30*time.Second, 5*time.Second)
	bodies := map[string]int{}
	for _, d := range ds {
		bodies[d.Tenant+"/"+string(d.Body)]++
	}
	if len(ds) != 2 || bodies["acme/1"] != 1 || bodies["globex/3"] != 1 {
		t.Fatalf("deliveries by tenant/body = %v, want acme/1 and globex/3 once each", bodies)
	}
	ack(t, b, ds...)
	// With native deduplication the claim belongs to the broker, so another
	// Broker on the same URL sees it too, after the first message was acked.
	// (Without it, Options.Dedup decides the scope: the in-process default
	// covers one Broker; the ledger's store covers every process.)
	if b.Capabilities().Dedup {
		b2 := Open(t, h, nil)
		publish(t, b2, &broker.Message{Lane: "interactive", Kind: "invoice.send", Body: []byte("4"), IdempotencyKey: "order-991", Tenant: "acme"})
		expectNone(t, b2, "interactive", 2*time.Second, "native dedup forgot a key once its message was acked")
	}
}

// TestOrdering: messages that share an ordering key start in publish order
// and are never leased at the same time, across three Brokers consuming
// the lane (three processes of a fleet, sharing the ledger as a fleet
// does); other keys proceed in parallel (point 8).
func TestOrdering(t *testing.T, h *Harness) {
	L := openLedger(t, ledgerDSN(t, h))
	opts := *h.Options.WithDefaults()
	opts.Dedup = L // the ledger orders keys where the broker does not
	opts.OrderingRetry = 50 * time.Millisecond
	brokers := []*broker.Broker{Open(t, h, &opts), Open(t, h, &opts), Open(t, h, &opts)}
	b := brokers[0]
	const keys, per = 3, 5
	var msgs []*broker.Message
	for i := 0; i < per; i++ {
		for k := 0; k < keys; k++ {
			m := newMsg("interactive", "chat.turn", strconv.Itoa(i))
			m.OrderingKey = fmt.Sprintf("conv-%d", k)
			msgs = append(msgs, m)
		}
	}
	publish(t, b, msgs...)

	var (
		mu        sync.Mutex
		active    = map[string]int{}
		next      = map[string]int{}
		maxActive int
		total     int
		errs      []string
	)
	consumer := func(b *broker.Broker) {
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			mu.Lock()
			done := total == keys*per || len(errs) > 0
			mu.Unlock()
			if done {
				return
			}
			ds, err := b.Receive(ctxFor(t, 20*time.Second), broker.ReceiveRequest{Lane: "interactive", Max: keys, Lease: 20 * time.Second, Wait: 500 * time.Millisecond})
			if err != nil {
				mu.Lock()
				errs = append(errs, "receive: "+err.Error())
				mu.Unlock()
				return
			}
			for _, d := range ds {
				seq, _ := strconv.Atoi(string(d.Body))
				mu.Lock()
				active[d.OrderingKey]++
				if active[d.OrderingKey] > 1 {
					errs = append(errs, fmt.Sprintf("key %s leased twice at once (seq %d)", d.OrderingKey, seq))
				}
				if seq != next[d.OrderingKey] {
					errs = append(errs, fmt.Sprintf("key %s started seq %d, want %d", d.OrderingKey, seq, next[d.OrderingKey]))
				}
				next[d.OrderingKey] = seq + 1
				n := 0
				for _, a := range active {
					if a > 0 {
						n++
					}
				}
				maxActive = max(maxActive, n)
				mu.Unlock()
			}
			go func(ds []*broker.Delivery) {
				time.Sleep(150 * time.Millisecond) // work
				for _, d := range ds {
					mu.Lock()
					active[d.OrderingKey]--
					mu.Unlock()
				}
				if err := b.Ack(ctxFor(t, 10*time.Second), ds...); err != nil {
					mu.Lock()
					errs = append(errs, "ack: "+err.Error())
					mu.Unlock()
				}
				mu.Lock()
				total += len(ds)
				mu.Unlock()
			}(ds)
		}
	}
	var wg sync.WaitGroup
	for _, b := range brokers {
		wg.Add(1)
		go func() { defer wg.Done(); consumer(b) }()
	}
	wg.Wait()
	// Let in-flight acks finish.
	eventually(t, 15*time.Second, func() string {
		mu.Lock()
		defer mu.Unlock()
		if total != keys*per && len(errs) == 0 {
			return fmt.Sprintf("%d of %d messages processed", total, keys*per)
		}
		return ""
	})
	mu.Lock()
	defer mu.Unlock()
	for _, e := range errs {
		t.Error(e)
	}
	if maxActive < 2 {
		t.Errorf("at most %d ordering keys were in flight at once; different keys must run in parallel", maxActive)
	}
}

// FairLane and FairShards are the fair lane the Fairness case configures;
// adapters whose test cleanup deletes lanes by name delete its shards too
// (broker.FairShardName).
const (
	FairLane   = "batch"
	FairShards = 4
)

// TestFairness: in a fair lane (broker.Options.Fair), a tenant that
// publishes after another tenant's flood is served alongside it, not after
// it: each receive splits its batch between the tenants' shards.
func TestFairness(t *testing.T, h *Harness) {
	opts := broker.Options{}
	if h.Options != nil {
		opts = *h.Options
	}
	opts.Fair = map[string]int{FairLane: FairShards}
	b := Open(t, h, &opts)
	flood, quiet := "tenant-flood", ""
	for i := 0; quiet == ""; i++ {
		if c := fmt.Sprintf("tenant-quiet-%d", i); broker.FairShard(c, FairShards) != broker.FairShard(flood, FairShards) {
			quiet = c
		}
	}
	const floodN, quietN = 200, 10
	var msgs []*broker.Message
	for i := 0; i < floodN; i++ {
		m := newMsg(FairLane, "doc.analyse", strconv.Itoa(i))
		m.Tenant = flood
		msgs = append(msgs, m)
	}
	publish(t, b, msgs...)
	msgs = msgs[:0]
	for i := 0; i < quietN; i++ {
		m := newMsg(FairLane, "doc.analyse", strconv.Itoa(i))
		m.Tenant = quiet
		msgs = append(msgs, m)
	}
	publish(t, b, msgs...)

	floodSeen, quietSeen := 0, 0
	deadline := time.Now().Add(60 * time.Second)
	for quietSeen < quietN {
		if time.Now().After(deadline) {
			t.Fatalf("quiet tenant got %d of %d tasks after %d of the flood", quietSeen, quietN, floodSeen)
		}
		ds, err := b.Receive(ctxFor(t, 30*time.Second), broker.ReceiveRequest{Lane: FairLane, Max: 4, Lease: 30 * time.Second, Wait: time.Second})
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		for _, d := range ds {
			if d.Tenant == quiet {
				quietSeen++
			} else {
				floodSeen++
			}
			if d.Lane != FairLane {
				t.Fatalf("delivery of fair lane %s carries lane %s (a delivery carries its logical lane, never a shard)", FairLane, d.Lane)
			}
		}
		if len(ds) > 0 {
			ack(t, b, ds...)
		}
	}
	t.Logf("flood tasks received before the quiet tenant's last: %d (a FIFO lane: %d)", floodSeen, floodN)
	// Evenly split batches give about quietN; allow for brokers whose
	// receives return short batches, but far below the FIFO's floodN.
	if floodSeen > 3*quietN {
		t.Errorf("%d flood tasks were received before the quiet tenant's %d; want at most %d", floodSeen, quietN, 3*quietN)
	}
	st, err := b.Stats(ctxFor(t, 30*time.Second), FairLane)
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	if left := int64(floodN - floodSeen); st.Ready+st.Delayed+st.InFlight != left {
		t.Logf("stats of the fair lane: %+v; want %d ready (approximate on some brokers)", st, left)
	}
	// Drain the rest so nothing is left behind, and check none is lost.
	rest := receiveN(t, b, FairLane, floodN-floodSeen, 30*time.Second, 60*time.Second)
	ack(t, b, rest...)
	if len(rest) != floodN-floodSeen {
		t.Fatalf("drained %d of the flood's remaining %d", len(rest), floodN-floodSeen)
	}
}
