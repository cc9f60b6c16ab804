// Package registry is the scheme registry behind broker.Register and
// ledger.Register: openers by URL scheme, registered from init, looked up
// case-insensitively.
package registry

import (
	"sort"
	"strings"
	"sync"
)

// Registry maps URL schemes to openers of type O. The zero value is not
// usable: make one with New.
type Registry[O any] struct {
	what string // names the registry in panics: "broker", "ledger"
	mu   sync.RWMutex
	m    map[string]O
}

// New returns an empty registry; what prefixes its panic messages.
func New[O any](what string) *Registry[O] {
	return &Registry[O]{what: what, m: map[string]O{}}
}

// Register adds o under scheme (case-insensitive). Registering a scheme
// twice panics: it is a programming error found at start-up, never at run
// time.
func (r *Registry[O]) Register(scheme string, o O) {
	r.mu.Lock()
	defer r.mu.Unlock()
	scheme = strings.ToLower(scheme)
	if _, dup := r.m[scheme]; dup {
		panic(r.what + ": scheme registered twice: " + scheme)
	}
	r.m[scheme] = o
}

// Lookup returns the opener of scheme (case-insensitive).
func (r *Registry[O]) Lookup(scheme string) (O, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	o, ok := r.m[strings.ToLower(scheme)]
	return o, ok
}

// Schemes lists the registered schemes, sorted.
func (r *Registry[O]) Schemes() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s := make([]string, 0, len(r.m))
	for k := range r.m {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}
