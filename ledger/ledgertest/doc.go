// Package ledgertest is the conformance suite for ledger stores. A store
// passes it from its own test file:
//
//	func TestConformance(t *testing.T) {
//		ledgertest.Run(t, func(t *testing.T) ledger.Ledger {
//			l, err := mystore.Open(ctx, freshDatabase(t))
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { l.Close() })
//			return l
//		})
//	}
//
// The maker must return an empty store that no other test uses; the suite
// runs cases in parallel. Cases are exported (Cases) so a store can re-run
// one with its own settings.
//
// The suite covers every method of ledger.Ledger: creation and
// idempotency (per tenant), every pair of states against ledger.Allowed,
// guarded and unguarded, the IfAttemptBelow guard, transition updates and
// the event log, listing and paging, attempts, steps, effects (every EffectState,
// would_do included), pruning, dedup claims, lane pauses and their history of lane events (the optional
// ledger.LaneControls; a store without it skips those cases), races of 20 goroutines (one Create wins per key, one
// Transition wins, one takeover by a newer attempt wins, one PutStep
// value is stored, one BeginEffect begins, one Claim wins, event sequence
// numbers stay gapless, one racing pause or resume of a lane writes its
// lane event), cancelled contexts and Close.
//
// BenchmarkTask is the shared per-task benchmark the stores run.
package ledgertest
