package broker

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strings"
)

func init() { Register("router", openRouterURL) }

// openRouterURL opens a Router from a URL whose parameters are the
// URL-escaped URLs of the routed brokers:
//
//	router://?default=<url>&lane.<lane>=<url>[&from.<lane>=<url>][&from.default=<url>]
//
// lane.<lane> routes that lane to its own broker; default serves every other
// lane (without it, unrouted lanes are an error). from.<lane> (or
// from.default) puts that route in live migration: it publishes to the
// lane's URL and also consumes the from URL until it is drained (see
// Migrating). The same URL given twice is opened once.
func openRouterURL(ctx context.Context, u *url.URL) (Driver, error) {
	if u.Host != "" || (u.Path != "" && u.Path != "/") {
		return nil, Invalidf("router URL takes only parameters: router://?default=<url>&lane.<lane>=<url>")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, Invalidf("router URL: the parameters do not parse")
	}
	opened := map[string]Driver{}
	fail := func(err error) (Driver, error) {
		for _, d := range opened {
			d.Close()
		}
		return nil, err
	}
	open := func(name, raw string) (Driver, error) {
		if d, ok := opened[raw]; ok {
			return d, nil
		}
		if strings.EqualFold(strings.SplitN(raw, ":", 2)[0], "router") {
			return nil, Invalidf("router URL: %s is itself a router URL", name)
		}
		d, err := OpenDriver(ctx, raw)
		if err != nil {
			return nil, fmt.Errorf("router URL: %s: %w", name, err)
		}
		opened[raw] = d
		return d, nil
	}
	to := map[string]string{}   // lane ("" = default) -> URL
	from := map[string]string{} // lane ("" = default) -> URL
	for k, vs := range q {
		if len(vs) != 1 || vs[0] == "" {
			return fail(Invalidf("router URL: parameter %q must be given once, with a URL", k))
		}
		switch {
		case k == "default":
			to[""] = vs[0]
		case k == "from.default":
			from[""] = vs[0]
		case strings.HasPrefix(k, "lane."):
			to[strings.TrimPrefix(k, "lane.")] = vs[0]
		case strings.HasPrefix(k, "from."):
			from[strings.TrimPrefix(k, "from.")] = vs[0]
		default:
			return fail(Invalidf("router URL: unknown parameter %q (known: default, lane.<lane>, from.<lane>, from.default)", k))
		}
	}
	for lane := range from {
		if _, ok := to[lane]; !ok {
			name := "lane." + lane
			if lane == "" {
				name = "default"
			}
			return fail(Invalidf("router URL: from.%s needs %s, the broker it migrates to", strings.TrimPrefix(name, "lane."), name))
		}
	}
	// Open in a stable order, so errors are reproducible.
	lanes := make([]string, 0, len(to))
	for l := range to {
		lanes = append(lanes, l)
	}
	sort.Strings(lanes)
	routes := map[string]Driver{}
	var fallback Driver
	for _, lane := range lanes {
		name := "lane." + lane
		if lane == "" {
			name = "default"
		}
		d, err := open(name, to[lane])
		if err != nil {
			return fail(err)
		}
		if f, ok := from[lane]; ok {
			fd, err := open("from."+strings.TrimPrefix(name, "lane."), f)
			if err != nil {
				return fail(err)
			}
			if fd == d {
				return fail(Invalidf("router URL: %s migrates from the broker it migrates to", name))
			}
			d = &sharedMigrating{Migrating{From: fd, To: d}}
		}
		if lane == "" {
			fallback = d
		} else {
			if err := ValidateName("lane", lane); err != nil {
				return fail(err)
			}
			routes[lane] = d
		}
	}
	r, err := NewRouter(routes, fallback)
	if err != nil {
		return fail(err)
	}
	r.owned = make([]Driver, 0, len(opened))
	for _, d := range opened {
		r.owned = append(r.owned, d)
	}
	return r, nil
}

// sharedMigrating is a Migrating opened by a router URL, whose drivers may
// be shared with other routes: the Router closes them, not it.
type sharedMigrating struct{ Migrating }

func (m *sharedMigrating) Close() error {
	m.closed.Store(true)
	return nil
}
