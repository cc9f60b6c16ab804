package asynq

import (
	"errors"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard-dev/switchyard/broker"
)

// redisErrorClass maps the prefix of a Redis error reply to its class.
// Prefixes not listed are transient (the rule for anything unrecognised);
// "ERR" replies are permanent except for the messages in transientERR.
var redisErrorClass = map[string]broker.Class{
	"LOADING":     broker.Transient, // server is loading its data set after a restart
	"BUSY":        broker.Transient, // another script is running
	"TRYAGAIN":    broker.Transient,
	"CLUSTERDOWN": broker.Transient,
	"MASTERDOWN":  broker.Transient,
	"READONLY":    broker.Transient, // failover: we talk to a replica
	"NOREPLICAS":  broker.Transient,
	"MISCONF":     broker.Transient, // persistence failing; writes refused until fixed
	"OOM":         broker.Transient, // maxmemory reached
	"NOSCRIPT":    broker.Transient,
	"NOAUTH":      broker.Permanent,
	"WRONGPASS":   broker.Permanent,
	"NOPERM":      broker.Permanent,
	"WRONGTYPE":   broker.Permanent, // a key of the queue holds something else
	"EXECABORT":   broker.Permanent,
	"ERR":         broker.Permanent,
}

var transientERR = []string{"max number of clients", "timeout"}

// classify turns an error from go-redis into a classified broker error.
// write says the operation changes state that the caller cannot safely
// repeat blindly (publish): a connection that failed after the command may
// have been sent leaves the outcome unknown. Context errors stay
// recognisable with errors.Is.
func classify(op string, err error, write bool) error {
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
		msg := rerr.Error()
		prefix, rest, _ := strings.Cut(msg, " ")
		class, ok := redisErrorClass[prefix]
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
