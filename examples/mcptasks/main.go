// Mcptasks serves a Switchyard-backed tool over MCP's tasks (2025-11-25):
// a tool call returns a durable task handle at once; the client polls
// tasks/get (progress shows in statusMessage), then fetches the result with
// tasks/result. A second tool waits for a person's decision (AwaitEvent):
// the task is input_required until someone signals it, and holds no worker
// meanwhile.
//
// By default it runs a small JSON-RPC client against itself, prints the
// exchange and exits:
//
//	go run ./examples/mcptasks
//
// With -serve it keeps serving MCP at http://<addr>/mcp (and the signal
// callback for the decision tool at /signal/<task id>) for a real client:
//
//	go run ./examples/mcptasks -serve -addr 127.0.0.1:8765
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard"
	_ "github.com/switchyard-dev/switchyard/adapters/embedded" // embedded://
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	_ "github.com/switchyard-dev/switchyard/ledger/sqlite" // sqlite://
	"github.com/switchyard-dev/switchyard/mcptasks"
)

// Summarize is the tool "summarize"'s task.
type Summarize struct {
	Doc string `json:"doc"`
}

func (Summarize) Kind() string { return "doc.summarize" }

// Publish is the tool "publish"'s task: it waits for an editor's decision.
type Publish struct {
	Doc string `json:"doc"`
}

func (Publish) Kind() string { return "doc.publish" }

func main() {
	serve := flag.Bool("serve", false, "keep serving instead of running the demo client")
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	flag.Parse()
	ctx := context.Background()

	dir, err := os.MkdirTemp("", "switchyard-mcptasks-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	L, err := ledger.Open(ctx, "sqlite://"+filepath.Join(dir, "ledger.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer L.Close()
	b, err := broker.Open(ctx, "embedded://"+filepath.Join(dir, "queue.db"), &broker.Options{Dedup: L})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	client, _ := switchyard.NewClient(b, &switchyard.ClientConfig{Ledger: L})
	srv, _ := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: L, PollWait: 50 * time.Millisecond})

	_ = switchyard.Register(srv, func(ctx context.Context, t *switchyard.Task[Summarize]) error {
		words := strings.Fields("the quarter closed above plan with churn down and two new regions live")
		for i, w := range words {
			_ = switchyard.Progress(ctx, float64(i)/float64(len(words)), "writing")
			if err := switchyard.Emit(ctx, []byte(w+" ")); err != nil { // streamed: GET /api/v1/tasks/{id}/events
				return err
			}
			time.Sleep(30 * time.Millisecond) // a model producing tokens
		}
		return t.SetResult(map[string]string{"doc": t.Args.Doc, "summary": strings.Join(words, " ")})
	}, nil)
	_ = switchyard.Register(srv, func(ctx context.Context, t *switchyard.Task[Publish]) error {
		d, err := switchyard.AwaitEvent[struct{ Approved bool }](ctx, "decision", 24*time.Hour, nil)
		if err != nil {
			return err // parks the task: input_required over MCP, no worker held
		}
		return t.SetResult(map[string]any{"doc": t.Args.Doc, "published": d.Approved})
	}, nil)
	if err := srv.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer srv.Stop(context.Background())

	h, err := mcptasks.New(mcptasks.Config{Client: client, Ledger: L, PollInterval: 200 * time.Millisecond, Tools: []mcptasks.Tool{
		{Name: "summarize", Kind: "doc.summarize", Description: "Summarise a document (long-running: call it as a task)",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"doc":{"type":"string"}},"required":["doc"]}`)},
		{Name: "publish", Kind: "doc.publish", Description: "Publish a document once an editor approves"},
	}})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	// The editor's decision. A real deployment uses the admin API's
	// POST /api/v1/signals/{token} or tasks/{id}/signals/{name}.
	mux.HandleFunc("POST /signal/{id}", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, switchyard.MaxSignalPayload))
		if _, err := client.Signal(r.Context(), switchyard.SignalTarget{TaskID: r.PathValue("id"), Name: "decision"}, body); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
		}
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	defer hs.Close()
	base := "http://" + ln.Addr().String()
	if *serve {
		fmt.Println("MCP at", base+"/mcp")
		select {}
	}
	demo(base)
}

// demo is an MCP client of the two tools.
func demo(base string) {
	id := 0
	call := func(method string, params any) map[string]any {
		id++
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
		res, err := http.Post(base+"/mcp", "application/json", bytes.NewReader(b))
		if err != nil {
			log.Fatal(err)
		}
		defer res.Body.Close()
		var out struct {
			Result map[string]any
			Error  *struct{ Message string }
		}
		if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
			log.Fatal(err)
		}
		if out.Error != nil {
			log.Fatalf("%s: %s", method, out.Error.Message)
		}
		return out.Result
	}
	call("initialize", map[string]any{"protocolVersion": mcptasks.ProtocolVersion, "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "demo", "version": "1"}})

	task := call("tools/call", map[string]any{"name": "summarize", "arguments": map[string]any{"doc": "q3.pdf"}, "task": map[string]any{"ttl": 600000}})["task"].(map[string]any)
	tid := task["taskId"].(string)
	fmt.Printf("tools/call summarize → task %s (%s)\n", tid, task["status"])
	last := ""
	for {
		t := call("tasks/get", map[string]any{"taskId": tid})
		line := fmt.Sprintf("%s %v", t["status"], t["statusMessage"])
		if line != last {
			fmt.Println("  tasks/get →", line)
			last = line
		}
		if t["status"] != "working" {
			break
		}
		time.Sleep(time.Duration(t["pollInterval"].(float64)) * time.Millisecond)
	}
	res := call("tasks/result", map[string]any{"taskId": tid})
	fmt.Println("  tasks/result →", res["structuredContent"].(map[string]any)["summary"])

	task = call("tools/call", map[string]any{"name": "publish", "arguments": map[string]any{"doc": "q3.pdf"}, "task": map[string]any{}})["task"].(map[string]any)
	pid := task["taskId"].(string)
	fmt.Printf("tools/call publish → task %s\n", pid)
	for {
		t := call("tasks/get", map[string]any{"taskId": pid})
		if t["status"] == "input_required" {
			fmt.Println("  tasks/get →", t["status"], t["statusMessage"])
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Println("  the editor approves (a signal)")
	if r, err := http.Post(base+"/signal/"+pid, "application/json", strings.NewReader(`{"Approved":true}`)); err != nil || r.StatusCode != http.StatusOK {
		log.Fatalf("signal: %v %v", r, err)
	}
	res = call("tasks/result", map[string]any{"taskId": pid})
	fmt.Println("  tasks/result →", res["content"].([]any)[0].(map[string]any)["text"])
}
