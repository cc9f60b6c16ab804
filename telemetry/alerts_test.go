package telemetry_test

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/switchyard-dev/switchyard/lanes"
	"github.com/switchyard-dev/switchyard/ledger/sqlite"
	"github.com/switchyard-dev/switchyard/telemetry"
)

const alertsFile = "../docs/alerts.yml"

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// TestAlertRulesUseExportedMetrics: every metric docs/alerts.yml names is
// one this package exports, and the two required alerts are there.
func TestAlertRulesUseExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(raw, &rf); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}

	// The families a Telemetry with a broker exposes on scrape.
	b := openBroker(t)
	tel, err := telemetry.New(&telemetry.Config{Broker: b, Lanes: lanes.Defaults()})
	if err != nil {
		t.Fatal(err)
	}
	// And the outbox gauges, with a ledger that has an outbox.
	L, err := sqlite.Open(context.Background(), sqlite.Memory, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer L.Close()
	if err := tel.WatchOutbox(L); err != nil {
		t.Fatal(err)
	}
	fams, err := tel.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, f := range fams {
		exported[f.GetName()] = true
	}

	names := regexp.MustCompile(`\bswitchyard_[a-z_]+\b`)
	alerts := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = true
			if r.Expr == "" || r.For == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("rule %s lacks expr, for, severity or summary", r.Alert)
			}
			for _, n := range names.FindAllString(r.Expr, -1) {
				if n == "switchyard_namespace" {
					continue // the label
				}
				if !exported[n] {
					t.Errorf("rule %s uses %s, which is not exported", r.Alert, n)
				}
			}
		}
	}
	for _, want := range []string{"SwitchyardLaneOldestReadyOverObjective", "SwitchyardDeadLetterQueueNotEmpty"} {
		if !alerts[want] {
			t.Errorf("alert %s missing from %s", want, alertsFile)
		}
	}
}

// TestAlertRulesPromtool checks the rule file and runs its unit tests
// (testdata/alerts_test.yml: each alert fires when it should and not
// before) with promtool, from $SWITCHYARD_PROMTOOL or PATH. Debian's
// prometheus package ships it.
func TestAlertRulesPromtool(t *testing.T) {
	tool := os.Getenv("SWITCHYARD_PROMTOOL")
	if tool == "" {
		var err error
		if tool, err = exec.LookPath("promtool"); err != nil {
			t.Skip("promtool is not installed (Debian package prometheus) and SWITCHYARD_PROMTOOL is not set; the rules' names are still checked by TestAlertRulesUseExportedMetrics")
		}
	}
	for _, args := range [][]string{{"check", "rules", alertsFile}, {"test", "rules", "testdata/alerts_test.yml"}} {
		out, err := exec.Command(tool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
