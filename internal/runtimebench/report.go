package runtimebench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
)

// Report is a whole measurement: every mode, Runs times, interleaved.
type Report struct {
	Broker     string    `json:"broker"`
	Ledger     string    `json:"ledger,omitempty"`
	Tasks      int       `json:"tasks"`
	Runs       int       `json:"runs"`
	Publishers int       `json:"publishers"`
	Slots      int       `json:"slots"`
	Prefetch   int       `json:"prefetch"`
	Rate       int       `json:"rate,omitempty"`
	LoadStart  string    `json:"load_start"`
	LoadEnd    string    `json:"load_end"`
	Started    time.Time `json:"started"`

	// Delay is Config.Delay.
	Delay time.Duration `json:"delay_ns,omitempty"`
	// Rows are the medians per mode, in Modes order; All has every run.
	Rows []Result   `json:"rows"`
	All  [][]Result `json:"all_runs"`
}

// Modes is the order of a run.
var Modes = []Mode{Raw, RawClient, RawClientBatched, LedgerOff, LedgerOffBatched, LedgerOffBulk, LedgerOn, LedgerOnBulk, LedgerOnStepEff, LedgerOffKeyed, LedgerOnKeyed}

// Suite runs every mode runs times (raw, ledger off, ledger on, bulk, step
// + effect; then again), so slow drift of the machine touches every row
// alike, and returns the medians. progress, when set, is told each run.
func Suite(ctx context.Context, cfg Config, runs int, progress io.Writer) (*Report, error) {
	cfg = cfg.withDefaults()
	if runs < 1 {
		runs = 1
	}
	rep := &Report{Broker: redact(cfg.BrokerURL), Ledger: redact(cfg.LedgerDSN), Tasks: cfg.Tasks, Runs: runs, Publishers: cfg.Publishers,
		Slots: cfg.Slots, Prefetch: cfg.Prefetch, Rate: cfg.Rate, Delay: cfg.Delay, LoadStart: LoadAvg(), Started: time.Now().UTC()}
	if rep.Broker == "" {
		rep.Broker = "embedded (temporary file)"
	}
	modes := Modes
	if len(cfg.Modes) > 0 {
		modes = cfg.Modes
	}
	rep.All = make([][]Result, len(modes))
	for r := 0; r < runs; r++ {
		for i, m := range modes {
			if progress != nil {
				fmt.Fprintf(progress, "run %d/%d: %s…\n", r+1, runs, m)
			}
			res, err := Run(ctx, cfg, m)
			if err != nil {
				return rep, fmt.Errorf("%s: %w", m, err)
			}
			rep.All[i] = append(rep.All[i], res)
		}
	}
	for _, rs := range rep.All {
		rep.Rows = append(rep.Rows, Median(rs))
	}
	rep.LoadEnd = LoadAvg()
	return rep, nil
}

func isRaw(m Mode) bool { return m == Raw || m == RawClient || m == RawClientBatched }

func redact(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable)"
	}
	return broker.Redact(u)
}

// LoadAvg is /proc/loadavg's three load averages ("" where unavailable).
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// Label is a row's name in the table.
func Label(m Mode, ledgerDSN string) string {
	store := "ledger"
	switch {
	case isPostgres(ledgerDSN):
		store = "PostgreSQL ledger"
	case strings.HasPrefix(ledgerDSN, "sqlite:"):
		store = "SQLite ledger"
	}
	switch m {
	case Raw:
		return "raw (adapter loop, batches of 100)"
	case RawClient:
		return "raw client, one publish per call"
	case RawClientBatched:
		return "raw client, batched publish"
	case LedgerOffBatched:
		return "runtime, ledger off, EnqueueMany, batched raw client's shape"
	case LedgerOffBulk:
		return "runtime, ledger off, EnqueueMany, 1 × 1,000 a call"
	case LedgerOff:
		return "runtime, ledger off"
	case LedgerOn:
		return "runtime, " + store
	case LedgerOnBulk:
		return "runtime, " + store + ", EnqueueMany, 1 × 1,000 a call"
	case LedgerOnStepEff:
		return "runtime, " + store + ", 1 Step + 1 Effect"
	case LedgerOffKeyed:
		return "runtime, ledger off, ordering keys"
	case LedgerOnKeyed:
		return "runtime, " + store + ", ordering keys"
	}
	return string(m)
}

