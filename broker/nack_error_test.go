package broker_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/switchyard-dev/switchyard/broker"
)

// TestNackErrorText: the text handed to a driver is valid UTF-8, at most
// MaxNackErrorLen bytes, cut at a character boundary, and "" for nil.
func TestNackErrorText(t *testing.T) {
	t.Parallel()
	if s := broker.NackErrorText(nil); s != "" {
		t.Errorf("nil: %q", s)
	}
	if s := broker.NackErrorText(errors.New("boom")); s != "boom" {
		t.Errorf("short: %q", s)
	}
	if s := broker.NackErrorText(errors.New("bad \xff byte")); !utf8.ValidString(s) || !strings.Contains(s, "byte") {
		t.Errorf("invalid UTF-8: %q", s)
	}
	long := errors.New(strings.Repeat("é", broker.MaxNackErrorLen)) // 2 bytes each
	s := broker.NackErrorText(long)
	if len(s) > broker.MaxNackErrorLen || !utf8.ValidString(s) || !strings.HasSuffix(s, "…") {
		t.Errorf("long: %d bytes, valid %v, suffix %q", len(s), utf8.ValidString(s), s[len(s)-6:])
	}
}
