package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/admin"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	"github.com/switchyard-dev/switchyard/providerbatch/sqlstore"
	"github.com/switchyard-dev/switchyard/telemetry"
)

const adminUsage = `usage: switchyard admin --broker URL [--ledger DSN] [--listen 127.0.0.1:8080] [--tokens-file FILE] [flags]

Serves the admin HTTP API, the ingestion endpoint, the web dashboard and
/metrics (see docs/ADMIN-API.md) until interrupted.

Tokens come from --tokens-file, else from $SWITCHYARD_ADMIN_TOKENS, one a
line (or separated by ';' in the variable):

  name role [tenant] secret      role: read, enqueue or admin; secret: 16+ bytes

The command refuses to start without a token.`

// adminEnvTokens names the environment variable holding tokens.
const adminEnvTokens = "SWITCHYARD_ADMIN_TOKENS"

func runAdmin(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("admin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	brokerURL := fs.String("broker", "", "broker URL, e.g. embedded:///var/lib/app/switchyard.db (required)")
	dsn := fs.String("ledger", "", "ledger DSN, e.g. sqlite:///var/lib/app/ledger.db (without it: no task timelines, reviews, ingestion status or lane pause)")
	listen := fs.String("listen", "127.0.0.1:8080", "address to listen on")
	tokensFile := fs.String("tokens-file", "", "file of tokens, one \"name role [tenant] secret\" a line (default: $"+adminEnvTokens+")")
	var kinds listFlag
	fs.Var(&kinds, "kinds", "task kinds the ingestion endpoint accepts, comma-separated or repeated; kind=lane sets the kind's default lane (default: none)")
	namespace := fs.String("namespace", "default", "the switchyard_namespace label of /metrics")
	create := fs.Bool("create", false, "create the broker's or ledger's database file when it does not exist (default: an error, \"no such database\")")
	var laneList listFlag
	fs.Var(&laneList, "lanes", "the lanes your servers serve, besides the four default lanes and those holding messages (comma-separated)")
	metrics := fs.Bool("metrics", true, "serve Prometheus metrics (lane depths read from the broker on each scrape) at /metrics")
	tlsCert := fs.String("tls-cert", "", "serve HTTPS with this certificate (PEM) and --tls-key")
	tlsKey := fs.String("tls-key", "", "the private key of --tls-cert (PEM)")
	var origins listFlag
	fs.Var(&origins, "trusted-origin", "another origin allowed to make state-changing calls from a browser, e.g. https://ops.example.com (repeatable)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, adminUsage)
		fmt.Fprintln(stderr, "\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected argument %q\n%s\n", fs.Arg(0), adminUsage)
		return errUsage
	}
	if *brokerURL == "" {
		fmt.Fprintf(stderr, "missing required flag --broker\n%s\n", adminUsage)
		return errUsage
	}
	if (*tlsCert == "") != (*tlsKey == "") {
		return fmt.Errorf("--tls-cert and --tls-key go together")
	}
	tokens, source, err := adminTokens(*tokensFile, stderr)
	if err != nil {
		return err
	}
	if len(tokens) == 0 {
		return fmt.Errorf("no tokens in %s: the admin API never runs open; add lines \"name role [tenant] secret\" (role read, enqueue or admin)", source)
	}
	specs := map[string]admin.KindSpec{}
	for _, k := range kinds {
		name, lane, _ := strings.Cut(k, "=")
		if err := broker.ValidateName("kind", name); err != nil {
			return fmt.Errorf("--kinds %q: %w", k, err)
		}
		if lane != "" {
			if err := broker.ValidateName("lane", lane); err != nil {
				return fmt.Errorf("--kinds %q: %w", k, err)
			}
		}
		specs[name] = admin.KindSpec{Lane: lane}
	}

	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var L ledger.Ledger
	bopts := &broker.Options{}
	if bopts.Codec, err = envCodec(); err != nil {
		return err
	}
	if *dsn != "" {
		if L, err = ledger.Open(octx, existingOnly(*dsn, *create)); err != nil {
			return err
		}
		defer L.Close()
		bopts.Dedup = L
	}
	b, err := broker.Open(octx, existingOnly(*brokerURL, *create), bopts)
	if err != nil {
		return err
	}
	defer b.Close()
	acfg := admin.Config{Broker: b, Ledger: L, Kinds: specs}
	if *dsn != "" {
		// The spend report (GET /api/v1/spend, the dashboard's Spend
		// view) reads the ledger database's spend rows.
		// An in-memory ledger has no file to share: the report is then
		// unavailable (a 501 that says so), and the admin API runs.
		if st, err := sqlstore.OpenDSN(octx, *dsn); err != nil {
			fmt.Fprintf(stderr, "switchyard admin: no spend report: %v\n", err)
		} else {
			defer st.Close()
			acfg.Spend = st
		}
	}
	if len(laneList) > 0 {
		acfg.Lanes = append(defaultLaneNames(), laneList...)
	}
	ops, err := admin.New(acfg)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	hcfg := admin.HandlerConfig{Tokens: tokens, Logger: logger, TrustedOrigins: origins}
	if *metrics {
		tel, err := telemetry.New(&telemetry.Config{Namespace: *namespace, Broker: b})
		if err != nil {
			return err
		}
		if L != nil && ledger.OutboxOf(L) != nil {
			// The outbox's depth and oldest age (docs/alerts.yml).
			if err := tel.WatchOutbox(L); err != nil {
				return err
			}
		}
		// The lanes' scaling signal (docs/SCALING.md).
		if err := tel.WatchScaling(ops.Scaler()); err != nil {
			return err
		}
		hcfg.Metrics = tel.Handler()
	}
	h, err := admin.NewHandler(ops, hcfg)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *listen, err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	scheme := "http"
	if *tlsCert != "" {
		scheme = "https"
	} else if host, _, _ := net.SplitHostPort(*listen); !isLoopback(host) {
		fmt.Fprintf(stderr, "warning: serving plain HTTP on %s: bearer tokens cross the network in clear text; use --tls-cert/--tls-key or a TLS proxy\n", ln.Addr())
	}
	fmt.Fprintf(stdout, "switchyard admin: dashboard and API at %s://%s/ (%d token(s) from %s; /healthz, /readyz", scheme, ln.Addr(), len(tokens), source)
	if *metrics {
		fmt.Fprint(stdout, ", /metrics")
	}
	fmt.Fprintln(stdout, ")")

	served := make(chan error, 1)
	go func() {
		if *tlsCert != "" {
			served <- srv.ServeTLS(ln, *tlsCert, *tlsKey)
		} else {
			served <- srv.Serve(ln)
		}
	}()
	select {
	case err := <-served:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	fmt.Fprintln(stdout, "switchyard admin: shutting down")
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// adminTokens reads the tokens from file, else from the environment, and
// says where they came from. It warns when the file is readable by others.
func adminTokens(file string, stderr io.Writer) ([]admin.Token, string, error) {
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return nil, file, fmt.Errorf("tokens file: %w", err)
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil && st.Mode().Perm()&0o077 != 0 {
			fmt.Fprintf(stderr, "warning: %s is readable by other users (mode %v); chmod 600 it\n", file, st.Mode().Perm())
		}
		toks, err := admin.ParseTokens(f)
		if err != nil {
			return nil, file, fmt.Errorf("%s: %w", file, err)
		}
		return toks, file, nil
	}
	src := "$" + adminEnvTokens
	v := os.Getenv(adminEnvTokens)
	toks, err := admin.ParseTokens(strings.NewReader(strings.ReplaceAll(v, ";", "\n")))
	if err != nil {
		return nil, src, fmt.Errorf("%s: %w", src, err)
	}
	return toks, src, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
