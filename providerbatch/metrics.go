package providerbatch

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-dev/switchyard/limits"
	"github.com/switchyard-dev/switchyard/spend"
)

// Metrics are the batch lane's and spend's Prometheus metrics. A nil
// *Metrics records nothing.
type Metrics struct {
	spendC   *prometheus.CounterVec
	tokensC  *prometheus.CounterVec
	itemsC   *prometheus.CounterVec
	batchesC *prometheus.CounterVec
	refusedC *prometheus.CounterVec
}

// NewMetrics registers the metrics with reg:
//
//	switchyard_spend_micros_total{tenant,provider,model,kind,mode}
//	switchyard_spend_tokens_total{tenant,provider,model,cache_key,type}   type: input, cached_input, output
//	switchyard_spend_refused_total{tenant}
//	switchyard_provider_batch_items_total{state}
//	switchyard_provider_batches_total{state}
//
// The cached-token share of a cache key is
// tokens{type="cached_input"} / (tokens{type="input"} + tokens{type="cached_input"}).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		spendC: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_spend_micros_total",
			Help: "Settled model spend in micro-units of the price table's currency."}, []string{"tenant", "provider", "model", "kind", "mode"}),
		tokensC: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_spend_tokens_total",
			Help: "Settled tokens by type (input, cached_input, output)."}, []string{"tenant", "provider", "model", "cache_key", "type"}),
		refusedC: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_spend_refused_total",
			Help: "Calls refused by a tenant's spend window."}, []string{"tenant"}),
		itemsC: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_provider_batch_items_total",
			Help: "Provider-batch items by outcome."}, []string{"state"}),
		batchesC: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_provider_batches_total",
			Help: "Provider batches by event."}, []string{"state"}),
	}
	for _, c := range []prometheus.Collector{m.spendC, m.tokensC, m.refusedC, m.itemsC, m.batchesC} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) settled(it *StoredItem, u spend.Usage, cost spend.Micros, mode spend.Mode) {
	if m == nil {
		return
	}
	m.spendC.WithLabelValues(it.Tenant, it.Provider, it.Model, it.Kind, string(mode)).Add(float64(cost))
	m.tokensC.WithLabelValues(it.Tenant, it.Provider, it.Model, it.CacheKey, "input").Add(float64(u.Input))
	m.tokensC.WithLabelValues(it.Tenant, it.Provider, it.Model, it.CacheKey, "cached_input").Add(float64(u.CachedInput))
	m.tokensC.WithLabelValues(it.Tenant, it.Provider, it.Model, it.CacheKey, "output").Add(float64(u.Output))
}

func (m *Metrics) refused(tenant string) {
	if m != nil {
		m.refusedC.WithLabelValues(tenant).Inc()
	}
}

func (m *Metrics) item(state string) {
	if m != nil {
		m.itemsC.WithLabelValues(state).Inc()
	}
}

func (m *Metrics) batch(state string) {
	if m != nil {
		m.batchesC.WithLabelValues(state).Inc()
	}
}

var _ limits.SpendObserver = (*Metrics)(nil)

// SpendSettled implements limits.SpendObserver: a call metered by
// limits.Meter counts in the spend series with mode "direct".
func (m *Metrics) SpendSettled(r limits.SpendReservation, u spend.Usage, cost spend.Micros) {
	m.settled(&StoredItem{Tenant: r.Tenant, Provider: r.Provider, Model: r.Model, Kind: r.Kind, CacheKey: r.CacheKey}, u, cost, spend.Direct)
}

// SpendRefused implements limits.SpendObserver.
func (m *Metrics) SpendRefused(tenant string) { m.refused(tenant) }
