//go:build wasip1

// Command paramprobe is a test module (not an example): it reads the
// parameters through every helper of the Go SDK and reports what it read
// as the weights of the first 12 endpoints, so wasm-sdk/conformance can
// compare the SDKs' parameter helpers and their messages. The layout is
// in wasm-sdk/conformance/params_test.go (paramReference).
package main

import "github.com/switchyard-lb/switchyard/wasm-sdk/go/policy"

func evaluate(in *policy.Input, out *policy.Output) error {
	var w [12]uint32
	p := in.Params()
	var err error
	if w[0], err = policy.ParamUint(p, "u", 7); err != nil {
		return err
	}
	b, err := policy.ParamBool(p, "b", false)
	if err != nil {
		return err
	}
	t, err := policy.ParamBool(p, "t", true)
	if err != nil {
		return err
	}
	w[1], w[2] = bit(b), bit(t)
	s, found, err := policy.ParamString(p, "s")
	if err != nil {
		return err
	}
	if found {
		w[3] = 1 + uint32(len(s))
		if len(s) > 0 {
			w[4] = uint32(s[0])
		}
	}
	ss, found, err := policy.ParamStrings(p, "ss")
	if err != nil {
		return err
	}
	if found {
		w[5] = 1 + uint32(ss.Len())
		for _, v := range ss.All() {
			w[6] += uint32(len(v))
		}
		w[7] = bit(ss.Contains([]byte("zone-b")))
	}
	us, found, err := policy.ParamUints(p, "us")
	if err != nil {
		return err
	}
	if found {
		w[8] = 1 + uint32(us.Len())
		for _, v := range us.All() {
			w[9] += v
		}
		w[10] = bit(us.Contains(443))
	}
	o, found, err := policy.ParamObject(p, "o")
	if err != nil {
		return err
	}
	if found {
		u, err := policy.ParamUint(o, "u", 5)
		if err != nil {
			return err
		}
		w[11] = 1 + u&0x7fff
	}
	for i := range min(in.Len(), len(w)) {
		out.SetWeight(i, w[i]&0xffff)
	}
	return nil
}

func bit(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

func init() { policy.Register(evaluate) }

func main() {}
