package admin

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/switchyard-dev/switchyard/broker"
	"github.com/switchyard-dev/switchyard/lanes"
	"github.com/switchyard-dev/switchyard/scaling"
)

// scalerFor fills in cfg.Scaler's defaults (see Config.Scaler).
func scalerFor(cfg Config) *scaling.Scaler {
	s := cfg.Scaler
	if s == nil {
		s = &scaling.Scaler{}
	}
	if s.Broker == nil {
		s.Broker = cfg.Broker
	}
	if s.Ledger == nil {
		s.Ledger = cfg.Ledger
	}
	if s.Lanes == nil {
		defs := map[string]lanes.Lane{}
		for _, l := range lanes.Defaults() {
			defs[l.Name] = l
		}
		for _, name := range cfg.Lanes {
			l, ok := defs[name]
			if !ok {
				l = lanes.Lane{Name: name}
			}
			if o, ok := cfg.Objectives[name]; ok {
				l.WaitObjective = o
			}
			s.Lanes = append(s.Lanes, l)
		}
	}
	return s
}

// Scaler returns the scaler Ops computes the scaling signal with.
func (o *Ops) Scaler() *scaling.Scaler { return o.cfg.Scaler }

// Scaling returns every scaled lane's signal, or only lane's when lane is
// not empty (an unknown lane is a broker.ErrInvalid error).
func (o *Ops) Scaling(ctx context.Context, lane string) ([]scaling.Signal, error) {
	if lane != "" {
		if err := broker.ValidateName("lane", lane); err != nil {
			return nil, err
		}
		s, err := o.cfg.Scaler.Signal(ctx, lane)
		if err != nil {
			return nil, err
		}
		return []scaling.Signal{s}, nil
	}
	return o.cfg.Scaler.Signals(ctx)
}

// scalingJSON is GET /api/v1/scaling's answer: lanes by name, so that
// KEDA's metrics-api trigger reads one lane with valueLocation
// "lanes.<lane>.desired"; with ?lane=L the lane's signal alone, read with
// valueLocation "desired".
type scalingJSON struct {
	Lanes map[string]scaling.Signal `json:"lanes"`
	// Desired and Busy are the sums over the lanes.
	Desired int       `json:"desired"`
	Busy    int64     `json:"busy"`
	At      time.Time `json:"at"`
}

// scalingSignal answers GET /api/v1/scaling (docs/SCALING.md). Like the
// server list it describes every tenant's load: a tenant-scoped token is
// refused.
func (h *handler) scalingSignal(r *http.Request, c *call) (int, any, error) {
	if c.scope.Tenant != "" {
		return 0, nil, &apiError{http.StatusForbidden, "a tenant-scoped token cannot read the scaling signal: it sums every tenant's load"}
	}
	lane := r.URL.Query().Get("lane")
	ss, err := h.ops.Scaling(r.Context(), lane)
	if err != nil {
		if errors.Is(err, broker.ErrInvalid) {
			return 0, nil, &apiError{http.StatusNotFound, err.Error()}
		}
		return 0, nil, err
	}
	if lane != "" {
		return http.StatusOK, ss[0], nil
	}
	out := scalingJSON{Lanes: map[string]scaling.Signal{}, At: time.Now().UTC()}
	for _, s := range ss {
		out.Lanes[s.Lane] = s
		out.Desired += s.Desired
		out.Busy += s.Busy
	}
	return http.StatusOK, out, nil
}
