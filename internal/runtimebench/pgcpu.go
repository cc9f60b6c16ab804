package runtimebench

import (
	"bytes"
	"context"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU fields (100 on
// every Linux platform Go supports).
const clockTicks = 100

// PostgresCPU returns the CPU time used so far by every process on this
// machine whose comm is "postgres": utime+stime of each, plus
// cutime+cstime (the CPU of its exited and reaped children, so backends
// that exit during a measurement are still counted by the postmaster).
func PostgresCPU() (time.Duration, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil || len(dirs) == 0 {
		return 0, errNoProc
	}
	var ticks int64
	found := false
	for _, d := range dirs {
		comm, err := os.ReadFile(d + "/comm")
		if err != nil || string(bytes.TrimSpace(comm)) != "postgres" {
			continue
		}
		stat, err := os.ReadFile(d + "/stat")
		if err != nil {
			continue
		}
		// Fields after the parenthesised comm: state is field 3, utime
		// 14, stime 15, cutime 16, cstime 17.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 15 {
			continue
		}
		for _, k := range []int{11, 12, 13, 14} { // fields 14–17, counted from field 3
			v, _ := strconv.ParseInt(f[k], 10, 64)
			ticks += v
		}
		found = true
	}
	if !found {
		return 0, errNoProc
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// pgSample is a PostgreSQL measurement in progress.
type pgSample struct {
	dsn       string
	cpu0      time.Duration
	cpuOK     bool
	exec0     float64
	execOK    bool
	localHost bool
}

// startPGSample starts measuring the PostgreSQL server of dsn (nothing
// when dsn is empty).
func startPGSample(ctx context.Context, dsn string) *pgSample {
	s := &pgSample{dsn: dsn}
	if dsn == "" {
		return s
	}
	if u, err := url.Parse(dsn); err == nil {
		h := u.Hostname()
		if h == "" || h == "localhost" {
			s.localHost = true
		} else if ip := net.ParseIP(h); ip != nil && ip.IsLoopback() {
			s.localHost = true
		}
	}
	if s.localHost {
		s.cpu0, s.cpuOK = measure(PostgresCPU)
	}
	s.exec0, s.execOK = statementsExecMS(ctx, dsn)
	return s
}

func measure(f func() (time.Duration, error)) (time.Duration, bool) {
	d, err := f()
	return d, err == nil
}

// perTask ends the sample: PostgreSQL CPU and statement execution time per
// task (zero when not measurable).
func (s *pgSample) perTask(ctx context.Context, n int) (cpu, exec time.Duration) {
	if s.dsn == "" || n <= 0 {
		return 0, 0
	}
	if s.cpuOK {
		if c1, ok := measure(PostgresCPU); ok && c1 >= s.cpu0 {
			cpu = (c1 - s.cpu0) / time.Duration(n)
		}
	}
	if s.execOK {
		if e1, ok := statementsExecMS(ctx, s.dsn); ok && e1 >= s.exec0 {
			exec = time.Duration((e1 - s.exec0) * float64(time.Millisecond) / float64(n))
		}
	}
	return cpu, exec
}

// statementsExecMS returns pg_stat_statements' total execution time in
// milliseconds, when the extension is installed in dsn's database.
func statementsExecMS(ctx context.Context, dsn string) (float64, bool) {
	conn, err := pgx.Connect(ctx, pgxDSN(dsn))
	if err != nil {
		return 0, false
	}
	defer conn.Close(ctx)
	var ms float64
	if err := conn.QueryRow(ctx, `SELECT coalesce(sum(total_exec_time), 0)::float8 FROM pg_stat_statements`).Scan(&ms); err != nil {
		return 0, false
	}
	return ms, true
}

// pgxDSN strips the ledger's own DSN parameters, leaving what pgx
// understands.
func pgxDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	q := u.Query()
	q.Del("schema")
	q.Del("dedup_window")
	u.RawQuery = q.Encode()
	return u.String()
}
