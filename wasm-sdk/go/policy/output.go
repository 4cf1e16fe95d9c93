package policy

import "errors"

const outputHeaderV10 = 40

// Output is one evaluation's result. Every weight starts at 0 (drain).
type Output struct {
	weights    []uint32
	scheduler  string
	flags      []string
	reevaluate uint32
	buf        []byte
}

func (o *Output) reset(n int) {
	if cap(o.weights) < n {
		o.weights = make([]uint32, n)
	}
	o.weights = o.weights[:n]
	clear(o.weights)
	o.scheduler, o.flags, o.reevaluate = "", o.flags[:0], 0
}

// MaxWeight is the largest weight the host accepts.
const MaxWeight = 65535

// Len is the number of weights, the input's number of endpoints.
func (o *Output) Len() int { return len(o.weights) }

// SetWeight sets endpoint i's weight, capped at MaxWeight; 0 drains it.
func (o *Output) SetWeight(i int, w uint32) { o.weights[i] = min(w, MaxWeight) }

// Weight returns endpoint i's weight.
func (o *Output) Weight(i int) uint32 { return o.weights[i] }

// SetScheduler asks for an IPVS scheduler (rr, wrr, lc, wlc, sh, mh, ...)
// and its flags (sh-port, sh-fallback, mh-port, mh-fallback).
func (o *Output) SetScheduler(name string, flags ...string) {
	o.scheduler = name
	o.flags = append(o.flags[:0], flags...)
}

// SetReevaluate asks to be evaluated again after ms milliseconds (1,000
// to 3,600,000) even if nothing changes; 0 means only on change. The
// statistics are no fresher for it: they are read every
// policies.statisticsInterval (10 s).
func (o *Output) SetReevaluate(ms uint32) { o.reevaluate = ms }

// encode lays the output out per the ABI, reusing o.buf.
func (o *Output) encode() []byte {
	n := len(o.weights)
	size := outputHeaderV10 + 4*n + len(o.scheduler)
	for i, f := range o.flags {
		size += len(f)
		if i > 0 {
			size++
		}
	}
	if cap(o.buf) < size {
		o.buf = make([]byte, size)
	}
	b := o.buf[:size]
	clear(b[:outputHeaderV10])
	le.PutUint16(b[0:], Major)
	le.PutUint16(b[2:], Minor)
	le.PutUint32(b[4:], outputHeaderV10)
	le.PutUint32(b[8:], uint32(size))
	le.PutUint32(b[12:], uint32(n))
	le.PutUint32(b[16:], outputHeaderV10)
	le.PutUint32(b[20:], o.reevaluate)
	for i, w := range o.weights {
		put32at(b, outputHeaderV10+4*i, w)
	}
	at := outputHeaderV10 + 4*n
	if len(o.scheduler) > 0 {
		le.PutUint32(b[24:], uint32(at))
		le.PutUint32(b[28:], uint32(len(o.scheduler)))
		at += copy(b[at:], o.scheduler)
	}
	if len(o.flags) > 0 {
		start := at
		for i, f := range o.flags {
			if i > 0 {
				b[at] = ','
				at++
			}
			at += copy(b[at:], f)
		}
		le.PutUint32(b[32:], uint32(start))
		le.PutUint32(b[36:], uint32(at-start))
	}
	return b
}

// Func is a policy: it reads in and fills out. An error makes the
// evaluation fail (the host falls back and reports it).
type Func func(in *Input, out *Output) error

// Evaluator runs a Func over raw ABI inputs, reusing its buffers. The
// wasm export uses one; tests can too.
type Evaluator struct {
	f   Func
	in  Input
	out Output
}

// NewEvaluator returns an Evaluator for f.
func NewEvaluator(f Func) *Evaluator { return &Evaluator{f: f} }

// Run evaluates one raw input and returns the raw output, valid until the
// next Run.
func (e *Evaluator) Run(input []byte) ([]byte, error) {
	if err := e.in.parse(input); err != nil {
		return nil, err
	}
	e.out.reset(e.in.Len())
	if err := e.f(&e.in, &e.out); err != nil {
		return nil, err
	}
	if len(e.out.weights) != e.in.Len() {
		return nil, errors.New("policy changed the number of weights")
	}
	return e.out.encode(), nil
}
