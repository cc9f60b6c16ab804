package main

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/admin"
	"github.com/switchyard-dev/switchyard/ledger"
)

// existingOnly returns a broker URL or ledger DSN that opens an existing
// store only: for the file-backed stores (embedded://, sqlite:) it adds
// create=false, so that a mistyped path is "no such database: …" instead
// of a new, empty database. Other URLs, and URLs that already say create=,
// are returned as they are; so is rawURL when create is set (the
// operator asked for a new store with --create).
func existingOnly(rawURL string, create bool) string {
	if create {
		return rawURL
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return rawURL // the store's own parser reports it
	}
	switch strings.ToLower(u.Scheme) {
	case "embedded", "sqlite":
	default:
		return rawURL
	}
	if u.Opaque == ":memory:" || u.Opaque == "" && u.Path == ":memory:" {
		return rawURL
	}
	q := u.Query()
	if q.Has("create") {
		return rawURL
	}
	if u.RawQuery != "" {
		u.RawQuery += "&"
	}
	u.RawQuery += "create=false"
	return u.String()
}

// readNotes tells, on stderr, how a listing read its queue when that
// matters: by leasing (a broker that cannot browse), stopped at its limit
// (more), or stopped at the scan cap (truncated).
func readNotes(w io.Writer, mode admin.ReadMode, more, truncated bool, what string) {
	if mode == admin.ReadLease {
		fmt.Fprintf(w, "note: this broker cannot read a queue without taking it: the %s were leased for a moment and given back without spending an attempt (on some brokers they move to the back of the lane)\n", what)
	}
	if more {
		fmt.Fprintf(w, "note: more %s match than shown: raise --limit (at most 1000) or narrow the filter\n", what)
	}
	if truncated {
		fmt.Fprintf(w, "note: the scan stopped after holding %s it could not show; some were not looked at\n", what)
	}
}

// millis is d in milliseconds, as the admin API's *_ms fields give it.
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// internalPrefix matches the operation prefixes the library's layers put
// before an error ("sqlite: transition: ", "broker: receive: ",
// "admin: "): useful in logs, noise to an operator, whose line already
// names the command.
var internalPrefix = regexp.MustCompile(`(^|: )(?:(?:sqlite|postgres|ledger|broker|admin|embedded|asynq|nats|rabbitmq|sqs|redis-streams)(?:: [a-z][a-z -]*)?: )+`)

// errText is the text of err for an operator: a ledger conflict as the
// sentence it is, the layers' prefixes dropped, and an error of several
// lines (errors.Join) on several lines, each made safe for a terminal,
// never with a literal "\n".
func errText(err error) string {
	var ce *ledger.ConflictError
	if errors.As(err, &ce) {
		return term(fmt.Sprintf("task %s is %s; it cannot move to %s", ce.ID, ce.Current, ce.To))
	}
	lines := strings.Split(strings.TrimSpace(err.Error()), "\n")
	for i, l := range lines {
		if c := internalPrefix.ReplaceAllString(strings.TrimSpace(l), "$1"); c != "" {
			l = c
		}
		if i > 0 {
			l = "  " + l
		}
		lines[i] = term(l)
	}
	return strings.Join(lines, "\n")
}
