package admin_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/admin/internal/admintest"
	"github.com/switchyard-dev/switchyard/scaling"
)

// TestHandler_Scaling: GET /api/v1/scaling answers every scaled lane by
// name (KEDA's metrics-api valueLocation "lanes.<lane>.desired"), with the
// fleet from the server registry; ?lane=L answers the lane alone
// ("desired"); an unknown lane is a 404, a tenant token is refused.
func TestHandler_Scaling(t *testing.T) {
	t.Parallel()
	e := admintest.New(t, "")
	var body struct {
		Lanes   map[string]scaling.Signal `json:"lanes"`
		Desired int                       `json:"desired"`
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := e.Call("GET", "scaling", admintest.ReadSecret, nil, nil)
		if r.Status != http.StatusOK {
			t.Fatalf("GET scaling: %d %s", r.Status, r.Body)
		}
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatalf("GET scaling: %s (%v)", r.Body, err)
		}
		if body.Lanes["interactive"].Slots == 4 {
			break // the test Server (4 slots, every lane) registered
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fleet never showed the test Server: %s", r.Body)
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

	r := e.Call("GET", "scaling?lane=batch", admintest.ReadSecret, nil, nil)
	var one scaling.Signal
	if r.Status != http.StatusOK || json.Unmarshal(r.Body, &one) != nil || one.Lane != "batch" {
		t.Errorf("GET scaling?lane=batch: %d %s", r.Status, r.Body)
	}
	if r := e.Call("GET", "scaling?lane=nope", admintest.ReadSecret, nil, nil); r.Status != http.StatusNotFound {
		t.Errorf("GET scaling?lane=nope: %d %s, want 404", r.Status, r.Body)
	}
	if r := e.Call("GET", "scaling", admintest.GlobexSecret, nil, nil); r.Status != http.StatusForbidden {
		t.Errorf("GET scaling with a tenant token: %d, want 403", r.Status)
	}
	if r := e.Call("GET", "scaling", "", nil, nil); r.Status != http.StatusUnauthorized {
		t.Errorf("GET scaling anonymously: %d, want 401", r.Status)
	}
}
