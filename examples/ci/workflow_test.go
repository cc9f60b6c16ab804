package ci_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/switchyard-dev/switchyard/switchyardtest"
)

// workflow is the part of a GitHub Actions workflow the test reads.
type workflow struct {
	Name string         `yaml:"name"`
	On   map[string]any `yaml:"on"`
	Jobs map[string]struct {
		Name     string            `yaml:"name"`
		RunsOn   string            `yaml:"runs-on"`
		Env      map[string]string `yaml:"env"`
		Services map[string]struct {
			Image   string            `yaml:"image"`
			Ports   []string          `yaml:"ports"`
			Env     map[string]string `yaml:"env"`
			Options string            `yaml:"options"`
		} `yaml:"services"`
		Steps []struct {
			Name  string            `yaml:"name"`
			If    string            `yaml:"if"`
			Uses  string            `yaml:"uses"`
			Run   string            `yaml:"run"`
			With  map[string]string `yaml:"with"`
			Shell string            `yaml:"shell"`
		} `yaml:"steps"`
	} `yaml:"jobs"`
}

func readWorkflow(t *testing.T) (workflow, string) {
	t.Helper()
	src, err := os.ReadFile("workflow.yml")
	if err != nil {
		t.Fatal(err)
	}
	var w workflow
	dec := yaml.NewDecoder(strings.NewReader(string(src)))
	dec.KnownFields(true) // a misspelt key is an error, as it is for GitHub
	if err := dec.Decode(&w); err != nil {
		t.Fatalf("workflow.yml does not parse: %v", err)
	}
	return w, string(src)
}

// The workflow parses; it has the two jobs; the conformance job's services
// are the images switchyardtest/containers pins, on the ports the
// environment variables name; the variables are the ones switchyardtest
// reads; and its test commands select tests that exist in this package.
func TestWorkflow_IsValid(t *testing.T) {
	w, _ := readWorkflow(t)
	_, push := w.On["push"]
	_, pr := w.On["pull_request"]
	if w.Name == "" || !push || !pr {
		t.Fatalf("workflow %q runs on %v", w.Name, w.On)
	}
	handlers, ok := w.Jobs["handlers"]
	if !ok {
		t.Fatal("no handlers job")
	}
	conf, ok := w.Jobs["conformance"]
	if !ok {
		t.Fatal("no conformance job")
	}
	for name, job := range w.Jobs {
		if job.RunsOn != "ubuntu-latest" {
			t.Errorf("job %s runs on %q: service containers need a Linux runner", name, job.RunsOn)
		}
		for _, s := range job.Steps {
			if s.Uses == "" && s.Run == "" || s.Uses != "" && !regexp.MustCompile(`^[\w-]+/[\w-]+@v\d+$`).MatchString(s.Uses) {
				t.Errorf("job %s: step %+v neither runs a command nor uses an action pinned to a major version", name, s)
			}
		}
	}

	images := map[string]string{"rabbitmq": "rabbitmq:3.13-alpine", "redis": "redis:7.0-alpine", "postgres": "postgres:15-alpine"}
	ports := map[string]string{"rabbitmq": "5672:5672", "redis": "6379:6379", "postgres": "5432:5432"}
	for name, img := range images {
		s, ok := conf.Services[name]
		if !ok {
			t.Errorf("no %s service", name)
			continue
		}
		if s.Image != img || len(s.Ports) != 1 || s.Ports[0] != ports[name] || !strings.Contains(s.Options, "--health-cmd") {
			t.Errorf("service %s = %+v; want image %s, port %s and a health check", name, s, img, ports[name])
		}
	}
	var natsStarted bool
	for _, s := range conf.Steps {
		if strings.Contains(s.Run, "docker run") && strings.Contains(s.Run, "nats:2.10-alpine -js") && strings.Contains(s.Run, "4222:4222") {
			natsStarted = true
		}
	}
	if !natsStarted {
		t.Error("the conformance job does not start nats:2.10-alpine with -js on port 4222")
	}

	want := map[switchyardtest.Service]string{
		switchyardtest.ServiceRabbitMQ: "amqp://guest:guest@127.0.0.1:5672/",
		switchyardtest.ServiceRedis:    "127.0.0.1:6379",
		switchyardtest.ServiceNATS:     "nats://127.0.0.1:4222",
		switchyardtest.ServicePostgres: "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
	}
	for s, v := range want {
		if got := conf.Env[s.EnvVar()]; got != v {
			t.Errorf("conformance job: %s = %q, want %q", s.EnvVar(), got, v)
		}
	}
	if conf.Env["SWITCHYARD_REQUIRE_BROKERS"] != "1" {
		t.Error("the conformance job does not require its brokers: a missing one would skip silently")
	}
	if !strings.HasSuffix(conf.Env["SWITCHYARD_CONFORMANCE_REPORT"], "conformance-report.txt") {
		t.Errorf("the report goes to %q", conf.Env["SWITCHYARD_CONFORMANCE_REPORT"])
	}

	// The test selections name tests that exist here.
	src, err := os.ReadFile("conformance_test.go")
	if err != nil {
		t.Fatal(err)
	}
	selected := func(job string, steps []string) {
		for _, run := range steps {
			for _, flag := range []string{"-run", "-skip"} {
				m := regexp.MustCompile(flag + ` (\S+)`).FindStringSubmatch(run)
				if m == nil {
					continue
				}
				if !regexp.MustCompile(`func (` + m[1] + `)\(t \*testing\.T\)`).Match(src) {
					t.Errorf("job %s: %s %s matches no test in conformance_test.go", job, flag, m[1])
				}
			}
		}
	}
	var runs []string
	for _, s := range handlers.Steps {
		runs = append(runs, s.Run)
	}
	selected("handlers", runs)
	runs = nil
	for _, s := range conf.Steps {
		runs = append(runs, s.Run)
	}
	selected("conformance", runs)
}

