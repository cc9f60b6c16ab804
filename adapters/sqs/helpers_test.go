package sqs_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/switchyard-dev/switchyard/adapters/sqs"
	"github.com/switchyard-dev/switchyard/conformance/testenv"
)

// TestMain gives the SDK static dummy credentials when none are set: the
// emulator checks none, and the adapter itself reads whatever the AWS
// configuration chain provides.
func TestMain(m *testing.M) {
	testenv.EmulatorAWSCredentials()
	os.Exit(m.Run())
}

// testURL returns an sqs:// URL for the emulator with a fresh namespace.
func testURL(endpoint, namespace string, fifo bool, extra string) string {
	u := "sqs://?region=us-east-1&endpoint=" + url.QueryEscape(endpoint) + "&namespace=" + namespace
	if fifo {
		u += "&fifo=true"
	}
	return u + extra
}

func namespace(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, strings.ToLower(t.Name()))
	if len(name) > 30 {
		name = name[len(name)-30:]
	}
	return "u" + name + hex.EncodeToString(b[:])
}

func openDriver(t testing.TB, rawURL string) *sqs.Driver {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := sqs.Open(ctx, u)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// injectRaw sends body to the lane's live queue as a foreign producer
// would. SQS bodies are text: bytes that are not valid SQS text are sent
// base64-encoded, which is what such a producer would have had to do.
func injectRaw(rawURL string) func(ctx context.Context, lane string, body []byte) error {
	return func(ctx context.Context, lane string, body []byte) error {
		u, err := url.Parse(rawURL)
		if err != nil {
			return err
		}
		d, err := sqs.Open(ctx, u)
		if err != nil {
			return err
		}
		defer d.Close()
		live, _, err := d.QueueURLs(ctx, lane)
		if err != nil {
			return err
		}
		s := string(body)
		if !validSQSText(s) {
			s = base64.StdEncoding.EncodeToString(body)
		}
		in := &awssqs.SendMessageInput{QueueUrl: aws.String(live), MessageBody: aws.String(s)}
		if strings.HasSuffix(live, ".fifo") {
			var b [8]byte
			_, _ = rand.Read(b[:])
			in.MessageGroupId = aws.String("raw-" + hex.EncodeToString(b[:]))
			in.MessageDeduplicationId = in.MessageGroupId
		}
		_, err = d.Client().SendMessage(ctx, in)
		return err
	}
}

func validSQSText(s string) bool {
	if s == "" || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !(r == 0x9 || r == 0xA || r == 0xD || r >= 0x20 && r <= 0xD7FF || r >= 0xE000 && r <= 0xFFFD || r >= 0x10000 && r <= 0x10FFFF) {
			return false
		}
	}
	return true
}

func openForCleanup(ctx context.Context, rawURL string) (*sqs.Driver, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	return sqs.Open(ctx, u)
}
