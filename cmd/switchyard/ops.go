package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/switchyard-dev/switchyard/admin"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/lanes"
	"github.com/switchyard-dev/switchyard/ledger"
)

// stdin is where confirmations and enqueue arguments are read from; tests
// replace it.
var stdin io.Reader = os.Stdin

// opsCmd holds the flags every operator command shares and opens the Ops
// they run on.
type opsCmd struct {
	fs      *flag.FlagSet
	usage   string
	broker  *string
	ledger  *string
	asJSON  *bool
	actor   *string
	timeout *time.Duration
	create  *bool
	lanes   listFlag
}

func newOpsCmd(name, usage string, stderr io.Writer) *opsCmd {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &opsCmd{fs: fs, usage: usage}
	c.broker = fs.String("broker", "", "broker URL, e.g. embedded:///var/lib/app/switchyard.db (required)")
	c.ledger = fs.String("ledger", "", "ledger DSN, e.g. sqlite:///var/lib/app/ledger.db")
	c.asJSON = fs.Bool("json", false, "print JSON for scripts instead of a table")
	c.actor = fs.String("actor", "", "who you are, for the ledger's event log (default: operator:$USER)")
	c.timeout = fs.Duration("timeout", 5*time.Minute, "give up after this long")
	c.create = fs.Bool("create", false, "create the broker's or ledger's database file when it does not exist (default: an error, \"no such database\")")
	fs.Var(&c.lanes, "lanes", "the lanes your servers serve, besides the four default lanes and those holding messages (comma-separated)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, usage)
		fmt.Fprintln(stderr, "\nflags:")
		fs.PrintDefaults()
	}
	return c
}

// parse parses args (flags and positional arguments in any order) and
// checks the positional count and the required flags.
func (c *opsCmd) parse(args []string, npos int, needLedger bool, stderr io.Writer) ([]string, error) {
	pos, err := parseInterspersed(c.fs, args)
	if err != nil {
		return nil, errUsage
	}
	var missing []string
	if *c.broker == "" {
		missing = append(missing, "--broker")
	}
	if needLedger && *c.ledger == "" {
		missing = append(missing, "--ledger")
	}
	if len(missing) > 0 {
		fmt.Fprintf(stderr, "missing required flag %s\n%s\n", strings.Join(missing, " and "), c.usage)
		return nil, errUsage
	}
	if len(pos) != npos {
		if npos == 0 {
			fmt.Fprintf(stderr, "unexpected argument %q\n%s\n", pos[0], c.usage)
		} else {
			fmt.Fprintf(stderr, "want %d argument(s), got %d\n%s\n", npos, len(pos), c.usage)
		}
		return nil, errUsage
	}
	return pos, nil
}

func (c *opsCmd) who() admin.Actor {
	if *c.actor != "" {
		return admin.Actor(*c.actor)
	}
	u := os.Getenv("USER")
	if u == "" {
		u = "unknown"
	}
	return admin.Actor("operator:" + u)
}

// open opens the ledger (when given), the broker and Ops over them. cfg's
// Broker and Ledger are filled in, and --lanes added to the known lanes.
// File-backed stores must exist unless --create (existingOnly).
func (c *opsCmd) open(ctx context.Context, cfg admin.Config) (*admin.Ops, func(), error) {
	var L ledger.Ledger
	var err error
	closers := []func(){}
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	bopts := &broker.Options{}
	if bopts.Codec, err = envCodec(); err != nil {
		return nil, nil, err
	}
	if *c.ledger != "" {
		if L, err = ledger.Open(ctx, existingOnly(*c.ledger, *c.create)); err != nil {
			return nil, nil, err
		}
		closers = append(closers, func() { L.Close() })
		bopts.Dedup = L
	}
	b, err := broker.Open(ctx, existingOnly(*c.broker, *c.create), bopts)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	closers = append(closers, func() { b.Close() })
	cfg.Broker, cfg.Ledger = b, L
	if len(c.lanes) > 0 {
		cfg.Lanes = append(defaultLaneNames(), c.lanes...)
	}
	ops, err := admin.New(cfg)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return ops, closeAll, nil
}

// listFlag is a repeatable flag whose values may also be comma-separated.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// confirm asks on w and reads y/N from stdin.
func confirm(w io.Writer, question string) bool {
	fmt.Fprint(w, question)
	line, _ := bufio.NewReader(stdin).ReadString('\n')
	a := strings.ToLower(strings.TrimSpace(line))
	return a == "y" || a == "yes"
}

// progress returns an admin.Progress that draws a bar on stderr when it is
// a terminal, and nothing otherwise (the command prints a final count).
func progress(stderr io.Writer, verb string) (admin.Progress, func()) {
	if !isTerminal(stderr) {
		return nil, func() {}
	}
	last := time.Time{}
	drawn := false
	return func(done, total int) {
			if done != total && time.Since(last) < 100*time.Millisecond {
				return
			}
			last, drawn = time.Now(), true
			fmt.Fprintf(stderr, "\r\033[K%s %s", progressBar(int64(done), int64(total)), verb)
		}, func() {
			if drawn {
				fmt.Fprintln(stderr)
			}
		}
}

// oneLine is s on one line for a table cell: line breaks become spaces,
// other control characters are escaped (term), and it is cut to n runes.
func oneLine(s string, n int) string {
	s = strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(s)
	s = term(s)
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// term makes text from tasks, tenants and brokers safe to print on an
// operator's terminal: control characters (C0, DEL, C1 — escape sequences
// start with them), Unicode line and paragraph separators, bidirectional
// overrides and invalid UTF-8 are written as Go escapes (\x1b, \u202e), and
// a backslash as \\ so an escape cannot be forged.
func term(s string) string {
	clean := true
	for _, r := range s {
		if r == '\\' || r == utf8.RuneError || unsafeRune(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x100 && unsafeRune(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// unsafeRune reports whether r must not reach a terminal as is.
func unsafeRune(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0:
		return true
	case r == 0x2028, r == 0x2029, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return true
	}
	return false
}

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// since is how long ago t was, "-" for the zero time.
func since(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return age(time.Since(t))
}

// defaultLaneNames are the four default lanes' names.
func defaultLaneNames() []string {
	var out []string
	for _, l := range lanes.Defaults() {
		out = append(out, l.Name)
	}
	return out
}
