// Package urlq builds the query of an adapter URL from a Config, leaving
// zero fields out so that they take the parameters' defaults (the NATS and
// RabbitMQ adapters turn a Config back into the URL their parser reads).
package urlq

import (
	"net/url"
	"strconv"
	"time"
)

// Query is a url.Values that sets only non-zero values.
type Query struct{ url.Values }

// New returns an empty Query.
func New() Query { return Query{url.Values{}} }

// Str sets k to v unless v is empty.
func (q Query) Str(k, v string) {
	if v != "" {
		q.Set(k, v)
	}
}

// Dur sets k to d unless d is zero.
func (q Query) Dur(k string, d time.Duration) {
	if d != 0 {
		q.Set(k, d.String())
	}
}

// Int sets k to n unless n is zero.
func (q Query) Int(k string, n int) {
	if n != 0 {
		q.Set(k, strconv.Itoa(n))
	}
}

// Bool sets k to "true" when b is.
func (q Query) Bool(k string, b bool) {
	if b {
		q.Set(k, "true")
	}
}
