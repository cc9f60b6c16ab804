package migrate

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
)

// journal records, in a local append-only file, which message IDs a run
// started to publish ("P") and which the target confirmed ("D"). A rerun
// skips confirmed IDs (acking them on the source without publishing again)
// and counts started-but-unconfirmed ones as in doubt. Each batch is synced
// to disk before the source is acked.
type journal struct {
	mu   sync.Mutex
	f    *os.File
	w    *bufio.Writer
	done map[string]bool
	pend map[string]bool
}

func openJournal(path string) (*journal, error) {
	j := &journal{done: map[string]bool{}, pend: map[string]bool{}}
	if path == "" {
		return j, nil
	}
	if data, err := os.ReadFile(path); err == nil {
		lines := strings.Split(string(data), "\n")
		// The last element is "" after a complete line, or a line torn by
		// a killed run: either way it is not a record.
		for _, line := range lines[:len(lines)-1] {
			// Fields are tab-separated: IDs may hold spaces, never control
			// characters (broker.Message.Validate).
			f := strings.Split(line, "\t")
			if len(f) != 3 || f[2] == "" {
				continue
			}
			switch f[0] {
			case "P":
				j.pend[f[2]] = true
			case "D":
				j.done[f[2]] = true
				delete(j.pend, f[2])
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("migrate: read journal: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("migrate: open journal: %w", err)
	}
	j.f, j.w = f, bufio.NewWriter(f)
	return j, nil
}

func (j *journal) isDone(id string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.done[id]
}

func (j *journal) inDoubt(id string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.pend[id]
}

// record appends one state per (lane, id) and syncs the file.
func (j *journal) record(state, lane string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, id := range ids {
		if state == "D" {
			j.done[id] = true
			delete(j.pend, id)
		}
		if j.w == nil {
			continue
		}
		if _, err := fmt.Fprintf(j.w, "%s\t%s\t%s\n", state, lane, id); err != nil {
			return fmt.Errorf("migrate: write journal: %w", err)
		}
	}
	if j.w == nil {
		return nil
	}
	if err := j.w.Flush(); err != nil {
		return fmt.Errorf("migrate: write journal: %w", err)
	}
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("migrate: sync journal: %w", err)
	}
	return nil
}

// close is safe to call twice.
func (j *journal) close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	err := errors.Join(j.w.Flush(), j.f.Close())
	j.f, j.w = nil, nil
	return err
}
