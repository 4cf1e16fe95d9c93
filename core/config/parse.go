package config

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"
)

// FieldError is one problem with one field of the config.
type FieldError struct {
	// Path is the field's path, such as "dataplane.ipvs.scheduler" or
	// "pools[0].addresses[1]"; "" for the document itself.
	Path string
	// Line is the 1-based line of the field in the file, 0 when unknown.
	Line int
	Msg  string
}

func (e *FieldError) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in a config, in file order.
type Errors []*FieldError

func (es Errors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

// Unwrap returns the individual FieldErrors.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// A Check validates what this package leaves to another: a setting whose
// valid values another package decides, such as the schedulers a
// dataplane supports. It returns each problem with its path in a v1alpha2
// Config (Path set, Line 0), or nil; Parse adds the lines, and maps the
// paths back for a v1alpha1 file.
type Check func(*Config) Errors

// Load reads, parses and validates the config file at path.
func Load(path string, checks ...Check) (*Config, error) {
	c, _, err := load(path, checks...)
	return c, err
}

// load reads and parses the config file at path, returning it with the
// bytes read.
func load(path string, checks ...Check) (*Config, []byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read config: %w", err)
	}
	c, err := Parse(data, checks...)
	if err != nil {
		return nil, nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, data, nil
}

// Parse decodes a config strictly, applies the defaults and validates it,
// with Validate and then each of checks. The file may be a v1alpha2 or a
// v1alpha1 one; the Config returned is v1alpha2. The error, when not nil,
// is an Errors listing every problem it could find with the field's path
// (as written in the file's version) and line: a document that does not
// decode (an unknown field, a wrong type, a syntax error) stops at its
// first problem; after that, every bad value is reported.
func Parse(data []byte, checks ...Check) (*Config, error) {
	file, err := parser.ParseBytes(data, 0)
	if err != nil {
		return nil, Errors{yamlError(nil, err)}
	}
	if n := len(file.Docs); n > 1 {
		return nil, Errors{{Line: nodeLine(file.Docs[1]), Msg: fmt.Sprintf("want one YAML document, found %d", n)}}
	}
	if len(file.Docs) == 1 && file.Docs[0].Body != nil {
		if _, ok := file.Docs[0].Body.(*ast.MappingNode); !ok {
			return nil, Errors{{Line: nodeLine(file.Docs[0].Body), Msg: "want a mapping with apiVersion and kind"}}
		}
	}

	// Check the format first: a different kind's fields mean nothing here.
	var head struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
	}
	if err := yaml.Unmarshal(data, &head); err != nil {
		return nil, Errors{yamlError(file, err)}
	}
	knownVersion := head.APIVersion == APIVersion || head.APIVersion == APIVersionV1alpha1
	if !knownVersion || head.Kind != Kind {
		var errs Errors
		if !knownVersion {
			errs = append(errs, &FieldError{Path: "apiVersion", Msg: gotWantVersion(head.APIVersion)})
		}
		if head.Kind != Kind {
			errs = append(errs, &FieldError{Path: "kind", Msg: gotWant(head.Kind, Kind)})
		}
		return nil, withLines(file, errs)
	}

	c := new(Config)
	col := new(collector)
	ctx := context.WithValue(context.Background(), collectorKey{}, col)
	ctx = context.WithValue(ctx, versionKey{}, head.APIVersion)
	if err := yaml.UnmarshalContext(ctx, data, c, yaml.Strict()); err != nil {
		fe := yamlError(file, err)
		if strings.HasPrefix(fe.Msg, "unknown field ") {
			fe.Msg += movedHint(head.APIVersion, fe.Path)
		}
		return nil, Errors{fe}
	}
	// Value errors found while decoding carry the file's own paths;
	// Validate's and the checks' are v1alpha2 paths.
	errs := col.errs
	c.APIVersion = APIVersion
	c.SetDefaults()
	var later Errors
	if err := c.Validate(); err != nil {
		later = append(later, err.(Errors)...)
	}
	for _, check := range checks {
		later = append(later, check(c)...)
	}
	for _, e := range later {
		if head.APIVersion == APIVersionV1alpha1 {
			e.Path = v1alpha1Path(e.Path)
		}
		errs = append(errs, e)
	}
	if len(errs) > 0 {
		return nil, withLines(file, errs)
	}
	return c, nil
}

