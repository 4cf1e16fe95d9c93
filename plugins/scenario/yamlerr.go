package scenario

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/token"
)

// yamlError reports a parse error of the scenario name in the file's
// words: the line, the field and what it should hold, then the excerpt
// of the file the parser points at, on lines of its own.
func yamlError(name string, err error) error {
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
	switch {
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
