package limits

import (
	"fmt"
	"sort"
	"time"
)

// Usage is what a run has consumed.
type Usage struct {
	ModelCalls int64
	ToolCalls  int64
	Tokens     int64
	// Spend is in the currency of the prices given (USD by convention).
	Spend float64
}

// Add returns u+v.
func (u Usage) Add(v Usage) Usage {
	return Usage{ModelCalls: u.ModelCalls + v.ModelCalls, ToolCalls: u.ToolCalls + v.ToolCalls, Tokens: u.Tokens + v.Tokens, Spend: u.Spend + v.Spend}
}

// IsZero reports whether nothing was used.
func (u Usage) IsZero() bool { return u == Usage{} }

func (u Usage) String() string {
	return fmt.Sprintf("model_calls=%d tool_calls=%d tokens=%d spend=%.6f", u.ModelCalls, u.ToolCalls, u.Tokens, u.Spend)
}

// Usage field names, as used in BudgetError.Limit and UsageStore.Charge.
const (
	FieldModelCalls = "max_model_calls"
	FieldToolCalls  = "max_tool_calls"
	FieldTokens     = "max_tokens"
	FieldSpend      = "max_spend"
	FieldWallClock  = "wall_clock"
)

// spendEpsilon absorbs float rounding when comparing spend with its limit.
const spendEpsilon = 1e-9

// overField returns the first field of total that crosses a positive max.
func overField(total, max Usage) string {
	switch {
	case max.ModelCalls > 0 && total.ModelCalls > max.ModelCalls:
		return FieldModelCalls
	case max.ToolCalls > 0 && total.ToolCalls > max.ToolCalls:
		return FieldToolCalls
	case max.Tokens > 0 && total.Tokens > max.Tokens:
		return FieldTokens
	case max.Spend > 0 && total.Spend > max.Spend+spendEpsilon:
		return FieldSpend
	}
	return ""
}

// Record is one accounting entry: what one call (or one batch of calls)
// by a task consumed, and on whose account.
type Record struct {
	TaskID string
	Key    Key
	Usage  Usage
	At     time.Time
}

// Query selects aggregates for UsageStore.Sum.
type Query struct {
	// Match keeps keys whose fields equal Match's non-empty fields.
	Match Key
	// By groups the rows; nil sums everything into one row.
	By []Field
}

// Row is one group of a Sum: the grouping fields are set in Key, the
// others are empty.
type Row struct {
	Key   Key
	Usage Usage
}

// group sums aggregates by q; every store's Sum ends here.
func group(aggs map[Key]Usage, q Query) []Row {
	out := map[Key]Usage{}
	for k, u := range aggs {
		if !k.matches(q.Match) {
			continue
		}
		var g Key
		for _, f := range q.By {
			g = g.with(f, k.Get(f))
		}
		out[g] = out[g].Add(u)
	}
	rows := make([]Row, 0, len(out))
	for k, u := range out {
		rows = append(rows, Row{Key: k, Usage: u})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Key.String() < rows[j].Key.String() })
	return rows
}

// GroupUsage is the grouping every UsageStore.Sum applies, exported for
// stores outside this package: it sums aggs by q.
func GroupUsage(aggs map[Key]Usage, q Query) []Row { return group(aggs, q) }

func (k Key) with(f Field, v string) Key {
	switch f {
	case Provider:
		k.Provider = v
	case Model:
		k.Model = v
	case Tenant:
		k.Tenant = v
	case Kind:
		k.Kind = v
	case Tool:
		k.Tool = v
	}
	return k
}

// OverField is the check every UsageStore.Charge applies, exported for
// stores outside this package: the first field of total that crosses a
// positive field of max, or "".
func OverField(total, max Usage) string { return overField(total, max) }