// withLines fills in missing line numbers by looking each path up in the
// document, and sorts the errors by line.
func withLines(file *ast.File, errs Errors) Errors {
	for _, e := range errs {
		if e.Line == 0 && e.Path != "" {
			e.Line = lineOf(file, e.Path)
		}
	}
	// Stable insertion sort: a handful of errors, and unknown lines (0)
	// keep their place after the known ones.
	out := make(Errors, 0, len(errs))
	for _, e := range errs {
		i := len(out)
		for i > 0 && e.Line != 0 && (out[i-1].Line == 0 || out[i-1].Line > e.Line) {
			i--
		}
		out = append(out[:i], append(Errors{e}, out[i:]...)...)
	}
	return out
}

// lineOf returns the line of the value at path in file, or of its nearest
// parent that exists; 0 when none does.
func lineOf(file *ast.File, path string) int {
	for path != "" {
		if p, err := yaml.PathString("$." + path); err == nil {
			if n, err := p.FilterFile(file); err == nil && n != nil {
				return nodeLine(n)
			}
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return 0
}

// yamlError turns a decoder error into a FieldError naming the field.
func yamlError(file *ast.File, err error) *FieldError {
	var ye yaml.Error
	if !errors.As(err, &ye) {
		return &FieldError{Msg: err.Error()}
	}
	fe := &FieldError{Msg: ye.GetMessage()}
	tk := ye.GetToken()
	if tk != nil && tk.Position != nil {
		fe.Line = tk.Position.Line
	}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		fe.Msg = fmt.Sprintf("want %s, got %s", kindName(te.DstType), kindName(te.SrcType))
	}
	var ne *yaml.UnexpectedNodeTypeError
	if errors.As(err, &ne) {
		fe.Msg = fmt.Sprintf("want %s, got %s", article(ne.Expected.YAMLName()), article(ne.Actual.YAMLName()))
	}
	if file != nil && tk != nil {
		fe.Path = pathOfToken(file, tk)
	}
	return fe
}

// pathOfToken finds the path of the node that tk belongs to.
func pathOfToken(file *ast.File, tk *token.Token) string {
	var found string
	for _, doc := range file.Docs {
		ast.Walk(visitor(func(n ast.Node) bool {
			if found != "" {
				return false
			}
			if mv, ok := n.(*ast.MappingValueNode); ok && sameToken(mv.Key.GetToken(), tk) {
				found = nodePath(mv.Key)
				return false
			}
			if sameToken(n.GetToken(), tk) {
				found = nodePath(n)
				return false
			}
			return true
		}), doc)
	}
	return found
}

func sameToken(a, b *token.Token) bool {
	return a != nil && b != nil && a.Position != nil && b.Position != nil &&
		a.Position.Offset == b.Position.Offset && a.Value == b.Value
}

type visitor func(ast.Node) bool

func (v visitor) Visit(n ast.Node) ast.Visitor {
	if v(n) {
		return v
	}
	return nil
}

func kindName(t reflect.Type) string {
	if t == nil {
		return "nothing"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	case reflect.Pointer:
		return kindName(t.Elem())
	}
	return t.String()
}

func gotWant(got, want string) string {
	if got == "" {
		return fmt.Sprintf("missing (want %q)", want)
	}
	return fmt.Sprintf("got %q, want %q", got, want)
}

// gotWantVersion is gotWant for a file's apiVersion, naming both versions
// Parse reads.
func gotWantVersion(got string) string {
	want := fmt.Sprintf("%q or the older %q", APIVersion, APIVersionV1alpha1)
	if got == "" {
		return "missing (want " + want + ")"
	}
	return fmt.Sprintf("got %q, want %s", got, want)
}

func article(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an " + word
	}
	return "a " + word
}
