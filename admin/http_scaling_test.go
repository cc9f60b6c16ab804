package admin_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/scaling"
)

// TestHandler_Scaling: GET /api/v1/scaling answers every scaled lane by
// name (KEDA's metrics-api valueLocation "lanes.<lane>.desired"), with the
// fleet from the server registry; ?lane=L answers the lane alone
// ("desired"); an unknown lane is a 404, a tenant token is refused.
func TestHandler_Scaling(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "")
	var body struct {
		Lanes   map[string]scaling.Signal `json:"lanes"`
		Desired int                       `json:"desired"`
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := e.call("GET", "scaling", readSecret, nil, nil)
		if r.status != http.StatusOK {
			t.Fatalf("GET scaling: %d %s", r.status, r.body)
		}
		if err := json.Unmarshal(r.body, &body); err != nil {
			t.Fatalf("GET scaling: %s (%v)", r.body, err)
		}
		if body.Lanes["interactive"].Slots == 4 {
			break // the test Server (4 slots, every lane) registered
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fleet never showed the test Server: %s", r.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, ok := body.Lanes["human-review"]; ok || len(body.Lanes) != 3 {
		t.Errorf("lanes %v, want interactive, scheduled and batch (a manual lane is not scaled)", body.Lanes)
	}
	if in := body.Lanes["interactive"]; in.Desired < 2 || in.ObjectiveMS != 100 {
		t.Errorf("interactive %+v, want at least its 2 reserved slots and its 100 ms objective", in)
	}
	if body.Desired < 3 {
		t.Errorf("total desired %d, want at least the 3 reserved slots", body.Desired)
	}

	r := e.call("GET", "scaling?lane=batch", readSecret, nil, nil)
	var one scaling.Signal
	if r.status != http.StatusOK || json.Unmarshal(r.body, &one) != nil || one.Lane != "batch" {
		t.Errorf("GET scaling?lane=batch: %d %s", r.status, r.body)
	}
	if r := e.call("GET", "scaling?lane=nope", readSecret, nil, nil); r.status != http.StatusNotFound {
		t.Errorf("GET scaling?lane=nope: %d %s, want 404", r.status, r.body)
	}
	if r := e.call("GET", "scaling", globexSecret, nil, nil); r.status != http.StatusForbidden {
		t.Errorf("GET scaling with a tenant token: %d, want 403", r.status)
	}
	if r := e.call("GET", "scaling", "", nil, nil); r.status != http.StatusUnauthorized {
		t.Errorf("GET scaling anonymously: %d, want 401", r.status)
	}
}
