package ci_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/examples/ci"
	"github.com/switchyard-dev/switchyard/switchyardtest"
)

// fakeModel and fakeMailer count their calls.
type fakeModel struct {
	mu    sync.Mutex
	calls int
}

func (m *fakeModel) Summarise(ctx context.Context, doc string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	return "summary of " + doc, nil
}

type fakeMailer struct {
	mu   sync.Mutex
	sent []string
}

func (m *fakeMailer) Send(ctx context.Context, to, body string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sent = append(m.sent, to+": "+body)
	return nil
}

// README: Testing your handlers
func TestSummarise_MailFailsOnce(t *testing.T) {
	ctx := context.Background()
	env := switchyardtest.New(t, nil) // in-process broker and ledger, fake clock
	model, mail := &fakeModel{}, &fakeMailer{}
	if err := ci.Register(env.Server, env.Client, model, mail); err != nil {
		t.Fatal(err)
	}
	// The mail server refuses once: the task is retried after its back-off.
	env.FailEffectOnce("mail/q3.pdf", errors.New("smtp: 421 try again later"))

	if _, err := env.Client.Enqueue(ctx, ci.Summarise{Doc: "q3.pdf", Owner: "ada@example.com"}, nil); err != nil {
		t.Fatal(err)
	}
	env.RunUntilIdle() // summarise runs, notify fails once and waits for its retry
	switchyardtest.ExpectEnqueued(t, env,
		ci.Notify{Doc: "q3.pdf", Owner: "ada@example.com", Summary: "summary of q3.pdf"})
	if len(mail.sent) != 0 {
		t.Fatalf("mail sent before the retry: %v", mail.sent)
	}

	env.Advance(time.Minute) // the fake clock passes the back-off: the retry runs now
	if model.calls != 1 || len(mail.sent) != 1 {
		t.Fatalf("model called %d times, %d mails sent; want 1 and 1", model.calls, len(mail.sent))
	}
}

// END README

// A delayed summary waits for the clock, and nothing is mailed twice when
// the same document is enqueued again.
func TestSummarise_DelayAndDuplicate(t *testing.T) {
	ctx := context.Background()
	env := switchyardtest.New(t, nil)
	model, mail := &fakeModel{}, &fakeMailer{}
	if err := ci.Register(env.Server, env.Client, model, mail); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.Enqueue(ctx, ci.Summarise{Doc: "later.pdf", Owner: "bo@example.com"}, &switchyard.EnqueueOpts{Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	env.RunUntilIdle()
	if model.calls != 0 {
		t.Fatal("a task delayed by an hour ran at once")
	}
	env.Advance(time.Hour)
	if _, err := env.Client.Enqueue(ctx, ci.Summarise{Doc: "later.pdf", Owner: "bo@example.com"}, nil); err != nil {
		t.Fatal(err)
	}
	env.RunUntilIdle()
	if model.calls != 2 || len(mail.sent) != 1 {
		t.Fatalf("model called %d times, %d mails; want 2 (two tasks) and 1 (one notification key)", model.calls, len(mail.sent))
	}
	if n := len(switchyardtest.EnqueuedOf[ci.Notify](env)); n != 1 {
		t.Fatalf("%d notifications enqueued, want 1 (the idempotency key)", n)
	}
}
