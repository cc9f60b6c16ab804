package migrate

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// ErrIncomplete is matched (errors.Is) by the error Run returns when some
// messages could not be moved: they are still on the source, and
// Report.Failures says why.
var ErrIncomplete = errors.New("migration incomplete")

// Options configure a migration. A nil *Options means every default.
type Options struct {
	// Lanes to migrate. Defaults to every lane the source can list
	// (broker.LaneLister); a source that cannot list its lanes needs them
	// named.
	Lanes []string
	// IncludeDeadLetters also moves each lane's dead letters, with their
	// reason, error and attempt history, into the target lane's dead-letter
	// queue. Defaults to false.
	IncludeDeadLetters bool
	// DryRun reports, from the source's queue depths, what would move, and
	// checks the target is reachable; it leases and moves nothing.
	DryRun bool
	// Journal is a local file recording the IDs the target confirmed, so
	// that a rerun after an interruption skips them instead of publishing
	// them twice. A run that ends without error removes it. Empty means no journal: a rerun then relies on the
	// target's deduplication of idempotency keys and on the ledger. The CLI
	// should always set one (JournalPath gives a default name).
	Journal string
	// Batch is the most messages moved per round. Defaults to 100 (capped by
	// both brokers' MaxBatch).
	Batch int
	// Lease is how long the source hides a message while it is moved.
	// Defaults to 2m.
	Lease time.Duration
	// Wait is how long to keep waiting, after a lane's ready messages are
	// moved, for its delayed messages (run-at, nack backoff) to come due
	// and its leased messages (held by workers, or by an interrupted run)
	// to come back, so they can be moved too. Brokers do not hand out
	// delayed messages early, so what is still delayed or leased after this
	// stays on the source, counted in LaneReport.LeftDelayed and
	// LeftInFlight. Defaults to 0: move what is ready now.
	Wait time.Duration
	// FindTimeout bounds the search for a dead letter just published to the
	// target lane (see doc.go). Defaults to 30s.
	FindTimeout time.Duration
	// Progress, when set, is called after every round with the counts so
	// far (for a progress bar). It runs on the migrating goroutine: keep it
	// fast.
	Progress func(Progress)
	// SourceSequencer is the Sequencer that numbered the source's keyed
	// messages (a source without native ordering: the fleet's ledger,
	// ledger.SequencerOf). The source's numbers are dropped on the way
	// (see doc.go) and will never be offered again; with SourceSequencer
	// set, each moved message's number is released there as finished once
	// the target has confirmed its copy, so a key's copies numbered on the
	// target by the same Sequencer start in their turn instead of waiting
	// for every old number to be skipped as lost (the sequencer's stall
	// window, for each number: minutes per key). Leave it nil when the
	// source's numbers came from another Sequencer than the target's
	// workers use: releasing them there would let messages run out of turn.
	SourceSequencer broker.Sequencer
}

func (o *Options) withDefaults() Options {
	var c Options
	if o != nil {
		c = *o
	}
	if c.Batch <= 0 {
		c.Batch = 100
	}
	if c.Lease <= 0 {
		c.Lease = 2 * time.Minute
	}
	if c.FindTimeout <= 0 {
		c.FindTimeout = 30 * time.Second
	}
	return c
}

// Progress is the state of a run after a round.
type Progress struct {
	// Lane is the lane being moved; DeadLetters is set while its dead
	// letters are.
	Lane        string
	DeadLetters bool
	// Expected is the number of messages the source held when the run
	// started (ready, leased and delayed, plus dead letters when included),
	// over every lane.
	Expected int64
	// Counts over the whole run so far.
	Moved, Skipped, Failed int
}

// Report is the outcome of a run.
type Report struct {
	DryRun bool
	Lanes  []LaneReport
	// Moved messages are on the target and gone from the source.
	Moved int
	// Skipped messages were already on the target (the target reported the
	// idempotency key as a duplicate, or the journal showed an earlier run
	// had moved them) and were removed from the source only.
	Skipped int
	// InDoubt messages were being published when an earlier run was
	// interrupted, so the target may hold them twice; the ledger runs them
	// once in effect. They are included in Moved.
	InDoubt []string
	// Failures are the messages left on the source, with the reason.
	Failures []Failure
}

