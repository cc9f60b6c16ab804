package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// --pg-roles: while a row that uses PostgreSQL runs, a sampler reads
// pg_stat_activity (pid, backend_type, application_name, the last
// query) and /proc/<pid>/stat (utime+stime) of every postgres process
// every 20 ms, and splits the server's CPU by role:
//
//   - writers: the benchmark's own client backends that are not LISTEN
//     connections (the ledger's pool and writer sessions; river's pool);
//   - listen notes / listen outbox / listen shared: the benchmark's
//     connections whose last statement was a LISTEN on the notes channel
//     (sy_…), on switchyard_outbox, or on both; listen other: any other
//     LISTEN (river's);
//   - background: every other postgres process (walwriter, checkpointer,
//     autovacuum, the postmaster…);
//   - foreign: client backends of other programs (other users of the
//     same server), reported but not in the total; the sampler's own
//     backend likewise.
//
// The benchmark's backends are told apart by application_name (set on
// --pg when --pg-roles is given). Commits per task are the delta of
// pg_stat_database.xact_commit of --pg's database (the sampler connects
// to --pg-roles-db, so its own queries are not counted: use a database of
// the benchmark's own for figures other users of the server do not
// disturb); xids per task the delta of txid_current(), which is
// cluster-wide.

const (
	rolesApp     = "peers_bench"
	samplerApp   = "peers_pgroles"
	rolesEvery   = 20 * time.Millisecond
	roleWriters  = "writers"
	roleNotes    = "listen notes"
	roleOutbox   = "listen outbox"
	roleShared   = "listen shared"
	roleListen   = "listen other"
	roleBack     = "background"
	roleForeign  = "foreign"
	roleSampler  = "sampler"
	statsFlushed = 1500 * time.Millisecond // PostgreSQL flushes a backend's counters at most every second
)

var roleOrder = []string{roleWriters, roleNotes, roleOutbox, roleShared, roleListen, roleBack, roleForeign, roleSampler}

// roleStats is one row's measurement.
type roleStats struct {
	cpu     map[string]time.Duration
	commits int64
	xids    int64
	samples int
}

type procCPU struct {
	first, last int64 // ticks
	role        string
}

type rolesSampler struct {
	conn    *pgx.Conn
	db      string
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	procs   map[int]*procCPU
	samples int
	commit0 int64
	xid0    int64
}

// withAppName returns dsn with application_name set.
func withAppName(dsn, app string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// startRoles starts sampling; samplerDSN is where the sampler connects,
// db the benchmark's database.
func startRoles(ctx context.Context, samplerDSN, db string) (*rolesSampler, error) {
	dsn, err := withAppName(samplerDSN, samplerApp)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	s := &rolesSampler{conn: conn, db: db, stop: make(chan struct{}), done: make(chan struct{}), procs: map[int]*procCPU{}}
	if err := s.counters(ctx, &s.commit0, &s.xid0); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	s.sample(ctx, true)
	go s.loop(ctx)
	return s, nil
}

func (s *rolesSampler) counters(ctx context.Context, commits, xid *int64) error {
	return s.conn.QueryRow(ctx, `SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = $1), txid_current()`, s.db).Scan(commits, xid)
}

func (s *rolesSampler) loop(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(rolesEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
			s.sample(ctx, false)
		}
	}
}

// sample reads the roles and CPU of every postgres process.
func (s *rolesSampler) sample(ctx context.Context, first bool) {
	roles := map[int]string{}
	rows, err := s.conn.Query(ctx, `SELECT pid, coalesce(backend_type, ''), coalesce(application_name, ''), left(coalesce(query, ''), 200) FROM pg_stat_activity`)
	if err == nil {
		for rows.Next() {
			var (
				pid            int
				bt, app, query string
			)
			if rows.Scan(&pid, &bt, &app, &query) != nil {
				continue
			}
			roles[pid] = roleOf(bt, app, query)
		}
		rows.Close()
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	for _, d := range dirs {
		comm, err := os.ReadFile(d + "/comm")
		if err != nil || string(bytes.TrimSpace(comm)) != "postgres" {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		ticks, ok := procTicks(d)
		if !ok {
			continue
		}
		p := s.procs[pid]
		if p == nil {
			p = &procCPU{role: roleBack}
			if first {
				p.first = ticks
			} // else: born during the run; all its CPU counts
			s.procs[pid] = p
		}
		p.last = ticks
		if r, ok := roles[pid]; ok {
			p.role = r
		}
	}
}

func roleOf(backendType, app, query string) string {
	if backendType != "client backend" {
		return roleBack
	}
	switch app {
	case samplerApp:
		return roleSampler
	case rolesApp:
	default:
		return roleForeign
	}
	if !strings.HasPrefix(strings.ToUpper(strings.TrimSpace(query)), "LISTEN") {
		return roleWriters
	}
	notes, outbox := strings.Contains(query, "sy_"), strings.Contains(query, "switchyard_outbox")
	switch {
	case notes && outbox:
		return roleShared
	case outbox:
		return roleOutbox
	case notes:
		return roleNotes
	default:
		return roleListen // river's
	}
}

// procTicks is utime+stime of /proc/<pid>.
func procTicks(dir string) (int64, bool) {
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return u + st, true
}

// finish stops sampling and returns the measurement.
func (s *rolesSampler) finish(ctx context.Context) roleStats {
	close(s.stop)
	<-s.done
	s.sample(ctx, false)
	time.Sleep(statsFlushed)
	var commits, xid int64
	_ = s.counters(ctx, &commits, &xid)
	s.conn.Close(ctx)
	st := roleStats{cpu: map[string]time.Duration{}, commits: commits - s.commit0, xids: xid - s.xid0 - 1, samples: s.samples}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		st.cpu[p.role] += time.Duration(p.last-p.first) * time.Second / clockTicks
	}
	return st
}

const clockTicks = 100 // USER_HZ

// printRoles prints one line per measured run.
func printRoles(w io.Writer, name string, run int, tasks int, elapsed time.Duration, st roleStats) {
	if tasks <= 0 {
		return
	}
	per := func(d time.Duration) float64 { return us(d) / float64(tasks) }
	var total time.Duration
	for r, d := range st.cpu {
		if r != roleForeign && r != roleSampler {
			total += d
		}
	}
	var parts []string
	for _, r := range roleOrder {
		if d, ok := st.cpu[r]; ok && d > 0 {
			parts = append(parts, fmt.Sprintf("%s %.1f", r, per(d)))
		}
	}
	share := 0.0
	if total > 0 {
		share = 100 * float64(st.cpu[roleWriters]) / float64(total)
	}
	fmt.Fprintf(w, "| %s | %d | %.0f | %.1f | %.0f%% | %s | %.3f | %.3f |\n", name, run, float64(tasks)/elapsed.Seconds(),
		per(total), share, strings.Join(parts, "; "), float64(st.commits)/float64(tasks), float64(st.xids)/float64(tasks))
}
