//go:build wasip1

package main

import "github.com/switchyard-lb/switchyard/wasm-sdk/go/policy"

func evaluate(in *policy.Input, out *policy.Output) error {
	params := in.Params()
	spillAt, err := policy.ParamUint(params, "spillAt", 100)
	if err != nil {
		return err
	}
	localWeight, err := policy.ParamUint(params, "localWeight", 100)
	if err != nil {
		return err
	}
	spillWeight, err := policy.ParamUint(params, "spillWeight", 10)
	if err != nil {
		return err
	}

	var inZone, conns uint64
	for i := range in.Len() {
		if e := in.Endpoint(i); in.Usable(i) && e.SameZone() {
			inZone++
			conns += uint64(e.ActiveConns())
		}
	}
	busy := inZone > 0 && conns >= uint64(spillAt)*inZone
	for i := range in.Len() {
		e := in.Endpoint(i)
		switch {
		case !in.Usable(i):
		case inZone == 0 || e.SameZone():
			out.SetWeight(i, localWeight)
		case busy:
			out.SetWeight(i, spillWeight)
		}
	}
	out.SetScheduler("wrr")
	out.SetReevaluate(10000)
	return nil
}

func init() { policy.Register(evaluate) }

func main() {}