// LaneReport is one lane's part of a Report.
type LaneReport struct {
	Lane string
	// Before are the source's depths when the run started; After when the
	// lane was done (zero in a dry run).
	Before, After broker.Stats
	// Target are the target's depths when the run started.
	Target broker.Stats
	// WouldMove, in a dry run, is what a run would move now: ready
	// messages, plus dead letters when included. Delayed messages move
	// only once due (Options.Wait); leased ones when their lease
	// ends.
	WouldMove              int64
	Moved, Skipped, Failed int
	DeadMoved              int
	// LeftDelayed and LeftInFlight are what the source still held when the
	// lane was done: delayed messages not yet due, and messages leased by
	// running workers. Run again (or use broker.Migrating) to move them.
	LeftDelayed, LeftInFlight, LeftReady int64
}

// Failure is one message left on the source.
type Failure struct {
	ID, Lane   string
	DeadLetter bool
	Reason     string
	Err        error
}

// RunURL opens the brokers at fromURL and toURL, checks that they are
// different brokers of the same namespace (CheckURLs), runs the migration
// and closes both. This is what `switchyard migrate --from URL --to URL`
// calls.
//
// targetOpts configure the target Broker (nil: defaults), except Dedup,
// which is always a fresh in-memory store: a store that saw the original
// publishes (the ledger) holds every key already, and would make each keyed
// message look like a copy already on the target. The target's native
// deduplication still applies.
func RunURL(ctx context.Context, fromURL, toURL string, targetOpts *broker.Options, opts *Options) (*Report, error) {
	if err := CheckURLs(fromURL, toURL); err != nil {
		return nil, err
	}
	from, err := broker.Open(ctx, fromURL, nil)
	if err != nil {
		return nil, fmt.Errorf("migrate: open source: %w", err)
	}
	defer from.Close()
	var topts broker.Options
	if targetOpts != nil {
		topts = *targetOpts
	}
	topts.Dedup = broker.NewMemoryDedup(24 * time.Hour)
	to, err := broker.Open(ctx, toURL, &topts)
	if err != nil {
		return nil, fmt.Errorf("migrate: target unreachable: %w", err)
	}
	defer to.Close()
	return Run(ctx, from, to, opts)
}

// Namespace returns the namespace a broker URL names: its "namespace"
// query parameter, or the host of a mem:// URL. Empty means the URL leaves
// it to the adapter's default.
func Namespace(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", broker.Invalidf("migrate: a broker URL does not parse")
	}
	if strings.EqualFold(u.Scheme, "mem") {
		return u.Host, nil
	}
	return u.Query().Get("namespace"), nil
}

// CheckURLs rejects a migration that cannot be what the operator means:
//   - the two URLs name different namespaces (or one names it and the
//     other leaves it to the adapter's default): a namespace is the unit
//     workers, lane policy, ledger and idempotency keys are scoped to, so
//     moving tasks into another namespace would strand them where no worker
//     of the application looks. Name the same namespace on both URLs;
//   - the two URLs are the same broker and namespace: messages would be
//     published into the queue they are read from.
//
// Both errors match broker.ErrInvalid.
func CheckURLs(fromURL, toURL string) error {
	nf, err := Namespace(fromURL)
	if err != nil {
		return err
	}
	nt, err := Namespace(toURL)
	if err != nil {
		return err
	}
	if nf != nt {
		show := func(s string) string {
			if s == "" {
				return "the adapter's default (no namespace parameter)"
			}
			return fmt.Sprintf("%q", s)
		}
		return broker.Invalidf("migrate: mismatched namespaces: the source uses %s and the target %s; a migration moves one namespace to another broker, so give both URLs the same namespace parameter", show(nf), show(nt))
	}
	if same(fromURL, toURL) {
		return broker.Invalidf("migrate: source and target are the same broker and namespace")
	}
	return nil
}

func same(a, b string) bool {
	ua, err1 := url.Parse(a)
	ub, err2 := url.Parse(b)
	if err1 != nil || err2 != nil {
		return a == b
	}
	key := func(u *url.URL) string {
		return strings.ToLower(u.Scheme) + "|" + strings.ToLower(u.Host) + "|" + strings.TrimPrefix(strings.TrimPrefix(u.Path, "/"), "./") + "|" + u.Query().Get("namespace") + "|" + u.Query().Get("endpoint") + "|" + u.Query().Get("fifo")
	}
	return key(ua) == key(ub)
}

