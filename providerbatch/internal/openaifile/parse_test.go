package openaifile

import (
	"bytes"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/providerbatch"
)

const okLine = `{"id":"batch_req_1","custom_id":"t1","response":{"status_code":200,"request_id":"r","body":{"id":"c","object":"chat.completion","choices":[],"usage":{"prompt_tokens":120,"completion_tokens":16,"total_tokens":136,"prompt_tokens_details":{"cached_tokens":100}}}},"error":null}`

func TestParseResults(t *testing.T) {
	t.Parallel()
	file := strings.Join([]string{
		okLine,
		`{"id":"b2","custom_id":"t2","response":{"status_code":500,"body":{"error":{"type":"server_error","message":"boom"}}},"error":null}`,
		`{"id":"b3","custom_id":"t3","response":{"status_code":400,"body":{"error":{"type":"invalid_request_error","message":"bad"}}},"error":null}`,
		`{"id":"b4","custom_id":"t4","response":null,"error":{"code":"batch_expired","message":"expired"}}`,
		`{"id":"b5","custom_id":"t5","response":{"status_code":200,"body":{"usage":{"prompt_tokens":"many"}}},"error":null}`,
		`{"id":"b6","custom_id":"t6","response":{"status_code":200,"body":{"id":"c"}},"error":null}`,
		`{"id":"b7","custom_id":"t7","response":{"status_code":200,"body":{"usage":{"prompt_tokens":5,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":9}}}},"error":null}`,
		`{{{ garbage`,
		`{"id":"b8"}`,
		``,
	}, "\n")
	rs, err := ParseResults(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 7 {
		t.Fatalf("%d results, want 7 (garbage and id-less lines skipped): %+v", len(rs), rs)
	}
	if r := rs[0]; r.Err != nil || r.Usage.Input != 20 || r.Usage.CachedInput != 100 || r.Usage.Output != 16 {
		t.Errorf("ok line: %+v", r)
	}
	want := []struct {
		code  string
		retry bool
	}{{"server_error", true}, {"invalid_request_error", false}, {"batch_expired", true}, {"malformed", false}, {"malformed", false}, {"malformed", false}}
	for i, w := range want {
		r := rs[i+1]
		if r.Err == nil || r.Err.Code != w.code || r.Err.Retryable != w.retry || r.Body != nil {
			t.Errorf("%s: %+v, want code %s retryable %v", r.CustomID, r.Err, w.code, w.retry)
		}
	}
}

func TestParseResults_LineTooLong(t *testing.T) {
	t.Parallel()
	long := `{"custom_id":"x","pad":"` + strings.Repeat("a", providerbatch.MaxResultLine) + `"}`
	if _, err := ParseResults(strings.NewReader(long)); err == nil {
		t.Fatal("a line over the limit: no error")
	}
}

func FuzzParseResults(f *testing.F) {
	f.Add([]byte(okLine))
	f.Add([]byte(`{"custom_id":"t4","response":null,"error":{"code":"batch_expired","message":"expired"}}`))
	f.Add([]byte(`{"custom_id":"t5","response":{"status_code":200,"body":{"usage":{"prompt_tokens":-1,"completion_tokens":1}}}}`))
	f.Add([]byte("{{{\n{\"custom_id\":\"\"}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := ParseResults(bytes.NewReader(data))
		if err != nil {
			return
		}
		for _, r := range rs {
			if r.CustomID == "" {
				t.Fatal("result without a custom_id")
			}
			if (r.Err == nil) == (r.Body == nil) {
				t.Fatalf("result %+v: exactly one of Body and Err must be set", r)
			}
			if r.Err == nil && (r.Usage.Input < 0 || r.Usage.CachedInput < 0 || r.Usage.Output < 0) {
				t.Fatalf("negative usage accepted: %+v", r.Usage)
			}
		}
	})
}
