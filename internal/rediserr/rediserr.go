// Package rediserr classifies go-redis errors for the Redis adapters
// (adapters/asynq and adapters/redisstreams), which meet the same server
// replies and the same client failures.
package rediserr

import (
	"errors"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard-dev/switchyard/broker"
)

// replyClass maps the prefix of a Redis error reply to its class. Prefixes
// not listed are transient (the rule for anything unrecognised); "ERR"
// replies are permanent except for the messages in transientERR.
var replyClass = map[string]broker.Class{
	"LOADING":     broker.Transient, // the server is loading its data set after a restart
	"BUSY":        broker.Transient, // another script is running
	"TRYAGAIN":    broker.Transient,
	"CLUSTERDOWN": broker.Transient,
	"MASTERDOWN":  broker.Transient,
	"READONLY":    broker.Transient, // failover: we talk to a replica
	"NOREPLICAS":  broker.Transient,
	"MISCONF":     broker.Transient, // persistence failing; writes refused until fixed
	"OOM":         broker.Transient, // maxmemory reached
	"NOSCRIPT":    broker.Transient,
	"NOGROUP":     broker.Transient, // a stream was deleted behind the driver; it recreates it
	"NOAUTH":      broker.Permanent,
	"WRONGPASS":   broker.Permanent,
	"NOPERM":      broker.Permanent,
	"WRONGTYPE":   broker.Permanent, // a key of the namespace holds something else
	"EXECABORT":   broker.Permanent,
	"ERR":         broker.Permanent,
}

var transientERR = []string{"max number of clients", "timeout"}

// Classify turns an error from go-redis into a classified broker error.
// write says the operation changes state that the caller cannot safely
// repeat blindly (publish): a connection that failed after the command may
// have been sent leaves the outcome unknown. Context errors stay
// recognisable with errors.Is; an error already classified is returned as
// it is.
func Classify(op string, err error, write bool) error {
	if err == nil {
		return nil
	}
	var be *broker.Error
	if errors.As(err, &be) {
		return err
	}
	if errors.Is(err, redis.ErrClosed) {
		return broker.ClosedError(op)
	}
	if broker.IsContext(err) {
		return &broker.Error{Op: op, Class: broker.Transient, Err: err}
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		prefix, rest, _ := strings.Cut(rerr.Error(), " ")
		class, ok := replyClass[prefix]
		if !ok {
			class = broker.Transient
		}
		if prefix == "ERR" {
			for _, s := range transientERR {
				if strings.Contains(rest, s) {
					class = broker.Transient
				}
			}
		}
		return &broker.Error{Op: op, Class: class, Err: err}
	}
	if errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted) || isDialError(err) {
		// Nothing was sent.
		return &broker.Error{Op: op, Class: broker.Transient, Err: err}
	}
	if write {
		return &broker.Error{Op: op, Class: broker.UnknownOutcome, Err: err}
	}
	return &broker.Error{Op: op, Class: broker.Transient, Err: err}
}

func isDialError(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}
