package policy

import (
	"encoding/binary"
	"errors"
	"strconv"
)

var le = binary.LittleEndian

// ABI version this SDK implements.
const (
	Major = 1
	Minor = 0
)

const (
	inputHeaderV10 = 120
	recordV10      = 104
)

// Protocols and Service types, as the input encodes them.
const (
	TCP  = 1
	UDP  = 2
	SCTP = 3

	ClusterIP    = 1
	NodePort     = 2
	LoadBalancer = 3
	ExternalName = 4
)

// Input is one evaluation's input, read in place.
type Input struct {
	b          []byte
	recs       []byte
	n          int
	epOff, rec int
	anyReady   int8 // 0: not scanned yet; 1: none ready; 2: some ready
}

// Parse checks the input's header and returns a view of it.
func Parse(b []byte) (*Input, error) {
	in := new(Input)
	return in, in.parse(b)
}

func (in *Input) parse(b []byte) error {
	*in = Input{}
	if len(b) >= 2 && le.Uint16(b) != Major {
		return errors.New("input ABI major version " + itoa(uint64(le.Uint16(b))) + ", want " + itoa(Major))
	}
	if len(b) < inputHeaderV10 {
		return errors.New("input shorter than its header")
	}
	hs, total := le.Uint32(b[4:]), le.Uint32(b[8:])
	if hs < inputHeaderV10 || uint64(total) != uint64(len(b)) || hs > total {
		return errors.New("bad input header: header_size " + itoa(uint64(hs)) + ", total_size " + itoa(uint64(total)) + ", " + itoa(uint64(len(b))) + " bytes")
	}
	n, off, rec := le.Uint32(b[12:]), le.Uint32(b[16:]), le.Uint32(b[20:])
	if rec < recordV10 || off < hs || uint64(off)+uint64(n)*uint64(rec) > uint64(total) {
		return errors.New("bad input record table: " + itoa(uint64(n)) + " records of " + itoa(uint64(rec)) + " bytes at " + itoa(uint64(off)) + " in " + itoa(uint64(total)) + " bytes")
	}
	*in = Input{b: b, recs: b[off : uint64(off)+uint64(n)*uint64(rec)], n: int(n), epOff: int(off), rec: int(rec)}
	return nil
}

// str returns the string referenced at off in rec as a view, or nil when
// the reference is out of range.
func str(b []byte, at int) []byte {
	off, n := u32at(b, at), u32at(b, at+4)
	if n == 0 || uint64(off)+uint64(n) > uint64(len(b)) {
		return nil
	}
	return b[off : off+n]
}

// NowUnixNano is the evaluation time in Unix nanoseconds. Use it instead
// of a clock.
func (in *Input) NowUnixNano() int64 { return int64(u64at(in.b, 32)) }

// Namespace, Name and PortName identify the Service port.
func (in *Input) Namespace() []byte { return str(in.b, 40) }
func (in *Input) Name() []byte      { return str(in.b, 48) }
func (in *Input) PortName() []byte  { return str(in.b, 56) }

// Port is the Service port; NodePort is 0 when there is none.
func (in *Input) Port() uint16     { return u16at(in.b, 64) }
func (in *Input) NodePort() uint16 { return u16at(in.b, 68) }

// Protocol is TCP, UDP or SCTP; ServiceType ClusterIP, NodePort,
// LoadBalancer or ExternalName.
func (in *Input) Protocol() uint8    { return in.b[66] }
func (in *Input) ServiceType() uint8 { return in.b[67] }

// ExternalLocal and InternalLocal report traffic policies Local.
func (in *Input) ExternalLocal() bool { return in.b[70] == 1 }
func (in *Input) InternalLocal() bool { return in.b[71] == 1 }

// NodeName and NodeZone describe this node; the zone may be empty.
func (in *Input) NodeName() []byte { return str(in.b, 72) }
func (in *Input) NodeZone() []byte { return str(in.b, 80) }

// Params is the policy's JSON parameters, empty when none.
func (in *Input) Params() []byte { return str(in.b, 88) }

// TrafficDistribution is spec.trafficDistribution; SchedulerHint the
// switchyard.dev/scheduler annotation.
func (in *Input) TrafficDistribution() []byte { return str(in.b, 96) }
func (in *Input) SchedulerHint() []byte       { return str(in.b, 104) }