// JournalPath returns a default journal file name for a migration between
// two URLs, stable across reruns of the same command: dir joined with
// "switchyard-migrate-<hash>.journal".
func JournalPath(dir, fromURL, toURL string) string {
	h := uint64(14695981039346656037)
	for _, c := range []byte(fromURL + "\x00" + toURL) {
		h ^= uint64(c)
		h *= 1099511628211
	}
	name := fmt.Sprintf("switchyard-migrate-%016x.journal", h)
	if dir == "" {
		return name
	}
	return strings.TrimSuffix(dir, "/") + "/" + name
}

// Run moves every message of the lanes from one Broker to another. See the
// package documentation for what it guarantees.
//
// The target Broker's Options.Dedup must not be a store that saw the
// source's publishes (do not pass the ledger there; RunURL uses a fresh
// in-memory store): a key it already holds is reported as a duplicate, and
// Run takes a duplicate to mean the target already has the message and
// removes it from the source. The error is nil when
// everything movable moved; it matches ErrIncomplete when some messages
// failed (they stay on the source, listed in Report.Failures), and is the
// cause otherwise (an unreachable target, a source failing midway). A
// Report is returned in every case except invalid arguments.
func Run(ctx context.Context, from, to *broker.Broker, opts *Options) (*Report, error) {
	if from == nil || to == nil {
		return nil, broker.Invalidf("migrate: nil source or target")
	}
	if from == to || from.Driver() == to.Driver() {
		return nil, broker.Invalidf("migrate: source and target are the same broker")
	}
	o := opts.withDefaults()
	rep := &Report{DryRun: o.DryRun}
	lanes := o.Lanes
	if len(lanes) == 0 {
		ls, ok, err := from.Lanes(ctx)
		if err != nil {
			return rep, fmt.Errorf("migrate: list the source's lanes: %w", err)
		}
		if !ok {
			return rep, broker.Invalidf("migrate: the source cannot list its lanes; name them (Options.Lanes, --lanes)")
		}
		lanes = ls
	}
	for _, l := range lanes {
		if err := broker.ValidateName("lane", l); err != nil {
			return rep, err
		}
	}
	// Before anything is leased: the target must answer, and the source.
	var expected int64
	for _, l := range lanes {
		ts, err := to.Stats(ctx, l)
		if err != nil {
			return rep, fmt.Errorf("migrate: target unreachable (stats of lane %q): %w", l, err)
		}
		fs, err := from.Stats(ctx, l)
		if err != nil {
			return rep, fmt.Errorf("migrate: source unreachable (stats of lane %q): %w", l, err)
		}
		lr := LaneReport{Lane: l, Before: fs, Target: ts}
		expected += fs.Ready + fs.InFlight + fs.Delayed
		lr.WouldMove = fs.Ready
		if o.IncludeDeadLetters {
			expected += fs.DeadLettered
			lr.WouldMove += fs.DeadLettered
		}
		rep.Lanes = append(rep.Lanes, lr)
	}
	if o.DryRun {
		return rep, nil
	}
	j, err := openJournal(o.Journal)
	if err != nil {
		return rep, err
	}
	defer j.close()
	m := &mover{o: o, from: from, to: to, j: j, rep: rep, expected: expected, moved: map[string]bool{}}
	for i := range rep.Lanes {
		lr := &rep.Lanes[i]
		if o.IncludeDeadLetters {
			if err := m.lane(ctx, lr, true); err != nil {
				return rep, err
			}
		}
		if err := m.lane(ctx, lr, false); err != nil {
			return rep, err
		}
		after, err := from.Stats(ctx, lr.Lane)
		if err == nil {
			lr.After = after
			lr.LeftDelayed, lr.LeftInFlight, lr.LeftReady = after.Delayed, after.InFlight, after.Ready
		}
	}
	if len(rep.Failures) > 0 {
		return rep, fmt.Errorf("%w: %d message(s) could not be moved and stay on the source; first: %s %s: %s", ErrIncomplete, len(rep.Failures), rep.Failures[0].Lane, rep.Failures[0].ID, rep.Failures[0].Reason)
	}
	// Every message this run touched is settled: moved and removed, or given
	// back. The journal is only needed across an interruption, and a stale
	// one would be wrong after a round trip (migrating back and forth).
	if o.Journal != "" {
		if err := j.close(); err != nil {
			return rep, err
		}
		if err := os.Remove(o.Journal); err != nil && !errors.Is(err, os.ErrNotExist) {
			return rep, fmt.Errorf("migrate: remove the journal: %w", err)
		}
	}
	return rep, nil
}

