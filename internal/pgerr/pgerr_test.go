package pgerr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/switchyard-dev/switchyard/broker"
)

func TestClassify(t *testing.T) {
	pg := func(code string) error { return &pgconn.PgError{Code: code, Message: "m"} }
	for _, c := range []struct {
		err   error
		write bool
		class broker.Class
		kind  error
	}{
		{pg("40001"), true, broker.Transient, nil},
		{pg("40P01"), true, broker.Transient, nil},
		{pg("57P01"), false, broker.Transient, nil},
		{pg("08006"), true, broker.Transient, nil},
		{pg("53300"), true, broker.Transient, nil}, // too many connections
		{pg("3D000"), false, broker.Permanent, nil},
		{pg("42P01"), false, broker.Permanent, nil},
		{pg("28P01"), false, broker.Permanent, nil},
		{pg("22001"), true, broker.Permanent, broker.ErrInvalid},
		{pg("23505"), true, broker.Permanent, broker.ErrInvalid},
		{pg("XX000"), true, broker.Transient, nil}, // unlisted: transient
		{fmt.Errorf("exec: %w", pg("40001")), true, broker.Transient, nil},
		{context.Canceled, true, broker.Transient, context.Canceled},
		{errors.New("closed pool"), true, broker.Permanent, broker.ErrClosed},
		{fmt.Errorf("acquire: %w", errors.New("x: closed pool")), true, broker.Permanent, broker.ErrClosed},
		{io.ErrUnexpectedEOF, true, broker.UnknownOutcome, nil}, // dropped mid-statement
		{io.ErrUnexpectedEOF, false, broker.Transient, nil},
	} {
		got := Classify("op", c.err, c.write)
		if cl := broker.ClassOf(got); cl != c.class {
			t.Errorf("Classify(%v, write=%v) class %v, want %v", c.err, c.write, cl, c.class)
		}
		if c.kind != nil && !errors.Is(got, c.kind) {
			t.Errorf("Classify(%v) = %v, want errors.Is %v", c.err, got, c.kind)
		}
	}
	if Classify("op", nil, true) != nil {
		t.Error("Classify(nil) is not nil")
	}
	done := broker.Wrap("x", broker.Permanent, errors.New("already"))
	if got := Classify("op", done, true); got != done {
		t.Errorf("an error already classified came back as %v", got)
	}
	if !IsCode(fmt.Errorf("w: %w", pg("23503")), "23503") || IsCode(pg("23505"), "23503") || IsCode(errors.New("23503"), "23503") {
		t.Error("IsCode")
	}
}
