package sqs

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/broker"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    Config
		wantErr string
	}{
		{in: "sqs://", want: Config{Namespace: "switchyard", Create: true, MaxReceives: 100, MaxMessageSize: 1 << 20, SDKMaxAttempts: 3}},
		{in: "sqs:///", want: Config{Namespace: "switchyard", Create: true, MaxReceives: 100, MaxMessageSize: 1 << 20, SDKMaxAttempts: 3}},
		{
			in: "sqs://?namespace=prod-eu&region=eu-west-1&endpoint=http://127.0.0.1:9324&fifo=true&create=false&max_receives=10&max_message_size=262144&sdk_max_attempts=1",
			want: Config{Namespace: "prod-eu", Region: "eu-west-1", Endpoint: "http://127.0.0.1:9324", FIFO: true, Create: false,
				MaxReceives: 10, MaxMessageSize: 262144, SDKMaxAttempts: 1},
		},
		{in: "sqs://?no_such=1", wantErr: "no_such"},
		{in: "sqs://?namespace=a_b", wantErr: "namespace"},
		{in: "sqs://?namespace=" + strings.Repeat("a", 49), wantErr: "namespace"},
		{in: "sqs://?namespace=", wantErr: "namespace"},
		{in: "sqs://?fifo=maybe", wantErr: "fifo"},
		{in: "sqs://?max_receives=0", wantErr: "max_receives"},
		{in: "sqs://?max_receives=1001", wantErr: "max_receives"},
		{in: "sqs://?max_message_size=100", wantErr: "max_message_size"},
		{in: "sqs://?max_message_size=2000000", wantErr: "max_message_size"},
		{in: "sqs://?sdk_max_attempts=0", wantErr: "sdk_max_attempts"},
		{in: "sqs://?endpoint=ftp://x", wantErr: "endpoint"},
		{in: "sqs://?endpoint=http://user:secret@host:1", wantErr: "endpoint"},
		{in: "sqs://?region=a&region=b", wantErr: "region"},
		{in: "sqs://us-east-1", wantErr: "no host"},
		{in: "sqs://key:secret@/", wantErr: "no host"},
		{in: "sqs:///queue", wantErr: "no host"},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.in)
		if err != nil {
			t.Fatalf("%s: %v", tt.in, err)
		}
		got, err := ParseURL(u)
		if tt.wantErr != "" {
			if !errors.Is(err, broker.ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: error %v, want ErrInvalid mentioning %q", tt.in, err, tt.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("%s: error %q leaks a credential", tt.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.in, err)
			continue
		}
		if *got != tt.want {
			t.Errorf("%s: got %+v, want %+v", tt.in, *got, tt.want)
		}
	}
}

func TestMaxMessageSize(t *testing.T) {
	t.Parallel()
	for _, body := range []int{1024, 262144, 1 << 20} {
		max := maxMessageSize(body)
		// The worst case: every header slot used, long keys.
		m := &broker.Message{ID: strings.Repeat("i", broker.MaxKeyLen), Lane: strings.Repeat("l", broker.MaxNameLen),
			Kind: strings.Repeat("k", broker.MaxNameLen), Tenant: strings.Repeat("t", broker.MaxKeyLen),
			IdempotencyKey: strings.Repeat("p", broker.MaxKeyLen), OrderingKey: strings.Repeat("o", broker.MaxKeyLen),
			MaxAttempts: 1 << 30, Headers: map[string]string{}}
		for i := 0; i < broker.MaxHeaders && m.Size()+400 < max; i++ {
			m.Headers[strings.Repeat("h", 120)+strings.Repeat("x", i%8)+string(rune('a'+i%26))+string(rune('a'+i/26))] = strings.Repeat("v", 200)
		}
		if m.Size() > max {
			m = &broker.Message{ID: "i", Lane: "l", Kind: "k"}
		}
		m.Body = make([]byte, max-m.Size())
		if m.Size() != max {
			t.Fatalf("test message size %d, want %d", m.Size(), max)
		}
		if got := len(encodeBody(m)); got > body {
			t.Errorf("queue max %d: a message of Size %d encodes to %d bytes", body, max, got)
		}
	}
}

func TestOpenConfig_Invalid(t *testing.T) {
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	ctx := context.Background()
	if _, err := OpenConfig(ctx, nil); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("nil config: %v", err)
	}
	if _, err := OpenConfig(ctx, &Config{Namespace: "x"}); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("zero limits: %v", err)
	}
	u, _ := url.Parse("sqs://?namespace=x")
	if _, err := Open(ctx, u); !errors.Is(err, broker.ErrInvalid) || !strings.Contains(err.Error(), "region") {
		t.Errorf("no region anywhere: %v, want ErrInvalid naming the region", err)
	}
	u, _ = url.Parse("sqs://?namespace=x&region=eu-west-1")
	d, err := Open(ctx, u)
	if err != nil {
		t.Fatalf("open with a region (no call is made yet): %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Receive(ctx, broker.ReceiveRequest{Lane: "x"}); !errors.Is(err, broker.ErrClosed) {
		t.Errorf("receive after close: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
}