type mover struct {
	o        Options
	from, to *broker.Broker
	j        *journal
	rep      *Report
	expected int64
	// moved are the IDs this run published, to stop a run whose target
	// turns out to feed its source.
	moved map[string]bool
}

func (m *mover) progress(lane string, dead bool) {
	if m.o.Progress != nil {
		m.o.Progress(Progress{Lane: lane, DeadLetters: dead, Expected: m.expected, Moved: m.rep.Moved, Skipped: m.rep.Skipped, Failed: len(m.rep.Failures)})
	}
}

func (m *mover) fail(lr *LaneReport, d *broker.Delivery, dead bool, reason string, err error) {
	lr.Failed++
	m.rep.Failures = append(m.rep.Failures, Failure{ID: d.ID, Lane: lr.Lane, DeadLetter: dead, Reason: reason, Err: err})
}

func batchOf(n int, caps ...broker.Capabilities) int {
	for _, c := range caps {
		if c.MaxBatch > 0 && c.MaxBatch < n {
			n = c.MaxBatch
		}
	}
	return n
}

// lane moves one lane's live messages (or its dead letters).
func (m *mover) lane(ctx context.Context, lr *LaneReport, dead bool) (err error) {
	src := m.from.Driver()
	sc, tc := src.Capabilities(), m.to.Driver().Capabilities()
	batch := batchOf(m.o.Batch, sc, tc)
	lease := m.o.Lease
	if sc.MaxLease > 0 && lease > sc.MaxLease {
		lease = sc.MaxLease
	}
	var held []*broker.Delivery // failed deliveries, kept leased until the lane is done
	failed := map[string]bool{}
	defer func() {
		// Give failed messages back to the source, unspent where it can.
		rctx := context.WithoutCancel(ctx)
		for _, d := range held {
			_ = giveBack(rctx, src, d)
		}
	}()
	waitUntil := time.Now().Add(m.o.Wait)
	empties := 0
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		ds, err := src.Receive(ctx, broker.ReceiveRequest{Lane: lr.Lane, Max: batch, Lease: lease, Wait: time.Second, DeadLetters: dead})
		if err != nil {
			return fmt.Errorf("migrate: receive from the source lane %q: %w", lr.Lane, err)
		}
		if len(ds) == 0 {
			st, err := src.Stats(ctx, lr.Lane)
			if err != nil {
				return fmt.Errorf("migrate: source stats of lane %q: %w", lr.Lane, err)
			}
			if dead {
				if st.DeadLettered > int64(len(held)) && (empties < 3 || time.Now().Before(waitUntil)) {
					empties++
					continue
				}
				return nil
			}
			if st.Ready > 0 && empties < 3 {
				empties++ // approximate counts (SQS) or a message just released
				continue
			}
			if (st.Delayed > 0 || st.InFlight > int64(len(held))) && time.Now().Before(waitUntil) {
				continue // the receive above waited a second
			}
			return nil
		}
		empties = 0
		var work []*broker.Delivery
		var acks []*broker.Delivery
		for _, d := range ds {
			switch {
			case failed[d.ID]:
				held = append(held, d)
			case m.moved[d.ID]:
				held = append(held, d)
				return fmt.Errorf("migrate: message %s came back on the source after it was moved: does the target feed the source?", d.ID)
			case m.j.isDone(d.ID):
				acks = append(acks, d)
				lr.Skipped++
				m.rep.Skipped++
			default:
				work = append(work, d)
			}
		}
		var done []*broker.Delivery
		var fatal error
		if dead {
			done, fatal = m.moveDead(ctx, lr, work, &held, failed)
		} else {
			done, fatal = m.moveLive(ctx, lr, work, &held, failed)
		}
		acks = append(acks, done...)
		if len(acks) > 0 {
			if !dead {
				// Before the ack: a run stopped between the two leaves the
				// message on the source for the next run, which skips it
				// (journal) and releases it again (harmless); one stopped
				// after the ack would leave its number to the stall window.
				m.releaseSourceOrder(ctx, lr.Lane, acks)
			}
			if err := src.Ack(ctx, acks); err != nil {
				// The journal has them: a rerun removes them without
				// publishing again.
				return fmt.Errorf("migrate: remove moved messages from the source lane %q: %w", lr.Lane, err)
			}
		}
		m.progress(lr.Lane, dead)
		if fatal != nil {
			return fatal
		}
	}
}

