// Package fronttest proves that a ledger store's public methods are its
// front's (ledger/internal/front): run against a store whose backend is a
// Stub, every method refuses invalid arguments and calls on a closed
// store with the same error on every store, without reaching the
// backend, and passes valid arguments to the backend method of the same
// operation. A store method that shadowed the front's would fail it.
package fronttest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// Store is the public API the front gives a store.
type Store interface {
	ledger.Ledger
	ledger.LaneControls
	ledger.Servers
	ledger.History
	ledger.Notes
	ledger.Watcher
	ledger.StreamStore
	ledger.Outbox
	broker.DedupStore
	broker.SequencerSource
	SchemaVersion(ctx context.Context) (int, error)
}

// Case is one front method: Bad calls it with invalid arguments (nil when
// it takes none that can be), Good with valid ones.
type Case struct {
	Method string // the method called (Sequencer().Assign is "Sequencer.Assign")
	Op     string // its errors' Op after "<store>: "
	// Want is Bad's error text after "<store>: <op>: ": the same on every
	// store.
	Want string
	// BadReaches: Bad's call still reaches the backend, with no valid
	// task (CreateTx: the caller's transaction is the backend's to check).
	BadReaches bool
	Bad        func(ctx context.Context, s Store) error
	Good       func(ctx context.Context, s Store) error
}

func task() *ledger.Task { return &ledger.Task{Kind: "k", Lane: "interactive"} }

func e1[A any](_ A, err error) error         { return err }
func e2[A, B any](_ A, _ B, err error) error { return err }