// readmeBlock returns the first fenced block of the given language after
// the README heading.
func readmeBlock(t *testing.T, heading, lang string) string {
	t.Helper()
	src, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	i := strings.Index(s, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("README has no %q", heading)
	}
	s = s[i:]
	j := strings.Index(s, "\n```"+lang+"\n")
	if j < 0 {
		t.Fatalf("README %q has no %s block", heading, lang)
	}
	s = s[j+len("\n```"+lang+"\n"):]
	k := strings.Index(s, "\n```\n")
	if k < 0 {
		t.Fatalf("README %q: the %s block does not end", heading, lang)
	}
	return s[:k]
}

// marked returns the part of a test file between "// README: …" and
// "// END README".
func marked(t *testing.T, path string) string {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	i := strings.Index(s, "// README: ")
	j := strings.Index(s, "// END README")
	if i < 0 || j < i {
		t.Fatalf("%s has no README markers", path)
	}
	s = s[i:j]
	return strings.Trim(s[strings.Index(s, "\n")+1:], "\n")
}

// The README's sections show the code these tests run, and the workflow
// this package holds.
func TestREADME_ShowsTheCodeThatRuns(t *testing.T) {
	for _, c := range []struct{ heading, lang, want, from string }{
		{"## Testing your handlers", "go", marked(t, "summarise_test.go"), "summarise_test.go"},
		{"## Running the conformance suite in your CI", "go", marked(t, "conformance_test.go"), "conformance_test.go"},
	} {
		if got := readmeBlock(t, c.heading, c.lang); got != c.want {
			t.Errorf("README %q differs from %s:\n--- README\n%s\n--- %s\n%s", c.heading, c.from, got, c.from, c.want)
		}
	}
	_, wf := readWorkflow(t)
	if got := readmeBlock(t, "## Running the conformance suite in your CI", "yaml"); got != strings.TrimRight(wf, "\n") {
		t.Errorf("README's workflow differs from workflow.yml:\n%s", got)
	}
}