// releaseSourceOrder marks the source's ordering numbers of ds, whose
// copies the target confirmed (and the journal recorded), finished in
// Options.SourceSequencer (see there). A release that fails leaves the number to the sequencer's stall
// window, as without SourceSequencer, and the run goes on.
func (m *mover) releaseSourceOrder(ctx context.Context, lane string, ds []*broker.Delivery) {
	sq := m.o.SourceSequencer
	if sq == nil {
		return
	}
	rctx := context.WithoutCancel(ctx)
	for _, d := range ds {
		if d.OrderingKey == "" || d.Headers == nil {
			continue
		}
		seq, err := strconv.ParseInt(d.Headers[broker.HeaderOrderSeq], 10, 64)
		if err != nil || seq <= 0 {
			continue
		}
		_ = sq.Release(rctx, lane, d.OrderingKey, seq, true)
	}
}

// giveBack returns a delivery to the source without spending an attempt
// where the driver can.
func giveBack(ctx context.Context, d broker.Driver, dv *broker.Delivery) error {
	if r, ok := d.(broker.Releaser); ok {
		return r.Release(ctx, dv, 0)
	}
	return d.Nack(ctx, dv, 0)
}

// copyFor returns the message to publish on the target for a source
// delivery: the same ID, fields and headers, without the framework's
// per-broker state (a held message's hop is folded back into its run-at
// and idempotency key; ordering sequence numbers and attempt bases belong to
// the source).
func copyFor(d *broker.Delivery) *broker.Message {
	m := d.Message.Clone()
	if m.Headers != nil {
		h := m.Headers
		if s, ok := h[broker.HeaderHoldUntil]; ok {
			if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
				m.RunAt = t
			}
		}
		if k := h[broker.HeaderHeldKey]; k != "" {
			m.IdempotencyKey = k
		}
		for _, k := range []string{broker.HeaderHoldUntil, broker.HeaderHeldKey, broker.HeaderRunAt, broker.HeaderAttemptBase, broker.HeaderOrderSeq} {
			delete(h, k)
		}
		if len(h) == 0 {
			m.Headers = nil
		}
	}
	return m
}

func (m *mover) moveLive(ctx context.Context, lr *LaneReport, work []*broker.Delivery, held *[]*broker.Delivery, failed map[string]bool) (done []*broker.Delivery, fatal error) {
	if len(work) == 0 {
		return nil, nil
	}
	msgs := make([]*broker.Message, len(work))
	ids := make([]string, len(work))
	for i, d := range work {
		msgs[i] = copyFor(d)
		ids[i] = d.ID
		if m.j.inDoubt(d.ID) {
			m.rep.InDoubt = append(m.rep.InDoubt, d.ID)
		}
	}
	if err := m.j.record("P", lr.Lane, ids); err != nil {
		*held = append(*held, work...)
		return nil, err
	}
	rs, err := m.to.Publish(ctx, msgs...)
	if err != nil {
		*held = append(*held, work...)
		return nil, fmt.Errorf("migrate: publish to the target lane %q: %w", lr.Lane, err)
	}
	var okIDs []string
	for i, r := range rs {
		d := work[i]
		if r.Err != nil {
			failed[d.ID] = true
			*held = append(*held, d)
			m.fail(lr, d, false, reasonOf(r.Err), r.Err)
			if broker.ClassOf(r.Err) != broker.Permanent && fatal == nil {
				fatal = fmt.Errorf("migrate: the target failed to take message %s: %w", d.ID, r.Err)
			}
			continue
		}
		if r.Duplicate {
			lr.Skipped++
			m.rep.Skipped++
		} else {
			lr.Moved++
			m.rep.Moved++
		}
		m.moved[d.ID] = true
		okIDs = append(okIDs, d.ID)
		done = append(done, d)
	}
	if err := m.j.record("D", lr.Lane, okIDs); err != nil {
		*held = append(*held, done...)
		return nil, err
	}
	return done, fatal
}

func reasonOf(err error) string {
	var tl *broker.TooLargeError
	switch {
	case errors.As(err, &tl):
		return fmt.Sprintf("too large for the target: %d bytes, its limit is %d", tl.Size, tl.Max)
	case errors.Is(err, broker.ErrInvalid):
		return "the target rejects it as invalid: " + err.Error()
	}
	return err.Error()
}

