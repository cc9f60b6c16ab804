package main

import (
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// loadTemplate decodes the template keeping CloudFormation's short tags (!Sub,
// !Ref) as plain scalars.
func loadTemplate(t *testing.T) map[string]any {
	t.Helper()
	raw, err := os.ReadFile("template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var n yaml.Node
	if err := yaml.Unmarshal(raw, &n); err != nil {
		t.Fatalf("template.yaml does not parse: %v", err)
	}
	untag(&n)
	var doc map[string]any
	if err := n.Decode(&doc); err != nil {
		t.Fatalf("template.yaml does not decode: %v", err)
	}
	return doc
}

func untag(n *yaml.Node) {
	if strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!") {
		n.Tag = ""
	}
	for _, c := range n.Content {
		untag(c)
	}
}

func get(t *testing.T, v any, path ...string) any {
	t.Helper()
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("template: %s is not a mapping", strings.Join(path, "."))
		}
		v = m[p]
	}
	return v
}

// The event-source mappings report partial batch failures (without it the
// mapping deletes a whole batch on a normal return, failed records
// included), bound their batches and cap each lane's concurrency.
func TestTemplate_EventSourceMappings(t *testing.T) {
	doc := loadTemplate(t)
	evs, ok := get(t, doc, "Resources", "Worker", "Properties", "Events").(map[string]any)
	if !ok || len(evs) == 0 {
		t.Fatal("template: the Worker function has no events")
	}
	lanes := map[string]bool{}
	for name, ev := range evs {
		if get(t, ev, "Type") != "SQS" {
			t.Errorf("event %s is not an SQS mapping", name)
			continue
		}
		p := get(t, ev, "Properties")
		queue, _ := get(t, p, "Queue").(string)
		lane := queue[strings.LastIndex(queue, "_")+1:]
		lanes[lane] = true
		types, _ := get(t, p, "FunctionResponseTypes").([]any)
		if len(types) != 1 || types[0] != "ReportBatchItemFailures" {
			t.Errorf("event %s: FunctionResponseTypes = %v, want [ReportBatchItemFailures]", name, types)
		}
		if bs, ok := get(t, p, "BatchSize").(int); !ok || bs < 1 || bs > 10 {
			t.Errorf("event %s: BatchSize = %v, want 1..10 (above 10 needs a batching window and risks the deadline)", name, get(t, p, "BatchSize"))
		}
		if mc, ok := get(t, p, "ScalingConfig", "MaximumConcurrency").(int); !ok || mc < 2 || mc > 1000 {
			t.Errorf("event %s: ScalingConfig.MaximumConcurrency = %v, want 2..1000 (AWS's bounds)", name, get(t, p, "ScalingConfig", "MaximumConcurrency"))
		}
	}
	for _, l := range []string{"interactive", "batch"} {
		if !lanes[l] {
			t.Errorf("template: no mapping for lane %s", l)
		}
	}
	ic := get(t, evs["Interactive"], "Properties", "ScalingConfig", "MaximumConcurrency").(int)
	bc := get(t, evs["Batch"], "Properties", "ScalingConfig", "MaximumConcurrency").(int)
	if ic <= bc {
		t.Errorf("interactive concurrency %d is not above batch's %d", ic, bc)
	}
	if to, ok := get(t, doc, "Globals", "Function", "Timeout").(int); !ok || to <= 3 {
		t.Errorf("function timeout = %v, want more than awslambda's 3 s reserve", get(t, doc, "Globals", "Function", "Timeout"))
	}
}
