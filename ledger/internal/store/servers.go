package store

import (
	"strings"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
)

// MaxServerLanes bounds the lanes one server record lists.
const MaxServerLanes = 256

// Server validates a server record for RegisterServer and returns its
// lanes joined for storage (lane names hold no commas).
func Server(op string, s *ledger.Server) (string, error) {
	if err := Key(op, "server id", s.ID); err != nil {
		return "", err
	}
	if err := keyAllowEmpty(op, "server host", s.Host); err != nil {
		return "", err
	}
	if err := keyAllowEmpty(op, "server version", s.Version); err != nil {
		return "", err
	}
	switch {
	case s.PID < 0:
		return "", Invalid(op, "server pid %d is negative", s.PID)
	case s.Slots < 0 || s.Busy < 0:
		return "", Invalid(op, "server slots %d / busy %d: negative", s.Slots, s.Busy)
	case s.Busy > s.Slots:
		return "", Invalid(op, "server busy %d exceeds its slots %d", s.Busy, s.Slots)
	case s.Interval < 0:
		return "", Invalid(op, "server interval %s is negative", s.Interval)
	case len(s.Lanes) > MaxServerLanes:
		return "", Invalid(op, "server lists %d lanes, the limit is %d", len(s.Lanes), MaxServerLanes)
	}
	for _, l := range s.Lanes {
		if err := broker.ValidateName("lane", l); err != nil {
			return "", broker.Wrap(op, broker.Permanent, err)
		}
	}
	return strings.Join(s.Lanes, ","), nil
}

// ServerLanes splits stored lanes.
func ServerLanes(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
