package ledger

import (
	"context"
	"time"
)

// Server is one worker process as it registered itself in the ledger
// (Servers): where it runs, what it serves and when it last said so.
type Server struct {
	// ID names the server (scheduler.Config.WorkerID): unique per
	// process, at most 200 bytes.
	ID string
	// Host and PID say where it runs.
	Host string
	PID  int
	// Lanes are the lanes it serves, in policy order.
	Lanes []string
	// Slots is how many tasks it runs at once; Busy how many of them are
	// in use as of the last heartbeat.
	Slots int
	Busy  int
	// Version is the Switchyard version it runs ("(devel)" for a build
	// outside a released module).
	Version string
	// Started is when the server started; Heartbeat when it last
	// registered, by the store's clock (set by RegisterServer, ignored on
	// the way in).
	Started   time.Time
	Heartbeat time.Time
	// Interval is how often the server registers itself. A server whose
	// Heartbeat is older than ServerGoneAfter intervals is gone (Gone).
	Interval time.Duration
}

// ServerGoneAfter is how many missed heartbeat intervals make a server
// gone: it stopped without removing its record (killed, or its host
// lost).
const ServerGoneAfter = 3

// ServerPruneAfter is how long a gone server's record stays before the
// schedulers sharing the ledger prune it (Servers.PruneServers).
const ServerPruneAfter = time.Hour

// Gone reports whether s missed ServerGoneAfter heartbeats as of now.
func (s *Server) Gone(now time.Time) bool {
	iv := s.Interval
	if iv <= 0 {
		iv = 10 * time.Second
	}
	return now.Sub(s.Heartbeat) > ServerGoneAfter*iv
}

// Servers is an optional interface of a Ledger: the fleet's registry.
// Every scheduler sharing the ledger registers itself when it starts,
// refreshes its record every heartbeat and removes it when it stops; the
// operator tools (switchyard servers, GET /api/v1/servers, the dashboard)
// list them. Both stores implement it; get it with ServersOf, which sees
// through WithCodec (server records carry no payloads).
type Servers interface {
	// RegisterServer inserts or replaces the record of s.ID, stamping
	// Heartbeat with the store's clock. An empty or over-long ID or host,
	// an invalid lane name, a negative PID, Slots, Busy or Interval, or
	// Busy above Slots is refused (broker.ErrInvalid).
	RegisterServer(ctx context.Context, s Server) error
	// RemoveServer deletes id's record; removing one that is not there
	// does nothing.
	RemoveServer(ctx context.Context, id string) error
	// ListServers lists every record, by ID, gone ones included.
	ListServers(ctx context.Context) ([]Server, error)
	// PruneServers deletes the records whose Heartbeat is before before,
	// and says how many.
	PruneServers(ctx context.Context, before time.Time) (int, error)
}

// ServersOf returns L's server registry, or nil when it has none. It sees
// through WithCodec.
func ServersOf(L Ledger) Servers {
	s, _ := unwrapTo[Servers](L)
	return s
}