// Cases lists every method of the front.
var Cases = []Case{
	{Method: "Create", Op: "create", Want: "nil task",
		Bad:  func(ctx context.Context, s Store) error { return e2(s.Create(ctx, nil)) },
		Good: func(ctx context.Context, s Store) error { return e2(s.Create(ctx, task())) }},
	{Method: "CreateMany", Op: "create many", Want: "nil task",
		Bad: func(ctx context.Context, s Store) error {
			res, err := s.CreateMany(ctx, []*ledger.Task{nil})
			if err != nil {
				return err
			}
			return res[0].Err
		},
		Good: func(ctx context.Context, s Store) error { return e1(s.CreateMany(ctx, []*ledger.Task{task()})) }},
	{Method: "Get", Op: "get", Want: "task id is empty",
		Bad:  func(ctx context.Context, s Store) error { return e1(s.Get(ctx, "")) },
		Good: func(ctx context.Context, s Store) error { return e1(s.Get(ctx, "t1")) }},
	{Method: "WatchTask", Op: "watch task", Want: "task id is empty",
		Bad:  func(ctx context.Context, s Store) error { return e1(s.WatchTask(ctx, "")) },
		Good: func(ctx context.Context, s Store) error { return e1(s.WatchTask(ctx, "t1")) }},
	{Method: "FollowTask", Op: "follow task", Want: "task id is empty",
		Bad:  func(ctx context.Context, s Store) error { return e1(s.FollowTask(ctx, "")) },
		Good: func(ctx context.Context, s Store) error { return e1(s.FollowTask(ctx, "t1")) }},
	{Method: "GetByKey", Op: "get by key", Want: "idempotency key is empty",
		Bad:  func(ctx context.Context, s Store) error { return e1(s.GetByKey(ctx, "", "")) },
		Good: func(ctx context.Context, s Store) error { return e1(s.GetByKey(ctx, "", "k")) }},
	{Method: "Transition", Op: "transition", Want: `unknown target state "nowhere"`,
		Bad: func(ctx context.Context, s Store) error {
			return e1(s.Transition(ctx, ledger.TransitionRequest{ID: "t1", To: "nowhere", Reason: "r"}))
		},
		Good: func(ctx context.Context, s Store) error {
			return e1(s.Transition(ctx, ledger.TransitionRequest{ID: "t1", To: ledger.Completed, Reason: "done"}))
		}},
	{Method: "List", Op: "list", Want: "limit -1 is negative",
		Bad:  func(ctx context.Context, s Store) error { return e1(s.List(ctx, ledger.Filter{Limit: -1})) },
		Good: func(ctx context.Context, s Store) error { return e1(s.List(ctx, ledger.Filter{})) }},
	{Method: "Prune", Op: "prune",
		Good: func(ctx context.Context, s Store) error { return e1(s.Prune(ctx, time.Now())) }},
	{Method: "SchemaVersion", Op: "schema version",
		Good: func(ctx context.Context, s Store) error { return e1(s.SchemaVersion(ctx)) }},

	{Method: "StartAttempt", Op: "start attempt", Want: "attempt number 0 is below 1",
		Bad: func(ctx context.Context, s Store) error { return s.StartAttempt(ctx, ledger.Attempt{TaskID: "t1"}) },
		Good: func(ctx context.Context, s Store) error {
			return s.StartAttempt(ctx, ledger.Attempt{TaskID: "t1", Number: 1})
		}},
	{Method: "FinishAttempt", Op: "finish attempt", Want: "attempt duration -1ns is negative",
		Bad: func(ctx context.Context, s Store) error {
			return s.FinishAttempt(ctx, ledger.Attempt{TaskID: "t1", Number: 1, Duration: -1})
		},
		Good: func(ctx context.Context, s Store) error {
			return s.FinishAttempt(ctx, ledger.Attempt{TaskID: "t1", Number: 1})
		}},
	{Method: "Attempts", Op: "attempts", Want: "task id contains a control character",
		Bad:  func(ctx context.Context, s Store) error { return e1(s.Attempts(ctx, "t\n1")) },
		Good: func(ctx context.Context, s Store) error { return e1(s.Attempts(ctx, "t1")) }},
	{Method: "Events", Op: "events", Want: "task id is empty",
		Bad:  func(ctx context.Context, s Store) error { return e1(s.Events(ctx, "")) },
		Good: func(ctx context.Context, s Store) error { return e1(s.Events(ctx, "t1")) }},
	{Method: "AppendEvent", Op: "append event", Want: `unknown state "nowhere"`,
		Bad: func(ctx context.Context, s Store) error {
			return s.AppendEvent(ctx, ledger.Event{TaskID: "t1", Reason: "note", To: "nowhere"})
		},
		Good: func(ctx context.Context, s Store) error {
			return s.AppendEvent(ctx, ledger.Event{TaskID: "t1", Reason: "note"})
		}},
	{Method: "GetStep", Op: "get step", Want: "step name is empty",
		Bad:  func(ctx context.Context, s Store) error { return e2(s.GetStep(ctx, "t1", "")) },
		Good: func(ctx context.Context, s Store) error { return e2(s.GetStep(ctx, "t1", "step")) }},
	{Method: "PutStep", Op: "put step", Want: "task id is empty",
		Bad:  func(ctx context.Context, s Store) error { return e1(s.PutStep(ctx, "", "step", nil)) },
		Good: func(ctx context.Context, s Store) error { return e1(s.PutStep(ctx, "t1", "step", nil)) }},
	{Method: "BeginEffect", Op: "begin effect", Want: "attempt -1 is negative",
		Bad:  func(ctx context.Context, s Store) error { return e2(s.BeginEffect(ctx, "t1", "e", -1)) },
		Good: func(ctx context.Context, s Store) error { return e2(s.BeginEffect(ctx, "t1", "e", 1)) }},
	{Method: "SetEffect", Op: "set effect", Want: `unknown effect state "maybe"`,
		Bad: func(ctx context.Context, s Store) error { return s.SetEffect(ctx, "t1", "e", "maybe", nil) },
		Good: func(ctx context.Context, s Store) error {
			return s.SetEffect(ctx, "t1", "e", ledger.EffectConfirmed, nil)
		}},
	{Method: "Effects", Op: "effects", Want: "task id is empty",
		Bad:  func(ctx context.Context, s Store) error { return e1(s.Effects(ctx, "")) },
		Good: func(ctx context.Context, s Store) error { return e1(s.Effects(ctx, "t1")) }},
	{Method: "Claim", Op: "dedup claim", Want: "idempotency key is empty",
		Bad:  func(ctx context.Context, s Store) error { return e2(s.Claim(ctx, "interactive", "", "", "t1")) },
		Good: func(ctx context.Context, s Store) error { return e2(s.Claim(ctx, "interactive", "", "k", "t1")) }},
	{Method: "Release", Op: "dedup release", Want: "task id is empty",
		Bad:  func(ctx context.Context, s Store) error { return s.Release(ctx, "interactive", "", "k", "") },
		Good: func(ctx context.Context, s Store) error { return s.Release(ctx, "interactive", "", "k", "t1") }},

	{Method: "BeginRun", Op: "begin run", Want: "lease 0s is out of range (0, 24h0m0s]",
		Bad: func(ctx context.Context, s Store) error {
			return e1(s.BeginRun(ctx, ledger.RunStart{ID: "t1", Attempt: 1}))
		},
		Good: func(ctx context.Context, s Store) error {
			return e1(s.BeginRun(ctx, ledger.RunStart{ID: "t1", Attempt: 1, Lease: time.Minute}))
		}},
	{Method: "EndRun", Op: "end run", Want: `the transition's task "t2" is not the attempt's "t1"`,
		Bad: func(ctx context.Context, s Store) error {
			return e1(s.EndRun(ctx, ledger.RunEnd{Attempt: ledger.Attempt{TaskID: "t1", Number: 1},
				Transition: &ledger.TransitionRequest{ID: "t2", To: ledger.Completed, Reason: "done"}}))
		},
		Good: func(ctx context.Context, s Store) error {
			return e1(s.EndRun(ctx, ledger.RunEnd{Attempt: ledger.Attempt{TaskID: "t1", Number: 1}}))
		}},
	{Method: "RenewLeases", Op: "renew leases", Want: "attempt 0 is out of range [1, 2147483646]",
		Bad: func(ctx context.Context, s Store) error {
			return e1(s.RenewLeases(ctx, []ledger.Lease{{ID: "t1"}}, time.Minute))
		},
		Good: func(ctx context.Context, s Store) error {
			return e1(s.RenewLeases(ctx, []ledger.Lease{{ID: "t1", Attempt: 1}}, time.Minute))
		}},

	{Method: "SetLanePaused", Op: "set lane paused", Want: "actor contains a control character",
		Bad:  func(ctx context.Context, s Store) error { return s.SetLanePaused(ctx, "interactive", true, "a\x00") },
		Good: func(ctx context.Context, s Store) error { return s.SetLanePaused(ctx, "interactive", true, "me") }},
	{Method: "LaneEvents", Op: "lane events", Want: "limit -1 is negative",
		Bad:  func(ctx context.Context, s Store) error { return e1(s.LaneEvents(ctx, "", -1)) },
		Good: func(ctx context.Context, s Store) error { return e1(s.LaneEvents(ctx, "", 0)) }},
	{Method: "PausedLanes", Op: "paused lanes",
		Good: func(ctx context.Context, s Store) error { return e1(s.PausedLanes(ctx)) }},
	{Method: "RegisterServer", Op: "register server", Want: "server busy 2 exceeds its slots 1",
		Bad: func(ctx context.Context, s Store) error {
			return s.RegisterServer(ctx, ledger.Server{ID: "s1", Slots: 1, Busy: 2})
		},
		Good: func(ctx context.Context, s Store) error { return s.RegisterServer(ctx, ledger.Server{ID: "s1"}) }},
	{Method: "RemoveServer", Op: "remove server", Want: "server id is empty",
		Bad:  func(ctx context.Context, s Store) error { return s.RemoveServer(ctx, "") },
		Good: func(ctx context.Context, s Store) error { return s.RemoveServer(ctx, "s1") }},
	{Method: "PruneServers", Op: "prune servers",
		Good: func(ctx context.Context, s Store) error { return e1(s.PruneServers(ctx, time.Now())) }},
	{Method: "ListServers", Op: "list servers",
		Good: func(ctx context.Context, s Store) error { return e1(s.ListServers(ctx)) }},
	{Method: "RecordHistory", Op: "record history", Want: "server id is empty",
		Bad: func(ctx context.Context, s Store) error { return s.RecordHistory(ctx, "", nil) },
		Good: func(ctx context.Context, s Store) error {
			return s.RecordHistory(ctx, "s1", []ledger.HistoryPoint{{Minute: time.Unix(600, 0), Lane: "interactive"}})
		}},
	{Method: "ListHistory", Op: "list history",
		Good: func(ctx context.Context, s Store) error { return e1(s.ListHistory(ctx, time.Unix(0, 0), "")) }},
	{Method: "PruneHistory", Op: "prune history",
		Good: func(ctx context.Context, s Store) error { return e1(s.PruneHistory(ctx, time.Now())) }},
	{Method: "Notify", Op: "notify", Want: `note topic "state" is the store's own`,
		Bad: func(ctx context.Context, s Store) error {
			return s.Notify(ctx, ledger.Note{Topic: ledger.TopicState, TaskID: "t1"})
		},
		Good: func(ctx context.Context, s Store) error {
			return s.Notify(ctx, ledger.Note{Topic: "custom", TaskID: "t1"})
		}},
	{Method: "Listen", Op: "listen",
		Good: func(ctx context.Context, s Store) error { return e1(s.Listen(ctx)) }},

	{Method: "AppendStream", Op: "append stream", Want: "no entries",
		Bad: func(ctx context.Context, s Store) error { return e1(s.AppendStream(ctx, "t1", 1, nil)) },
		Good: func(ctx context.Context, s Store) error {
			return e1(s.AppendStream(ctx, "t1", 1, []ledger.StreamEntry{{Kind: ledger.StreamProgress, Fraction: .5}}))
		}},
	{Method: "ReadStream", Op: "read stream", Want: "offset -1 is negative",
		Bad:  func(ctx context.Context, s Store) error { return e1(s.ReadStream(ctx, "t1", -1, 0)) },
		Good: func(ctx context.Context, s Store) error { return e1(s.ReadStream(ctx, "t1", 0, 0)) }},
	{Method: "LatestProgress", Op: "latest progress", Want: "task id is empty",
		Bad:  func(ctx context.Context, s Store) error { return e1(s.LatestProgress(ctx, []string{""})) },
		Good: func(ctx context.Context, s Store) error { return e1(s.LatestProgress(ctx, []string{"t1"})) }},
	{Method: "PruneStreams", Op: "prune streams",
		Good: func(ctx context.Context, s Store) error { return e1(s.PruneStreams(ctx, time.Now())) }},
	{Method: "PutWait", Op: "put wait", Want: "timeout -1ns is negative",
		Bad: func(ctx context.Context, s Store) error {
			return e2(s.PutWait(ctx, ledger.Wait{TaskID: "t1", Name: "w", Timeout: -1}))
		},
		Good: func(ctx context.Context, s Store) error {
			return e2(s.PutWait(ctx, ledger.Wait{TaskID: "t1", Name: "w"}))
		}},
	{Method: "GetWait", Op: "get wait", Want: "wait name is empty",
		Bad:  func(ctx context.Context, s Store) error { return e1(s.GetWait(ctx, "t1", "")) },
		Good: func(ctx context.Context, s Store) error { return e1(s.GetWait(ctx, "t1", "w")) }},
	{Method: "SignalWait", Op: "signal wait", Want: "a signal names exactly one of: task and wait name, correlation key, token",
		Bad: func(ctx context.Context, s Store) error { return e1(s.SignalWait(ctx, ledger.WaitTarget{}, nil)) },
		Good: func(ctx context.Context, s Store) error {
			return e1(s.SignalWait(ctx, ledger.WaitTarget{TaskID: "t1", Name: "w"}, nil))
		}},
	{Method: "ExpireWait", Op: "expire wait", Want: "wait name is empty",
		Bad:  func(ctx context.Context, s Store) error { return e1(s.ExpireWait(ctx, "t1", "")) },
		Good: func(ctx context.Context, s Store) error { return e1(s.ExpireWait(ctx, "t1", "w")) }},
	{Method: "FindWait", Op: "find wait", Want: "token hash is 3 bytes, want 32",
		Bad: func(ctx context.Context, s Store) error {
			return e1(s.FindWait(ctx, ledger.WaitTarget{TokenHash: []byte("abc")}))
		},
		Good: func(ctx context.Context, s Store) error {
			return e1(s.FindWait(ctx, ledger.WaitTarget{CorrelationKey: "c"}))
		}},

	{Method: "CreateTx", Op: "create in tx", Want: "nil task", BadReaches: true,
		Bad: func(ctx context.Context, s Store) error {
			res, err := s.CreateTx(ctx, nil, []ledger.OutboxTask{{}})
			if err != nil {
				return err
			}
			return res[0].Err
		},
		Good: func(ctx context.Context, s Store) error {
			return e1(s.CreateTx(ctx, nil, []ledger.OutboxTask{{Task: task()}}))
		}},
	{Method: "CreateOutbox", Op: "create outbox", Want: "lease -1ns is negative",
		Bad: func(ctx context.Context, s Store) error { return e1(s.CreateOutbox(ctx, nil, "o", -1)) },
		Good: func(ctx context.Context, s Store) error {
			return e1(s.CreateOutbox(ctx, []ledger.OutboxTask{{Task: task()}}, "o", 0))
		}},
	{Method: "ClaimOutbox", Op: "claim outbox", Want: "limit 10 and lease 1m0s must be positive and owner non-empty",
		Bad:  func(ctx context.Context, s Store) error { return e1(s.ClaimOutbox(ctx, "", 10, time.Minute)) },
		Good: func(ctx context.Context, s Store) error { return e1(s.ClaimOutbox(ctx, "o", 10, time.Minute)) }},
	{Method: "DoneOutbox", Op: "done outbox",
		Good: func(ctx context.Context, s Store) error { return s.DoneOutbox(ctx, "o", []string{"t1"}) }},
	{Method: "ReleaseOutbox", Op: "release outbox",
		Good: func(ctx context.Context, s Store) error { return s.ReleaseOutbox(ctx, "o", []string{"t1"}, -1, "") }},
	{Method: "OutboxStats", Op: "outbox stats",
		Good: func(ctx context.Context, s Store) error { return e1(s.OutboxStats(ctx)) }},

	{Method: "Sequencer.Assign", Op: "sequence assign", Want: "ordering key is empty",
		Bad:  func(ctx context.Context, s Store) error { return e1(s.Sequencer().Assign(ctx, "interactive", "")) },
		Good: func(ctx context.Context, s Store) error { return e1(s.Sequencer().Assign(ctx, "interactive", "k")) }},
	{Method: "Sequencer.Acquire", Op: "sequence acquire", Want: "ordering sequence 0 is not positive",
		Bad: func(ctx context.Context, s Store) error {
			return e1(s.Sequencer().Acquire(ctx, "interactive", "k", 0, time.Now()))
		},
		Good: func(ctx context.Context, s Store) error {
			return e1(s.Sequencer().Acquire(ctx, "interactive", "k", 1, time.Now()))
		}},
	{Method: "Sequencer.AcquirePosition", Op: "sequence acquire", Want: "ordering sequence 0 is not positive",
		Bad: func(ctx context.Context, s Store) error {
			return e2(s.Sequencer().(broker.SequencerPosition).AcquirePosition(ctx, "interactive", "k", 0, time.Now()))
		},
		Good: func(ctx context.Context, s Store) error {
			return e2(s.Sequencer().(broker.SequencerPosition).AcquirePosition(ctx, "interactive", "k", 1, time.Now()))
		}},
	{Method: "Sequencer.Release", Op: "sequence release", Want: "ordering sequence 0 is not positive",
		Bad: func(ctx context.Context, s Store) error {
			return s.Sequencer().Release(ctx, "interactive", "k", 0, true)
		},
		Good: func(ctx context.Context, s Store) error {
			return s.Sequencer().Release(ctx, "interactive", "k", 1, true)
		}},
}