// SessionAffinity reports sessionAffinity ClientIP.
func (in *Input) SessionAffinity() bool { return u32at(in.b, 112)&1 != 0 }

// Len is the number of endpoints.
func (in *Input) Len() int { return in.n }

// Usable reports whether endpoint i may get traffic, by kube-proxy's
// rule: the ready endpoints, or, when none is ready, the serving
// terminating ones. The first call of an evaluation scans the endpoints
// once.
func (in *Input) Usable(i int) bool {
	e := in.Endpoint(i)
	if in.anyReady == 0 {
		in.anyReady = 1
		for j := range in.n {
			if in.Endpoint(j).Ready() {
				in.anyReady = 2
				break
			}
		}
	}
	if in.anyReady == 2 {
		return e.Ready()
	}
	return e.Serving() && e.Terminating()
}

// Endpoint returns endpoint i, 0 <= i < Len(); it panics otherwise.
func (in *Input) Endpoint(i int) Endpoint {
	off := i * in.rec
	_ = in.recs[off] // bounds check: recs holds exactly Len() records
	return Endpoint{b: in.b, off: in.epOff + off}
}

// Endpoint is one candidate endpoint, read in place.
type Endpoint struct {
	b   []byte
	off int
}

// Endpoint flags.
const (
	FlagReady       = 1 << 0
	FlagServing     = 1 << 1
	FlagTerminating = 1 << 2
	FlagLocal       = 1 << 3
	FlagSameZone    = 1 << 4
	FlagHintZone    = 1 << 5
	FlagHintNode    = 1 << 6
	FlagAgeKnown    = 1 << 7
)

func (e Endpoint) u32(at int) uint32 { return u32at(e.b, e.off+at) }
func (e Endpoint) u64(at int) uint64 { return u64at(e.b, e.off+at) }

// Addr is the address as 16 bytes (IPv4 mapped into IPv6); Family is 4 or
// 6; Port the target port.
func (e Endpoint) Addr() [16]byte { return [16]byte(e.b[e.off : e.off+16]) }
func (e Endpoint) Port() uint16   { return u16at(e.b, e.off+16) }
func (e Endpoint) Family() uint8  { return e.b[e.off+18] }

// Flags holds the Flag* bits; the methods below test them.
func (e Endpoint) Flags() uint32       { return e.u32(20) }
func (e Endpoint) Ready() bool         { return e.Flags()&FlagReady != 0 }
func (e Endpoint) Serving() bool       { return e.Flags()&FlagServing != 0 }
func (e Endpoint) Terminating() bool   { return e.Flags()&FlagTerminating != 0 }
func (e Endpoint) Local() bool         { return e.Flags()&FlagLocal != 0 }
func (e Endpoint) SameZone() bool      { return e.Flags()&FlagSameZone != 0 }
func (e Endpoint) HintedForZone() bool { return e.Flags()&FlagHintZone != 0 }
func (e Endpoint) HintedForNode() bool { return e.Flags()&FlagHintNode != 0 }

// ID is the endpoint's stable identity, the same on every node and call.
func (e Endpoint) ID() uint64 { return e.u64(24) }

// Age is how long this node has known the endpoint, in nanoseconds; ok is
// false when unknown.
func (e Endpoint) Age() (ns uint64, ok bool) { return e.u64(32), e.Flags()&FlagAgeKnown != 0 }

// IPVS statistics of this node only (ActiveConns counts the connections
// through this node, not the endpoint's total), read every
// policies.statisticsInterval (10 s): an evaluation between two reads, one
// asked for with SetReevaluate or caused by a change, sees the last read.
func (e Endpoint) ActiveConns() uint32   { return e.u32(40) }
func (e Endpoint) InactiveConns() uint32 { return e.u32(44) }
func (e Endpoint) ConnRate() uint32      { return e.u32(48) }
func (e Endpoint) BytesInRate() uint64   { return e.u64(56) }
func (e Endpoint) BytesOutRate() uint64  { return e.u64(64) }

// NodeName and Zone say where the endpoint runs (empty when unknown);
// HintZones and HintNodes are its topology hints, comma-separated.
func (e Endpoint) NodeName() []byte  { return str(e.b, e.off+72) }
func (e Endpoint) Zone() []byte      { return str(e.b, e.off+80) }
func (e Endpoint) HintZones() []byte { return str(e.b, e.off+88) }
func (e Endpoint) HintNodes() []byte { return str(e.b, e.off+96) }

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }
