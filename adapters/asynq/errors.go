package asynq

import "github.com/switchyard-dev/switchyard/internal/rediserr"

// classify turns an error from go-redis into a classified broker error
// (internal/rediserr, shared with the Redis Streams adapter).
func classify(op string, err error, write bool) error { return rediserr.Classify(op, err, write) }
