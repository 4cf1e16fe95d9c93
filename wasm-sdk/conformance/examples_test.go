package conformance_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	scenariofile "github.com/switchyard-lb/switchyard/plugins/scenario"
)

// examplesOf lists the examples of one SDK language: the directories
// with a main.go (Go) or the files with the extension ext.
func examplesOf(t *testing.T, dir, ext string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if ext == "" {
			if _, err := os.Stat(filepath.Join(dir, e.Name(), "main.go")); e.IsDir() && err == nil {
				names = append(names, e.Name())
			}
		} else if name, ok := strings.CutSuffix(e.Name(), ext); ok && !e.IsDir() {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// TestEveryExampleHasScenarios: the three SDKs ship the same examples,
// and each has scenarios in wasm-sdk/scenarios/<example>, every one with
// expectations, which make wasm-scenarios (in make test) checks against
// the module of every language.
func TestEveryExampleHasScenarios(t *testing.T) {
	goExamples := examplesOf(t, "../go/examples", "")
	if len(goExamples) == 0 {
		t.Fatal("no Go examples in wasm-sdk/go/examples")
	}
	for lang, got := range map[string][]string{
		"rust":           examplesOf(t, "../rust/examples", ".rs"),
		"assemblyscript": examplesOf(t, "../assemblyscript/examples", ".ts"),
	} {
		if diff := cmp.Diff(goExamples, got); diff != "" {
			t.Errorf("%s's examples differ from Go's (-go +%s):\n%s", lang, lang, diff)
		}
	}
	for _, name := range goExamples {
		files, err := filepath.Glob(filepath.Join("../scenarios", name, "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			t.Errorf("example %s has no scenarios in wasm-sdk/scenarios/%s", name, name)
		}
		for _, f := range files {
			sc, err := scenariofile.Load(f)
			if err != nil {
				t.Error(err)
			} else if sc.Expect == nil {
				t.Errorf("%s has no expect section: it checks nothing", f)
			}
		}
	}
}

// TestREADMEScenario: the scenario wasm-sdk/README.md shows is one of the
// zoneaware example's, which make wasm-scenarios checks in every
// language, word for word.
func TestREADMEScenario(t *testing.T) {
	page, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	sc, err := os.ReadFile("../scenarios/zoneaware/readme.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "```yaml\n"+string(sc)+"```\n") {
		t.Errorf("wasm-sdk/README.md does not show wasm-sdk/scenarios/zoneaware/readme.yaml as a yaml block word for word:\n%s", sc)
	}
}
