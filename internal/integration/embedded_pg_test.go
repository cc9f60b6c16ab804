package integration_test

import (
	"path/filepath"
	"testing"

	_ "github.com/switchyard-dev/switchyard/adapters/embedded"
	"github.com/switchyard-dev/switchyard/conformance"
	"github.com/switchyard-dev/switchyard/conformance/testenv/pgtest"
	_ "github.com/switchyard-dev/switchyard/ledger/postgres" // postgres:// ledgers
)

// TestConformanceE2E_EmbeddedPostgresLedger: the end-to-end cases on the
// embedded broker with the PostgreSQL ledger (moved from
// adapters/embedded, whose tests must not need pgx).
func TestConformanceE2E_EmbeddedPostgresLedger(t *testing.T) {
	conformance.RunE2E(t, func(t *testing.T) *conformance.Harness {
		path := filepath.Join(t.TempDir(), "switchyard.db")
		return &conformance.Harness{URL: "embedded://" + path + "?namespace=" + conformance.Namespace(t), LedgerDSN: pgtest.LedgerDSN(t)}
	})
}
