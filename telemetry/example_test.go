package telemetry_test

import (
	"context"
	"log"
	"net/http"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/lanes"
	"github.com/switchyard-dev/switchyard/telemetry"
)

// Wiring a client and a server, and serving /metrics.
func Example() {
	ctx := context.Background()
	b, err := broker.Open(ctx, "mem://telemetry-example", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	myLanes := lanes.Defaults()

	tel, err := telemetry.New(&telemetry.Config{Namespace: "prod", Broker: b, Lanes: myLanes})
	if err != nil {
		log.Fatal(err)
	}
	ccfg := &switchyard.ClientConfig{}
	tel.InstrumentClient(ccfg) // enqueue spans; trace context in message headers
	client, _ := switchyard.NewClient(b, ccfg)

	scfg := &switchyard.ServerConfig{Lanes: myLanes}
	tel.Instrument(scfg) // Observer (counters) and Middleware (spans, durations)
	srv, _ := switchyard.NewServer(b, scfg)

	mux := http.NewServeMux()
	mux.Handle("/metrics", tel.Handler())
	_, _, _ = client, srv, mux
}
