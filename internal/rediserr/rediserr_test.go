package rediserr

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard-dev/switchyard/broker"
)

// reply is a Redis error reply, as go-redis hands it out.
type reply string

func (r reply) Error() string { return string(r) }
func (reply) RedisError()     {}

func TestClassify(t *testing.T) {
	classified := &broker.Error{Op: "x", Class: broker.Permanent, Err: errors.New("already")}
	for _, c := range []struct {
		err   error
		write bool
		want  broker.Class
	}{
		{reply("LOADING Redis is loading the dataset in memory"), false, broker.Transient},
		{reply("READONLY You can't write against a read only replica."), true, broker.Transient},
		{reply("NOGROUP No such key 'q' or consumer group 'g'"), false, broker.Transient},
		{reply("WRONGTYPE Operation against a key holding the wrong kind of value"), false, broker.Permanent},
		{reply("NOAUTH Authentication required."), false, broker.Permanent},
		{reply("ERR unknown command 'FOO'"), false, broker.Permanent},
		{reply("ERR max number of clients reached"), true, broker.Transient},
		{reply("SOMETHINGNEW we have not seen"), false, broker.Transient},
		{fmt.Errorf("wrapped: %w", reply("OOM command not allowed")), true, broker.Transient},
		{redis.ErrPoolTimeout, true, broker.Transient},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, true, broker.Transient},
		{&net.OpError{Op: "read", Err: errors.New("connection reset")}, true, broker.UnknownOutcome},
		{&net.OpError{Op: "read", Err: errors.New("connection reset")}, false, broker.Transient},
		{context.DeadlineExceeded, true, broker.Transient},
	} {
		got := Classify("op", c.err, c.write)
		if cl := broker.ClassOf(got); cl != c.want {
			t.Errorf("Classify(%v, write=%v) class %v, want %v", c.err, c.write, cl, c.want)
		}
		if !errors.Is(got, c.err) {
			t.Errorf("Classify(%v) = %v does not wrap the cause", c.err, got)
		}
	}
	if Classify("op", nil, true) != nil {
		t.Error("Classify(nil) is not nil")
	}
	if got := Classify("op", classified, false); got != error(classified) {
		t.Errorf("an error already classified came back as %v", got)
	}
	if got := Classify("publish", redis.ErrClosed, true); !errors.Is(got, broker.ErrClosed) {
		t.Errorf("a closed client gives %v, want broker.ErrClosed", got)
	}
}