// WriteTable prints the report as a Markdown table.
func (rep *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "broker %s · ledger %s\n", rep.Broker, orNone(rep.Ledger))
	fmt.Fprintf(w, "%d tasks a run, medians of %d runs; %d publishers (one Enqueue per task), slots %d, prefetch %d",
		rep.Tasks, rep.Runs, rep.Publishers, rep.Slots, rep.Prefetch)
	if rep.Rate > 0 {
		fmt.Fprintf(w, ", paced at %d tasks/s", rep.Rate)
	}
	if rep.Delay > 0 {
		fmt.Fprintf(w, "; runtime rows' tasks delayed %s (latency from the requested run time)", rep.Delay)
	}
	fmt.Fprintf(w, "\nload average: %s at start (%s), %s at end\n\n", rep.LoadStart, rep.Started.Format("15:04 MST"), rep.LoadEnd)
	var raw, rawCall, rawBatch float64
	for _, r := range rep.Rows {
		switch r.Mode {
		case Raw:
			raw = r.PerSecond()
		case RawClient:
			rawCall = r.PerSecond()
		case RawClientBatched:
			rawBatch = r.PerSecond()
		}
	}
	fmt.Fprintln(w, "| row | tasks/s | ratio to adapter loop | ratio to raw client, same shape | enqueue → start p50 / p99 ms | client CPU µs/task | PostgreSQL CPU µs/task |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	var shapes []string
	for _, r := range rep.Rows {
		label := Label(r.Mode, rep.Ledger)
		if r.Skipped != "" {
			fmt.Fprintf(w, "| %s | – (%s) | | | | | |\n", label, r.Skipped)
			continue
		}
		ratio, ratioClient, lat, pg := "", "", "", ""
		raws := isRaw(r.Mode)
		if !raws && raw > 0 && rep.Rate == 0 { // paced runs are not a throughput comparison
			ratio = fmt.Sprintf("%.2f", r.PerSecond()/raw)
		}
		base, format := rawCall, "%.2f"
		switch r.Mode {
		case LedgerOffBatched:
			base = rawBatch
		case LedgerOffBulk, LedgerOnBulk:
			base, format = rawBatch, "(%.2f, other shape)"
		}
		if !raws && base > 0 && rep.Rate == 0 {
			ratioClient = fmt.Sprintf(format, r.PerSecond()/base)
		}
		if r.Mode == RawClient || r.Mode == RawClientBatched {
			if u, err := url.Parse(rep.Broker); err == nil && len(shapes) == 0 {
				if s, ok := rawClientShapes[rawScheme(u)]; ok {
					shapes = append(shapes, s)
				}
			}
		}
		if r.Duplicates > 0 {
			ratioClient += fmt.Sprintf(" (%d duplicate deliveries)", r.Duplicates)
		}
		if !raws {
			lat = fmt.Sprintf("%.2f / %.2f", ms(r.P50), ms(r.P99))
		}
		if r.PGCPU > 0 {
			pg = fmt.Sprintf("%.0f", us(r.PGCPU))
			if r.PGExec > 0 {
				pg += fmt.Sprintf(" (statements exec %.0f)", us(r.PGExec))
			}
		}
		fmt.Fprintf(w, "| %s | %.0f | %s | %s | %s | %.0f | %s |\n", label, r.PerSecond(), ratio, ratioClient, lat, us(r.ClientCPU), pg)
	}
	fmt.Fprintln(w, "\nThe ratio to the raw client compares one-Enqueue-per-call rows with the raw client's per-call row, and the batched-shape EnqueueMany row")
	fmt.Fprintf(w, "(%d goroutines each calling EnqueueMany with chunks of 100, 10 on SQS, as the raw client's batched row publishes) with its batched row;\n", rep.Publishers)
	fmt.Fprintln(w, "the 1 × 1,000 EnqueueMany rows are another shape, so their ratio to the batched row is in parentheses.")
	for _, s := range shapes {
		fmt.Fprintln(w, "Raw client: "+s+".")
	}
	return nil
}

// WriteJSON prints the report as JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

func orNone(s string) string {
	if s == "" {
		return "(none: ledger rows skipped)"
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