// Run runs Cases against the store named name ("sqlite": the prefix of
// its errors' Op). open returns a new store whose backend is stub.
func Run(t *testing.T, name string, open func(t *testing.T, stub *Stub) Store) {
	ctx := context.Background()
	for _, c := range Cases {
		t.Run(c.Method, func(t *testing.T) {
			op := name + ": " + c.Op
			stub := new(Stub)
			s := open(t, stub)
			if c.Bad != nil {
				err := c.Bad(ctx, s)
				checkErr(t, "invalid arguments", err, broker.ErrInvalid, op, op+": "+c.Want)
				switch ops := stub.Ops(); {
				case c.BadReaches && !slices.Equal(ops, []string{op}):
					t.Errorf("invalid tasks reached the backend as %q, want once as %q", ops, op)
				case !c.BadReaches && len(ops) > 0:
					t.Errorf("invalid arguments reached the backend: %q", ops)
				}
			}
			if err := c.Good(ctx, s); err != nil {
				t.Errorf("valid arguments: %v", err)
			}
			if ops := stub.Ops(); !slices.Equal(ops, []string{op}) {
				t.Errorf("valid arguments reached the backend as %q, want once as %q", ops, op)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			err := c.Good(ctx, s)
			checkErr(t, "closed store", err, broker.ErrClosed, op, op+": ledger closed")
			if ops := stub.Ops(); len(ops) > 0 {
				t.Errorf("a call on a closed store reached the backend: %q", ops)
			}
		})
	}
}

func checkErr(t *testing.T, what string, err, kind error, op, text string) {
	t.Helper()
	var be *broker.Error
	switch {
	case !errors.Is(err, kind):
		t.Errorf("%s: %v, want %v", what, err, kind)
	case !errors.As(err, &be) || be.Op != op:
		t.Errorf("%s: %#v, want a *broker.Error with Op %q", what, err, op)
	case err.Error() != text:
		t.Errorf("%s: %q, want %q", what, err.Error(), text)
	}
}
