package abi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/switchyard-lb/switchyard/core/plugin"
)

var le = binary.LittleEndian

// Encode writes the ABI v1 input for in into dst (overwriting it),
// reusing dst's capacity, and returns the encoded bytes. Pass the previous
// result back as dst to encode without allocating.
func Encode(dst []byte, in *plugin.PolicyInput) ([]byte, error) {
	if in == nil || in.Service == nil {
		return dst[:0], errors.New("encode policy input: no service")
	}
	n := len(in.Endpoints)
	if n > MaxEndpoints {
		return dst[:0], fmt.Errorf("encode policy input: %d endpoints, limit %d", n, MaxEndpoints)
	}
	var nodeName, nodeZone string
	if in.Node != nil {
		nodeName, nodeZone = in.Node.Name, in.Node.Zone
	}
	svc := in.Service

	strLen := len(svc.Key.Namespace) + len(svc.Key.Name) + len(in.Port.Name) + len(nodeName) +
		len(nodeZone) + len(in.Params) + len(svc.TrafficDistribution) + len(svc.Scheduler)
	for i := range in.Endpoints {
		ep := &in.Endpoints[i]
		strLen += len(ep.NodeName) + len(ep.Zone) + joinedLen(ep.HintZones) + joinedLen(ep.HintNodes)
	}
	stringsOff := InputHeaderSize + n*RecordSize
	total := stringsOff + strLen
	if total > MaxInputSize {
		return dst[:0], fmt.Errorf("encode policy input: %d bytes, limit %d", total, MaxInputSize)
	}
	b := slices.Grow(dst[:0], total)[:total]
	clear(b[:stringsOff])

	w := writer{b: b, next: stringsOff}
	le.PutUint16(b[inMajor:], Major)
	le.PutUint16(b[inMinor:], Minor)
	le.PutUint32(b[inHeaderSize:], InputHeaderSize)
	le.PutUint32(b[inTotalSize:], uint32(total))
	le.PutUint32(b[inEndpointCount:], uint32(n))
	le.PutUint32(b[inEndpointsOff:], InputHeaderSize)
	le.PutUint32(b[inRecordSize:], RecordSize)
	le.PutUint32(b[inStringsOff:], uint32(stringsOff))
	le.PutUint32(b[inStringsLen:], uint32(strLen))
	le.PutUint64(b[inNow:], uint64(in.Now.UnixNano()))
	w.str(inNamespace, svc.Key.Namespace)
	w.str(inName, svc.Key.Name)
	w.str(inPortName, in.Port.Name)
	le.PutUint16(b[inPort:], in.Port.Port)
	// model's enums use the ABI's numbering (1-based, 0 unknown).
	b[inProtocol] = byte(in.Port.Protocol)
	b[inServiceType] = byte(svc.Type)
	le.PutUint16(b[inNodePort:], in.Port.NodePort)
	b[inExternalPolicy] = byte(svc.ExternalTrafficPolicy)
	b[inInternalPolicy] = byte(svc.InternalTrafficPolicy)
	w.str(inNodeName, nodeName)
	w.str(inNodeZone, nodeZone)
	w.bytes(inParams, in.Params)
	w.str(inDistribution, svc.TrafficDistribution)
	w.str(inSchedulerHint, svc.Scheduler)
	var sflags uint32
	if svc.AffinityTimeout > 0 {
		sflags |= ServiceFlagAffinity
	}
	le.PutUint32(b[inServiceFlags:], sflags)

	for i := range in.Endpoints {
		ep := &in.Endpoints[i]
		if !ep.Addr.IsValid() {
			return dst[:0], fmt.Errorf("encode policy input: endpoint %d has no address", i)
		}
		off := InputHeaderSize + i*RecordSize
		r := b[off : off+RecordSize]
		a16 := ep.Addr.As16()
		copy(r[recAddr:], a16[:])
		le.PutUint16(r[recPort:], ep.Port)
		r[recFamily] = 6
		if ep.Addr.Is4() {
			r[recFamily] = 4
		}
		proto := ep.Protocol
		if proto == 0 {
			proto = in.Port.Protocol
		}
		r[recProtocol] = byte(proto)
		flags := endpointFlags(ep, nodeName, nodeZone)
		if !ep.FirstSeen.IsZero() {
			flags |= FlagAgeKnown
			if age := in.Now.Sub(ep.FirstSeen); age > 0 {
				le.PutUint64(r[recAge:], uint64(age))
			}
		}
		le.PutUint32(r[recFlags:], flags)
		le.PutUint64(r[recID:], EndpointID(a16, ep.Port, byte(proto)))
		le.PutUint32(r[recActive:], ep.Stats.ActiveConns)
		le.PutUint32(r[recInactive:], ep.Stats.InactiveConns)
		le.PutUint32(r[recConnRate:], ep.Stats.ConnRate)
		le.PutUint64(r[recBytesInRate:], ep.Stats.BytesInRate)
		le.PutUint64(r[recBytesOutRate:], ep.Stats.BytesOutRate)
		w.str(off+recNodeName, ep.NodeName)
		w.str(off+recZone, ep.Zone)
		w.joined(off+recHintZones, ep.HintZones)
		w.joined(off+recHintNodes, ep.HintNodes)
	}
	return b, nil
}

func endpointFlags(ep *plugin.PolicyEndpoint, nodeName, nodeZone string) uint32 {
	var f uint32
	if ep.Ready {
		f |= FlagReady
	}
	if ep.Serving {
		f |= FlagServing
	}
	if ep.Terminating {
		f |= FlagTerminating
	}
	if ep.Local {
		f |= FlagLocal
	}
	if ep.SameZone {
		f |= FlagSameZone
	}
	if nodeZone != "" && slices.Contains(ep.HintZones, nodeZone) {
		f |= FlagHintZone
	}
	if nodeName != "" && slices.Contains(ep.HintNodes, nodeName) {
		f |= FlagHintNode
	}
	return f
}

// EndpointID is the stable identity of an endpoint: FNV-1a 64 over the 16
// address bytes, the port (little-endian) and the protocol.
func EndpointID(addr [16]byte, port uint16, proto byte) uint64 {
	const offset64, prime64 = 14695981039346656037, 1099511628211
	h := uint64(offset64)
	for _, c := range addr {
		h = (h ^ uint64(c)) * prime64
	}
	h = (h ^ uint64(byte(port))) * prime64
	h = (h ^ uint64(byte(port>>8))) * prime64
	h = (h ^ uint64(proto)) * prime64
	return h
}

func joinedLen(ss []string) int {
	if len(ss) == 0 {
		return 0
	}
	n := len(ss) - 1
	for _, s := range ss {
		n += len(s)
	}
	return n
}

// writer places strings in the string table and their refs in the
// header or records.
type writer struct {
	b    []byte
	next int
}

func (w *writer) ref(at, n int) {
	if n == 0 {
		le.PutUint64(w.b[at:], 0)
		return
	}
	le.PutUint32(w.b[at:], uint32(w.next))
	le.PutUint32(w.b[at+4:], uint32(n))
}

func (w *writer) str(at int, s string) {
	w.ref(at, len(s))
	w.next += copy(w.b[w.next:], s)
}

func (w *writer) bytes(at int, s []byte) {
	w.ref(at, len(s))
	w.next += copy(w.b[w.next:], s)
}

func (w *writer) joined(at int, ss []string) {
	w.ref(at, joinedLen(ss))
	for i, s := range ss {
		if i > 0 {
			w.b[w.next] = ','
			w.next++
		}
		w.next += copy(w.b[w.next:], s)
	}
}
