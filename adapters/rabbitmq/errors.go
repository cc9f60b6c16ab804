package rabbitmq

import (
	"context"
	"errors"
	"net"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/switchyard-dev/switchyard/broker"
)

// codeClass maps AMQP reply codes to the framework's error classes. Codes
// not listed are transient.
var codeClass = map[int]struct {
	class broker.Class
	kind  error
}{
	amqp.ContentTooLarge:    {broker.Permanent, broker.ErrTooLarge},
	amqp.NoRoute:            {broker.Transient, nil},
	amqp.NoConsumers:        {broker.Transient, nil},
	amqp.ConnectionForced:   {broker.Transient, nil},
	amqp.InvalidPath:        {broker.Permanent, broker.ErrInvalid},
	amqp.AccessRefused:      {broker.Permanent, nil},
	amqp.NotFound:           {broker.Permanent, nil},
	amqp.ResourceLocked:     {broker.Transient, nil},
	amqp.PreconditionFailed: {broker.Permanent, nil},
	amqp.FrameError:         {broker.Permanent, nil},
	amqp.SyntaxError:        {broker.Permanent, nil},
	amqp.CommandInvalid:     {broker.Permanent, nil},
	amqp.ChannelError:       {broker.Transient, nil},
	amqp.UnexpectedFrame:    {broker.Permanent, nil},
	amqp.ResourceError:      {broker.Transient, nil},
	amqp.NotAllowed:         {broker.Permanent, nil},
	amqp.NotImplemented:     {broker.Permanent, broker.ErrUnsupported},
	amqp.InternalError:      {broker.Transient, nil},
}

// classify wraps err for op with its class: the table above for AMQP
// errors, transient for network and context errors and anything else.
// Context errors stay recognisable with errors.Is.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	var be *broker.Error
	if errors.As(err, &be) {
		return err
	}
	var ae *amqp.Error
	if errors.As(err, &ae) {
		if errors.Is(err, amqp.ErrClosed) {
			return &broker.Error{Op: op, Class: broker.Transient, Err: errNotConnected}
		}
		if c, ok := codeClass[ae.Code]; ok {
			return &broker.Error{Op: op, Class: c.class, Kind: c.kind, Err: err}
		}
		return &broker.Error{Op: op, Class: broker.Transient, Err: err}
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &broker.Error{Op: op, Class: broker.Transient, Err: err}
	}
	return &broker.Error{Op: op, Class: broker.Transient, Err: err}
}

// errNotConnected is the cause of transient errors while the connection or
// channel is down and being re-established.
var errNotConnected = errors.New("rabbitmq: not connected (reconnecting)")

func notConnected(op string) error {
	return &broker.Error{Op: op, Class: broker.Transient, Err: errNotConnected}
}

// isCode reports whether err is an AMQP error with the reply code.
func isCode(err error, code int) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == code
}
