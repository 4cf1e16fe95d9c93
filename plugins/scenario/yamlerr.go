package scenario

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"
)

// yamlError reports a parse error of the scenario name in the file's
// words: the line, the field and what it should hold, then the excerpt
// of the file the parser points at, on lines of its own.
func yamlError(name string, src []byte, err error) error {
	var ye yaml.Error
	if !errors.As(err, &ye) || ye.GetToken() == nil {
		// Values such as durations are parsed after the YAML, without a
		// position.
		if v, ok := strings.CutPrefix(err.Error(), "time: invalid duration "); ok {
			return fmt.Errorf("scenario %s: %s is not %s", name, v, describe(durationType))
		}
		return fmt.Errorf("scenario %s: %w", name, err)
	}
	tok := ye.GetToken()
	msg := ye.GetMessage()
	var te *yaml.TypeError
	var oe *yaml.OverflowError
	var ue *yaml.UnexpectedNodeTypeError
	var fe *yaml.UnknownFieldError
	switch {
	case errors.As(err, &fe):
		if known := knownFields(src, tok); len(known) > 0 {
			msg += " (the fields here are " + strings.Join(known, ", ") + ")"
		}
	case errors.As(err, &te):
		msg = fmt.Sprintf("%s is not %s", quoteValue(tok.Value), describe(te.DstType))
	case errors.As(err, &oe):
		msg = fmt.Sprintf("%s is out of range: want %s", oe.SrcNum, describe(oe.DstType))
	case errors.As(err, &ue):
		msg = strings.NewReplacer("sequence", "a list", "mapping", "a mapping of fields").Replace(msg)
	}
	if k := keyOf(tok); k != "" && !strings.Contains(msg, `"`+k+`"`) {
		msg = fmt.Sprintf("field %s: %s", k, msg)
	}
	excerpt := yaml.FormatErrorWithToken(msg, tok, false, true)
	if i := strings.IndexByte(excerpt, '\n'); i >= 0 {
		excerpt = excerpt[i+1:]
	} else {
		excerpt = ""
	}
	return &Error{Summary: fmt.Sprintf("scenario %s, line %d: %s", name, tok.Position.Line, msg), Excerpt: excerpt}
}

// Error is a scenario parse error: a one-line summary and the excerpt of
// the file it points at (several lines, with a marker).
type Error struct {
	Summary string
	Excerpt string
}

func (e *Error) Error() string {
	if e.Excerpt == "" {
		return e.Summary
	}
	return e.Summary + "\n" + e.Excerpt
}

// knownFields lists the fields a scenario may have where the key token
// tok is, nil when that is not known.
func knownFields(src []byte, tok *token.Token) []string {
	f, err := parser.ParseBytes(src, 0)
	if err != nil {
		return nil
	}
	for _, d := range f.Docs {
		if path, ok := keyPath(d.Body, tok); ok {
			t := reflect.TypeFor[Scenario]()
			for _, k := range path[:len(path)-1] {
				if t = fieldType(t, k); t == nil {
					return nil
				}
			}
			var names []string
			for i := range t.NumField() {
				if n := t.Field(i).Tag.Get("yaml"); n != "" && n != "-" {
					names = append(names, n)
				}
			}
			return names
		}
	}
	return nil
}

// keyPath is the path of mapping keys from n down to the key at tok's
// position (list indexes left out).
func keyPath(n ast.Node, tok *token.Token) ([]string, bool) {
	switch n := n.(type) {
	case *ast.MappingNode:
		for _, v := range n.Values {
			if p, ok := keyPath(v, tok); ok {
				return p, true
			}
		}
	case *ast.MappingValueNode:
		k := n.Key.GetToken()
		if k != nil && k.Position.Line == tok.Position.Line && k.Position.Column == tok.Position.Column {
			return []string{k.Value}, true
		}
		if p, ok := keyPath(n.Value, tok); ok && k != nil {
			return append([]string{k.Value}, p...), true
		}
	case *ast.SequenceNode:
		for _, v := range n.Values {
			if p, ok := keyPath(v, tok); ok {
				return p, true
			}
		}
	}
	return nil, false
}

// fieldType is the struct type under the field named by its YAML tag
// key in t, through pointers and lists; nil when there is none.
func fieldType(t reflect.Type, key string) reflect.Type {
	for i := range t.NumField() {
		if t.Field(i).Tag.Get("yaml") == key {
			ft := t.Field(i).Type
			for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
				ft = ft.Elem()
			}
			if ft.Kind() != reflect.Struct {
				return nil
			}
			return ft
		}
	}
	return nil
}

// keyOf is the mapping key a value token belongs to, "" when tok is not
// a mapping value.
func keyOf(tok *token.Token) string {
	if p := tok.Prev; p != nil && p.Type == token.MappingValueType && p.Prev != nil {
		return p.Prev.Value
	}
	return ""
}

func quoteValue(v string) string {
	switch v {
	case "":
		return "this value"
	case "[":
		return "a list"
	case "{":
		return "a mapping"
	}
	return fmt.Sprintf("%q", v)
}

var durationType = reflect.TypeFor[time.Duration]()
var timeType = reflect.TypeFor[time.Time]()

// describe says in a user's words what a value of type t is written as.
func describe(t reflect.Type) string {
	switch t {
	case durationType:
		return "a duration such as 30s or 1m30s"
	case timeType:
		return "a time such as 2026-11-29T12:00:00Z"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return describe(t.Elem())
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uint:
		return fmt.Sprintf("a whole number from 0 to %d", uint64(1)<<(t.Bits())-1)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list, such as [a, b] or lines starting with -"
	case reflect.Struct, reflect.Map:
		return "a mapping of fields, such as {name: value} or indented name: value lines"
	}
	return "a value of another kind"
}
