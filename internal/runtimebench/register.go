package runtimebench

// Every adapter and ledger store, so that any broker URL and ledger DSN
// opens.
import (
	_ "github.com/switchyard-dev/switchyard/adapters/all"
	_ "github.com/switchyard-dev/switchyard/ledger/postgres"
	_ "github.com/switchyard-dev/switchyard/ledger/sqlite"
)
