package fronttest_test

import (
	"reflect"
	"testing"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/ledger/internal/front"
	"github.com/switchyard-dev/switchyard/ledger/internal/front/fronttest"
)

// TestCases_Complete: every method of the front, and of its Sequencer,
// has a case, so a method added to the front is held to the same proof.
func TestCases_Complete(t *testing.T) {
	has := map[string]bool{}
	for _, c := range fronttest.Cases {
		if has[c.Method] {
			t.Errorf("two cases for %s", c.Method)
		}
		has[c.Method] = true
	}
	var want []string
	ft := reflect.TypeOf((*front.Front)(nil))
	for i := range ft.NumMethod() {
		if m := ft.Method(i).Name; m != "Sequencer" {
			want = append(want, m)
		}
	}
	st := reflect.TypeOf((*broker.SequencerPosition)(nil)).Elem()
	for _, it := range []reflect.Type{reflect.TypeOf((*broker.Sequencer)(nil)).Elem(), st} {
		for i := range it.NumMethod() {
			want = append(want, "Sequencer."+it.Method(i).Name)
		}
	}
	for _, m := range want {
		if !has[m] {
			t.Errorf("no case for %s", m)
		}
		delete(has, m)
	}
	for m := range has {
		t.Errorf("case %s names no method of the front", m)
	}
}
