package providerbatch

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
)

// MaxResultLine bounds one line of a provider's JSONL results file (a long
// completion).
const MaxResultLine = 16 << 20

// ScanResults reads a JSONL results file, as the OpenAI and Anthropic batch
// APIs return them, and hands each line that names a custom_id to parse. A
// line that is not JSON or names no custom_id is skipped (its item counts
// as missing). It fails only when the file cannot be read, or a line is
// longer than MaxResultLine.
func ScanResults(r io.Reader, parse func(customID string, line []byte) Result) ([]Result, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxResultLine)
	var out []Result
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var id struct {
			CustomID string `json:"custom_id"`
		}
		if json.Unmarshal(line, &id) != nil || id.CustomID == "" {
			continue
		}
		out = append(out, parse(id.CustomID, line))
	}
	return out, sc.Err()
}
