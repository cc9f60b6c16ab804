package redisstreams

import (
	"strings"

	"github.com/switchyard-dev/switchyard/internal/rediserr"
)

// classify turns an error from go-redis into a classified broker error
// (internal/rediserr, shared with the asynq adapter).
func classify(op string, err error, write bool) error { return rediserr.Classify(op, err, write) }

// isNoGroup reports a NOGROUP reply: the stream or its consumer group is
// gone (deleted by hand, or a Redis restart without persistence).
func isNoGroup(err error) bool {
	return err != nil && strings.Contains(err.Error(), "NOGROUP")
}