// moveDead publishes dead letters to the target's live lane, finds them
// there at once and dead-letters them with their original reason, error and
// history. The target lane should have no consumers while this runs (see
// doc.go).
func (m *mover) moveDead(ctx context.Context, lr *LaneReport, work []*broker.Delivery, held *[]*broker.Delivery, failed map[string]bool) (done []*broker.Delivery, fatal error) {
	if len(work) == 0 {
		return nil, nil
	}
	tgt := m.to.Driver()
	tc := tgt.Capabilities()
	want := map[string]*broker.Delivery{}
	var msgs []*broker.Message
	var ids []string
	for _, d := range work {
		c := copyFor(d)
		c.RunAt = time.Time{} // receivable now, to be dead-lettered at once
		if c.EnqueuedAt.IsZero() {
			c.EnqueuedAt = time.Now()
		}
		if err := c.Validate(); err != nil {
			failed[d.ID] = true
			*held = append(*held, d)
			m.fail(lr, d, true, reasonOf(err), err)
			continue
		}
		if tc.MaxMessageSize > 0 && c.Size() > tc.MaxMessageSize {
			err := &broker.TooLargeError{Size: c.Size(), Max: tc.MaxMessageSize}
			failed[d.ID] = true
			*held = append(*held, d)
			m.fail(lr, d, true, reasonOf(err), err)
			continue
		}
		if m.j.inDoubt(d.ID) {
			m.rep.InDoubt = append(m.rep.InDoubt, d.ID)
		}
		want[d.ID] = d
		msgs = append(msgs, c)
		ids = append(ids, d.ID)
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	if err := m.j.record("P", lr.Lane, ids); err != nil {
		*held = append(*held, work...)
		return nil, err
	}
	tb := batchOf(len(msgs), tc)
	for start := 0; start < len(msgs); start += tb {
		part := msgs[start:min(start+tb, len(msgs))]
		rs, err := tgt.Publish(ctx, part)
		if err == nil && len(rs) != len(part) {
			err = fmt.Errorf("target returned %d results for %d messages", len(rs), len(part))
		}
		if err != nil {
			for _, c := range msgs[start:] {
				if d, ok := want[c.ID]; ok {
					*held = append(*held, d)
					delete(want, c.ID)
				}
			}
			fatal = fmt.Errorf("migrate: publish dead letters to the target lane %q: %w", lr.Lane, err)
			break
		}
		for i, r := range rs {
			d := want[part[i].ID]
			if r.Err == nil && (!r.Duplicate || r.ID == d.ID) {
				continue
			}
			delete(want, d.ID)
			failed[d.ID] = true
			*held = append(*held, d)
			if r.Err != nil {
				m.fail(lr, d, true, reasonOf(r.Err), r.Err)
			} else {
				m.fail(lr, d, true, fmt.Sprintf("its idempotency key is already used on the target by message %s", r.ID), nil)
			}
		}
	}
	// Find them on the target lane and dead-letter them there.
	var others []*broker.Delivery
	defer func() {
		rctx := context.WithoutCancel(ctx)
		for _, o := range others {
			_ = giveBack(rctx, tgt, o)
		}
	}()
	deadline := time.Now().Add(m.o.FindTimeout)
	lease := m.o.Lease
	if tc.MaxLease > 0 && lease > tc.MaxLease {
		lease = tc.MaxLease
	}
	var okIDs []string
	for len(want) > 0 && time.Now().Before(deadline) {
		got, err := tgt.Receive(ctx, broker.ReceiveRequest{Lane: lr.Lane, Max: batchOf(100, tc), Lease: lease, Wait: time.Second})
		if err != nil {
			fatal = fmt.Errorf("migrate: receive dead letters back from the target lane %q: %w", lr.Lane, err)
			break
		}
		for _, g := range got {
			sd, ok := want[g.ID]
			if !ok {
				others = append(others, g)
				continue
			}
			dl := *sd.DeadLetter
			dl.Attempts = append([]broker.AttemptRecord(nil), sd.DeadLetter.Attempts...)
			if err := tgt.DeadLetter(ctx, g, &dl); err != nil {
				others = append(others, g)
				continue
			}
			delete(want, g.ID)
			lr.DeadMoved++
			lr.Moved++
			m.rep.Moved++
			m.moved[g.ID] = true
			okIDs = append(okIDs, g.ID)
			done = append(done, sd)
		}
	}
	for id, d := range want {
		failed[id] = true
		*held = append(*held, d)
		m.fail(lr, d, true, "published to the target lane but not found there to dead-letter it within the find timeout: it is LIVE on the target (was a worker consuming the target lane?)", nil)
	}
	if err := m.j.record("D", lr.Lane, okIDs); err != nil {
		return nil, err
	}
	return done, fatal
}
