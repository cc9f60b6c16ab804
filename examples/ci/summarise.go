// Package ci is a user's code as Switchyard's CI kit expects it: handlers
// (summarise a document with a model, then mail its owner), their unit
// tests on switchyardtest's in-process broker (summarise_test.go), the
// conformance suite against the team's brokers (conformance_test.go), and
// a GitHub Actions workflow that runs both (workflow.yml). Copy the
// directory as a starting point; the README's "Testing your handlers" and
// "Running the conformance suite in your CI" explain it.
package ci

import (
	"context"
	"fmt"

	"github.com/switchyard-dev/switchyard"
)

// Summarise asks for a document's summary.
type Summarise struct {
	Doc   string `json:"doc"`
	Owner string `json:"owner"`
}

// Notify mails a document's owner its summary.
type Notify struct {
	Doc     string `json:"doc"`
	Owner   string `json:"owner"`
	Summary string `json:"summary"`
}

func (Summarise) Kind() string { return "docs.summarise" }
func (Notify) Kind() string    { return "docs.notify" }

// Model summarises a document (an LLM in production).
type Model interface {
	Summarise(ctx context.Context, doc string) (string, error)
}

// Mailer sends a mail.
type Mailer interface {
	Send(ctx context.Context, to, body string) error
}

// Register registers the two handlers on srv; the summariser enqueues the
// notification through client.
func Register(srv *switchyard.Server, client *switchyard.Client, model Model, mail Mailer) error {
	if err := switchyard.Register(srv, func(ctx context.Context, t *switchyard.Task[Summarise]) error {
		// The model's answer is memoised: a retry does not pay for it twice.
		summary, err := switchyard.Step(ctx, "summarise", func(ctx context.Context) (string, error) {
			return model.Summarise(ctx, t.Args.Doc)
		})
		if err != nil {
			return err
		}
		_, err = client.Enqueue(ctx, Notify{Doc: t.Args.Doc, Owner: t.Args.Owner, Summary: summary},
			&switchyard.EnqueueOpts{Lane: t.Lane, IdempotencyKey: "notify/" + t.Args.Doc})
		return err
	}, nil); err != nil {
		return err
	}
	return switchyard.Register(srv, func(ctx context.Context, t *switchyard.Task[Notify]) error {
		// Sent once, however often the task runs.
		_, err := switchyard.Effect(ctx, "mail/"+t.Args.Doc, func(ctx context.Context) (bool, error) {
			return true, mail.Send(ctx, t.Args.Owner, fmt.Sprintf("%s: %s", t.Args.Doc, t.Args.Summary))
		}, nil)
		return err
	}, nil)
}
