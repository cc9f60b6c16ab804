package broker

import (
	"context"
	"errors"
	"fmt"

	"github.com/switchyard-dev/switchyard/lanes"
)

// Class is the one error classification used across Switchyard.
type Class int

const (
	// Transient errors may succeed if retried: a broker that is down, slow or
	// throttling, a dropped connection. Anything unrecognised is transient.
	Transient Class = iota
	// Permanent errors will fail the same way again: bad input, missing
	// permissions, an unsupported operation.
	Permanent
	// UnknownOutcome errors leave it unknown whether the operation took
	// effect: a publish whose confirm never arrived, for example.
	UnknownOutcome
)

func (c Class) String() string {
	switch c {
	case Transient:
		return "transient"
	case Permanent:
		return "permanent"
	case UnknownOutcome:
		return "unknown_outcome"
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// Sentinel errors. Check them with errors.Is; every error a driver returns
// through Broker matches exactly one of ErrTransient, ErrPermanent and
// ErrUnknownOutcome, and possibly one of the more specific ones below.
var (
	ErrTransient      = errors.New("transient broker error")
	ErrPermanent      = errors.New("permanent broker error")
	ErrUnknownOutcome = errors.New("unknown outcome")

	// ErrTooLarge: the message exceeds the driver's size limit (permanent).
	// errors.As to *TooLargeError gives the sizes.
	ErrTooLarge = errors.New("message too large")
	// ErrUnsupported: the driver cannot do the operation (permanent).
	ErrUnsupported = errors.New("unsupported operation")
	// ErrInvalid: the input is malformed: a bad name, URL, parameter or
	// message field (permanent). It is lanes.ErrInvalid, so it matches a
	// bad lane definition (lanes.ConfigError) too.
	ErrInvalid = lanes.ErrInvalid
	// ErrClosed: the driver or broker was closed (permanent).
	ErrClosed = errors.New("broker closed")
	// ErrLeaseLost: the delivery's lease has passed to another consumer, or
	// the message is gone; the operation did nothing (permanent for this
	// delivery).
	ErrLeaseLost = errors.New("lease lost")
)

// Error is a classified error from a broker operation.
type Error struct {
	Op    string // the operation, e.g. "publish", "receive"
	Class Class
	Kind  error // an optional specific sentinel (ErrTooLarge, …)
	Err   error // the underlying cause
}

func (e *Error) Error() string {
	var s string
	if e.Op != "" {
		s = e.Op + ": "
	}
	if e.Err != nil {
		return s + e.Err.Error()
	}
	if e.Kind != nil {
		return s + e.Kind.Error()
	}
	return s + e.Class.String()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is matches the class sentinel and the specific kind.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrTransient:
		return e.Class == Transient
	case ErrPermanent:
		return e.Class == Permanent
	case ErrUnknownOutcome:
		return e.Class == UnknownOutcome
	}
	return e.Kind != nil && target == e.Kind
}

// TooLargeError is the detail of ErrTooLarge.
type TooLargeError struct {
	Size, Max int
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("message is %d bytes, the limit is %d", e.Size, e.Max)
}

// Is makes errors.Is(err, ErrTooLarge) true.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// Errorf builds a classified error; %w in format wraps as usual.
func Errorf(op string, class Class, format string, args ...any) error {
	return &Error{Op: op, Class: class, Err: fmt.Errorf(format, args...)}
}

// Wrap classifies err for operation op. A nil err gives nil. An error that
// is already classified keeps its class (its Op is not repeated); context
// errors stay recognisable with errors.Is and are transient.
func Wrap(op string, class Class, err error) error {
	if err == nil {
		return nil
	}
	var be *Error
	if errors.As(err, &be) {
		return err
	}
	// An unclassified error that wraps one of our sentinels keeps the
	// sentinel's class (a driver returning fmt.Errorf("…: %w",
	// ErrUnknownOutcome), say).
	for _, s := range []error{ErrUnknownOutcome, ErrPermanent, ErrTooLarge, ErrUnsupported, ErrInvalid, ErrClosed, ErrLeaseLost} {
		if errors.Is(err, s) {
			class = ClassOf(err)
			break
		}
	}
	return &Error{Op: op, Class: class, Err: err}
}

// KindError builds a classified error with a specific sentinel kind.
func KindError(op string, class Class, kind error, format string, args ...any) error {
	return &Error{Op: op, Class: class, Kind: kind, Err: fmt.Errorf(format, args...)}
}

// ClassOf returns the class of err: the class of a classified error; for an
// unclassified one, Permanent for the permanent sentinels above and
// Transient otherwise (context cancellation included).
func ClassOf(err error) Class {
	var be *Error
	if errors.As(err, &be) {
		return be.Class
	}
	switch {
	case errors.Is(err, ErrUnknownOutcome):
		return UnknownOutcome
	case errors.Is(err, ErrPermanent), errors.Is(err, ErrTooLarge), errors.Is(err, ErrUnsupported),
		errors.Is(err, ErrInvalid), errors.Is(err, ErrClosed), errors.Is(err, ErrLeaseLost):
		return Permanent
	}
	return Transient
}

// IsContext reports whether err came from a cancelled or expired context.
func IsContext(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

func invalidf(format string, args ...any) error {
	return &Error{Class: Permanent, Kind: ErrInvalid, Err: fmt.Errorf(format, args...)}
}

// Invalidf returns a permanent ErrInvalid error; drivers use it for bad URLs
// and parameters.
func Invalidf(format string, args ...any) error { return invalidf(format, args...) }

func closedErr(op string) error {
	return &Error{Op: op, Class: Permanent, Kind: ErrClosed, Err: ErrClosed}
}

// ClosedError returns the permanent ErrClosed error for op.
func ClosedError(op string) error { return closedErr(op) }

// LeaseLostError returns the permanent ErrLeaseLost error for op.
func LeaseLostError(op, id string) error {
	return &Error{Op: op, Class: Permanent, Kind: ErrLeaseLost, Err: fmt.Errorf("message %s: %w", id, ErrLeaseLost)}
}
