package embedded

import "github.com/switchyard-dev/switchyard/broker"

var _ broker.PublishConcurrency = (*Driver)(nil)

// MaxConcurrentPublishes implements broker.PublishConcurrency: the database
// has one connection, so concurrent publishes would only queue for it, each
// with its own transaction; Broker instead gathers them into one.
func (d *Driver) MaxConcurrentPublishes() int { return 1 }
