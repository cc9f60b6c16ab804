// Lambda runs Switchyard handlers inside an AWS Lambda function fed by SQS
// event-source mappings, one mapping per lane (template.yaml): the same
// handlers, retries, dead letters and ledger as a worker fleet, with no
// workers to run.
//
//	sam build && sam deploy --guided
//
// The function reads SWITCHYARD_BROKER (an sqs:// URL naming the region
// and namespace whose queues the mappings read) and SWITCHYARD_LEDGER (a
// postgres:// DSN: a Lambda has no disk that outlives it, so the ledger
// must be shared). Producers enqueue with switchyard.Client over the same
// two URLs.
package main

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/switchyard-dev/switchyard"
	_ "github.com/switchyard-dev/switchyard/adapters/sqs" // sqs://
	"github.com/switchyard-dev/switchyard/awslambda"
	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger"
	_ "github.com/switchyard-dev/switchyard/ledger/postgres" // postgres://
)

// Summarize asks a model for a summary of a document and stores it.
type Summarize struct{ Doc string }

func (Summarize) Kind() string { return "lambda.summarize" }

func summarize(ctx context.Context, t *switchyard.Task[Summarize]) error {
	// A Step's output is kept in the ledger: a retry (or the next
	// invocation after a timeout) does not pay for the model call again.
	summary, err := switchyard.Step(ctx, "model", func(ctx context.Context) (string, error) {
		return fmt.Sprintf("summary of %s", t.Args.Doc), nil // call your model here
	})
	if err != nil {
		return err
	}
	// An Effect runs once per task, whatever happens to the invocation.
	_, err = switchyard.Effect(ctx, "store", func(ctx context.Context) (bool, error) {
		log.Printf("storing %q", summary) // write to your database here
		return true, nil
	}, nil)
	return err
}

func main() {
	ctx := context.Background()
	b, err := broker.Open(ctx, os.Getenv("SWITCHYARD_BROKER"), nil)
	if err != nil {
		log.Fatal(err)
	}
	l, err := ledger.Open(ctx, os.Getenv("SWITCHYARD_LEDGER"))
	if err != nil {
		log.Fatal(err)
	}
	srv, err := switchyard.NewServer(b, &switchyard.ServerConfig{Ledger: l})
	if err != nil {
		log.Fatal(err)
	}
	if err := switchyard.Register(srv, summarize, nil); err != nil {
		log.Fatal(err)
	}
	fn, err := awslambda.New(srv, nil)
	if err != nil {
		log.Fatal(err)
	}
	lambda.Start(fn.Handle)
}
