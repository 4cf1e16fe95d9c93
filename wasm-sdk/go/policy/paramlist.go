package policy

import (
	"bytes"
	"errors"
	"iter"
)

// ParamBool returns the boolean at key in the top level of the JSON
// object params, or def when params is empty or has no such key. It fails
// when params is not a JSON object or the value is not true or false. It
// does not allocate.
func ParamBool(params []byte, key string, def bool) (bool, error) {
	p, found, err := seekParam(params, key)
	if err != nil || !found {
		return def, err
	}
	for _, lit := range []string{"true", "false"} {
		if bytes.HasPrefix(p.b[p.i:], []byte(lit)) && !p.literalContinues(p.i+len(lit)) {
			return lit == "true", nil
		}
	}
	return false, errors.New("params: " + key + " is not true or false")
}

// ParamObject returns the JSON object at key in the top level of the JSON
// object params, and whether the key is there: pass it to the Param
// functions to read nested parameters ({"spill": {"at": 100}}). It fails
// when params is not a JSON object or the value is not an object. The
// result aliases params: it does not allocate.
func ParamObject(params []byte, key string) (obj []byte, found bool, err error) {
	p, found, err := seekParam(params, key)
	if err != nil || !found {
		return nil, found, err
	}
	start := p.i
	if p.eof() || p.b[p.i] != '{' || !p.skipValue(0) {
		return nil, true, errors.New("params: " + key + " is not an object")
	}
	return p.b[start:p.i], true, nil
}

// Strings is a JSON list of strings read in place from the parameters:
// each string is a view of the parameters, without escapes.
type Strings struct {
	raw []byte // the list, brackets included
	n   int
}

// ParamStrings returns the list of strings at key in the top level of the
// JSON object params ({"excludeZones": ["a", "b"]}), and whether the key
// is there. It fails when params is not a JSON object or the value is not
// a list of strings without escape sequences; every element is checked
// here, so reading the list cannot fail. It does not allocate.
func ParamStrings(params []byte, key string) (list Strings, found bool, err error) {
	raw, n, found, err := paramList(params, key, listOfStrings)
	if err == errNotList {
		err = errors.New("params: " + key + " is not a list of strings without escapes")
	}
	return Strings{raw, n}, found, err
}

// Len is the number of strings.
func (l Strings) Len() int { return l.n }

// All yields each index and string.
func (l Strings) All() iter.Seq2[int, []byte] {
	return func(yield func(int, []byte) bool) {
		p := listScanner(l.raw)
		for i := range l.n {
			s, _ := p.str()
			if !yield(i, s) {
				return
			}
			p.next()
		}
	}
}

// Contains says whether one of the strings is s.
func (l Strings) Contains(s []byte) bool {
	for _, v := range l.All() {
		if bytes.Equal(v, s) {
			return true
		}
	}
	return false
}

// Uints is a JSON list of non-negative integers below 2^32 read in place
// from the parameters.
type Uints struct {
	raw []byte
	n   int
}

// ParamUints returns the list of integers at key in the top level of the
// JSON object params ({"ports": [80, 443]}), and whether the key is
// there. It fails when params is not a JSON object or the value is not a
// list of integers from 0 to 4294967295; every element is checked here.
// It does not allocate.
func ParamUints(params []byte, key string) (list Uints, found bool, err error) {
	raw, n, found, err := paramList(params, key, listOfUints)
	if err == errNotList {
		err = errors.New("params: " + key + " is not a list of integers from 0 to 4294967295")
	}
	return Uints{raw, n}, found, err
}

// Len is the number of integers.
func (l Uints) Len() int { return l.n }

// All yields each index and integer.
func (l Uints) All() iter.Seq2[int, uint32] {
	return func(yield func(int, uint32) bool) {
		p := listScanner(l.raw)
		for i := range l.n {
			v, _ := p.uint()
			if !yield(i, v) {
				return
			}
			p.next()
		}
	}
}

// Contains says whether one of the integers is v.
func (l Uints) Contains(v uint32) bool {
	for _, x := range l.All() {
		if x == v {
			return true
		}
	}
	return false
}

var errNotList = errors.New("not a list")

// The element kinds of paramList.
const (
	listOfStrings = iota
	listOfUints
)

// paramList finds the list at key and checks that each element is of the
// kind, returning the list's bytes and length. (A kind, not a function:
// the scanner would escape through an indirect call.)
func paramList(params []byte, key string, kind int) (raw []byte, n int, found bool, err error) {
	p, found, err := seekParam(params, key)
	if err != nil || !found {
		return nil, 0, found, err
	}
	start := p.i
	if !p.eat('[') {
		return nil, 0, true, errNotList
	}
	p.space()
	if p.eat(']') {
		return p.b[start:p.i], 0, true, nil
	}
	for {
		p.space()
		ok := false
		if kind == listOfStrings {
			var s []byte
			s, ok = p.str()
			ok = ok && bytes.IndexByte(s, '\\') < 0
		} else {
			_, ok = p.uint()
		}
		if !ok {
			return nil, 0, true, errNotList
		}
		n++
		p.space()
		if p.eat(']') {
			return p.b[start:p.i], n, true, nil
		}
		if !p.eat(',') {
			return nil, 0, true, errNotList
		}
	}
}

// listScanner returns a scanner at the first element of a checked list.
func listScanner(raw []byte) jsonScanner {
	p := jsonScanner{b: raw, i: 1}
	p.space()
	return p
}

// next moves from the end of an element of a checked list to the next.
func (p *jsonScanner) next() {
	p.space()
	p.eat(',')
	p.space()
}

// literalContinues says whether the byte at i would continue a literal
// (true, false, null, a number) that ends before it.
func (p *jsonScanner) literalContinues(i int) bool {
	if i >= len(p.b) {
		return false
	}
	c := p.b[i]
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}
