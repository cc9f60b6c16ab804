// Command pstestd serves pstest, Google's Pub/Sub fake from
// cloud.google.com/go/pubsub/v2/pstest, on a loopback TCP port, for
// benchmarks and manual runs against gcppubsub:// URLs:
//
//	go run ./internal/pstestd -addr 127.0.0.1:8085 &
//	switchyard bench runtime --broker 'gcppubsub://switchyard-test?emulator=127.0.0.1:8085&max_message_size=1048576'
//
// The tests need no such process: they serve pstest in the test process
// (internal/pubsubclean.PubSubEmulator). It keeps everything in memory and
// stops on SIGINT or SIGTERM.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"cloud.google.com/go/pubsub/v2/pstest"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8085", "loopback host:port to listen on")
	flag.Parse()
	host, _, err := net.SplitHostPort(*addr)
	if ip := net.ParseIP(host); err != nil || host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		fmt.Fprintf(os.Stderr, "pstestd: -addr %q must be a loopback host:port\n", *addr)
		os.Exit(2)
	}
	// pstest panics when it cannot listen: find out first.
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pstestd: %v\n", err)
		os.Exit(1)
	}
	_ = l.Close()
	srv := pstest.NewServerWithAddress(*addr)
	fmt.Printf("pstest listening on %s\n", srv.Addr)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	_ = srv.Close()
}
