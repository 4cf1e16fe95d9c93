package walkthrough_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/wasm-sdk/walkthrough"
)

func TestParse(t *testing.T) {
	const page = "# A page\n\n" +
		"<!-- walkthrough go: main.go -->\n```go\npackage main\n\nfunc main() {}\n```\n\n" +
		"<!-- walkthrough rust: p.rs -->\n```rust\nfn f() {}\n```\n" +
		"<!-- walkthrough: scenarios/a.yaml -->\n```yaml\nnode: {name: a}\n```\n" +
		"```sh\n<!-- walkthrough go: not/a/marker.go -->\n```\n"
	tests := []struct {
		name, page, lang string
		want             []walkthrough.File
		err              string
	}{
		{name: "go", page: page, lang: "go", want: []walkthrough.File{
			{Path: "main.go", Content: "package main\n\nfunc main() {}\n"},
			{Path: "scenarios/a.yaml", Content: "node: {name: a}\n"},
		}},
		{name: "rust", page: page, lang: "rust", want: []walkthrough.File{
			{Path: "p.rs", Content: "fn f() {}\n"},
			{Path: "scenarios/a.yaml", Content: "node: {name: a}\n"},
		}},
		{name: "only the shared files", page: page, lang: "assemblyscript", want: []walkthrough.File{
			{Path: "scenarios/a.yaml", Content: "node: {name: a}\n"},
		}},
		{name: "unknown language asked", page: page, lang: "c", err: `language "c": want one of go, rust, assemblyscript`},
		{name: "unknown language marked", page: "<!-- walkthrough c: p.c -->\n```c\n```\n", lang: "go", err: `line 1: unknown language "c"`},
		{name: "no block", page: "x\n<!-- walkthrough go: main.go -->\n\n```go\n```\n", lang: "go", err: "line 2: the marker of main.go is not followed by a fenced block"},
		{name: "not closed", page: "<!-- walkthrough go: main.go -->\n```go\npackage main\n", lang: "go", err: "line 1: the block of main.go is not closed"},
		{name: "outside", page: "<!-- walkthrough: ../x.yaml -->\n```yaml\n```\n", lang: "go", err: "line 1: ../x.yaml is not a path inside the policy's directory"},
		{name: "twice", page: "<!-- walkthrough: a.yaml -->\n```\n```\n<!-- walkthrough go: a.yaml -->\n```\n```\n", lang: "go", err: "line 4: a.yaml is given twice for go"},
		{name: "nothing", page: "# empty\n", lang: "go", err: "no file for go"},
	}
	for _, tt := range tests {
		got, err := walkthrough.Parse([]byte(tt.page), tt.lang)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: error %v, want one with %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
}

// TestREADME checks the page itself: in every language, one policy
// source of that language and the same scenarios.
func TestREADME(t *testing.T) {
	ext := map[string]string{walkthrough.Go: ".go", walkthrough.Rust: ".rs", walkthrough.AssemblyScript: ".ts"}
	var scenarios []string
	for _, lang := range walkthrough.Languages {
		files, err := walkthrough.Load("../..", lang)
		if err != nil {
			t.Fatal(err)
		}
		src, err := walkthrough.Source(files)
		if err != nil {
			t.Errorf("%s: %v", lang, err)
		} else if filepath.Ext(src.Path) != ext[lang] {
			t.Errorf("%s: the source is %s", lang, src.Path)
		}
		var got []string
		for _, f := range files {
			if strings.HasPrefix(f.Path, "scenarios/") {
				got = append(got, f.Path)
			}
		}
		if len(got) == 0 {
			t.Errorf("%s: no scenarios", lang)
		}
		if scenarios == nil {
			scenarios = got
		} else if diff := cmp.Diff(scenarios, got); diff != "" {
			t.Errorf("%s: scenarios differ from %s's (-want +got):\n%s", lang, walkthrough.Languages[0], diff)
		}
	}
}

// TestPinnedCompiler: the AssemblyScript version the page installs is the
// one the SDK pins, which Setup links instead.
func TestPinnedCompiler(t *testing.T) {
	page, err := os.ReadFile(filepath.Join("../..", walkthrough.README))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`npm install --save-dev assemblyscript@(\S+)`).FindSubmatch(page)
	if m == nil {
		t.Fatal("the page does not install assemblyscript@VERSION")
	}
	b, err := os.ReadFile("../assemblyscript/package.json")
	if err != nil {
		t.Fatal(err)
	}
	var pkg struct {
		DevDependencies map[string]string `json:"devDependencies"`
	}
	if err := json.Unmarshal(b, &pkg); err != nil {
		t.Fatal(err)
	}
	if got, want := string(m[1]), pkg.DevDependencies["assemblyscript"]; got != want {
		t.Errorf("the page installs assemblyscript@%s, the SDK pins %s", got, want)
	}
}
