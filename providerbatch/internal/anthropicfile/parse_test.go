package anthropicfile

import (
	"bytes"
	"strings"
	"testing"
)

const okLine = `{"custom_id":"t1","result":{"type":"succeeded","message":{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],"model":"m","stop_reason":"end_turn","usage":{"input_tokens":20,"output_tokens":16,"cache_read_input_tokens":100,"cache_creation_input_tokens":5}}}}`

func TestParseResults(t *testing.T) {
	t.Parallel()
	file := strings.Join([]string{
		okLine,
		`{"custom_id":"t2","result":{"type":"errored","error":{"type":"error","error":{"type":"api_error","message":"boom"}}}}`,
		`{"custom_id":"t3","result":{"type":"errored","error":{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}}}`,
		`{"custom_id":"t4","result":{"type":"expired"}}`,
		`{"custom_id":"t5","result":{"type":"canceled"}}`,
		`{"custom_id":"t6","result":{"type":"succeeded","message":{"usage":{"input_tokens":"many"}}}}`,
		`{"custom_id":"t7","result":{"type":"succeeded","message":{"id":"m"}}}`,
		`{"custom_id":"t8","result":{"type":"surprise"}}`,
		`{"custom_id":"t9"}`,
		`{"custom_id":"t10","result":{"type":"errored"}}`,
		`not json at all`,
		`{"result":{"type":"expired"}}`,
	}, "\n")
	rs, err := ParseResults(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 10 {
		t.Fatalf("%d results, want 10: %+v", len(rs), rs)
	}
	if r := rs[0]; r.Err != nil || r.Usage.Input != 25 || r.Usage.CachedInput != 100 || r.Usage.Output != 16 {
		t.Errorf("ok line: %+v", r)
	}
	want := []struct {
		code  string
		retry bool
	}{{"api_error", true}, {"invalid_request_error", false}, {"expired", true}, {"canceled", true},
		{"malformed", false}, {"malformed", false}, {"malformed", false}, {"malformed", false}, {"malformed", false}}
	for i, w := range want {
		r := rs[i+1]
		if r.Err == nil || r.Err.Code != w.code || r.Err.Retryable != w.retry || r.Body != nil {
			t.Errorf("%s: %+v, want code %s retryable %v", r.CustomID, r.Err, w.code, w.retry)
		}
	}
}

func FuzzParseResults(f *testing.F) {
	f.Add([]byte(okLine))
	f.Add([]byte(`{"custom_id":"t4","result":{"type":"expired"}}`))
	f.Add([]byte(`{"custom_id":"t5","result":{"type":"succeeded","message":{"usage":{"input_tokens":-3,"output_tokens":1}}}}`))
	f.Add([]byte("x\n{\"custom_id\":\"a\",\"result\":{\"type\":\"errored\",\"error\":null}}"))
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
