package embedded_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/switchyard-dev/switchyard/adapters/embedded"
	"github.com/switchyard-dev/switchyard/conformance"
)

func TestConformance(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		conformance.Run(t, func(t *testing.T) *conformance.Harness {
			path := filepath.Join(t.TempDir(), "switchyard.db")
			url := "embedded://" + path + "?namespace=" + conformance.Namespace(t)
			return &conformance.Harness{URL: url, InjectRaw: injector(t, url)}
		})
	})
	// The same broker without its native ordering, dedup, attempt limit and
	// long delays: every case then passes through the framework's fallbacks.
	t.Run("reduced", func(t *testing.T) {
		conformance.Run(t, func(t *testing.T) *conformance.Harness {
			path := filepath.Join(t.TempDir(), "switchyard.db")
			url := "embedded://" + path + "?reduced=true&namespace=" + conformance.Namespace(t)
			return &conformance.Harness{URL: url, InjectRaw: injector(t, url)}
		})
	})
	t.Run("mem", func(t *testing.T) {
		conformance.Run(t, func(t *testing.T) *conformance.Harness {
			url := "mem://" + conformance.Namespace(t)
			return &conformance.Harness{URL: url, InjectRaw: injector(t, url), InProcess: true}
		})
	})
}

// injector writes a corrupt row through a driver of its own.
func injector(t *testing.T, url string) func(ctx context.Context, lane string, body []byte) error {
	return func(ctx context.Context, lane string, body []byte) error {
		d, err := embedded.OpenURL(ctx, url)
		if err != nil {
			return err
		}
		defer d.Close()
		return d.InjectRaw(ctx, lane, body)
	}
}
