package abi

// ABI version and the names a module must export or may import.
const (
	Major = 1
	Minor = 0

	ExportMarker   = "sy_abi_v1"
	ExportAlloc    = "sy_alloc"
	ExportEvaluate = "sy_evaluate"
	ExportOnTick   = "sy_on_tick"
	ExportMemory   = "memory"
	ExportInit     = "_initialize"

	ImportModule = "sy_v1"
	ImportLog    = "log"
)

// Input layout, v1.0.
const (
	InputHeaderSize = 120
	RecordSize      = 104

	inMajor          = 0
	inMinor          = 2
	inHeaderSize     = 4
	inTotalSize      = 8
	inEndpointCount  = 12
	inEndpointsOff   = 16
	inRecordSize     = 20
	inStringsOff     = 24
	inStringsLen     = 28
	inNow            = 32
	inNamespace      = 40
	inName           = 48
	inPortName       = 56
	inPort           = 64
	inProtocol       = 66
	inServiceType    = 67
	inNodePort       = 68
	inExternalPolicy = 70
	inInternalPolicy = 71
	inNodeName       = 72
	inNodeZone       = 80
	inParams         = 88
	inDistribution   = 96
	inSchedulerHint  = 104
	inServiceFlags   = 112

	recAddr         = 0
	recPort         = 16
	recFamily       = 18
	recProtocol     = 19
	recFlags        = 20
	recID           = 24
	recAge          = 32
	recActive       = 40
	recInactive     = 44
	recConnRate     = 48
	recBytesInRate  = 56
	recBytesOutRate = 64
	recNodeName     = 72
	recZone         = 80
	recHintZones    = 88
	recHintNodes    = 96
)

// Endpoint flags (input record field "flags").
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

// ServiceFlagAffinity is bit 0 of the input header's service_flags.
const ServiceFlagAffinity = 1 << 0

// Output layout, v1.0.
const (
	OutputHeaderSize = 40

	outMajor      = 0
	outMinor      = 2
	outHeaderSize = 4
	outTotalSize  = 8
	outCount      = 12
	outWeightsOff = 16
	outReevaluate = 20
	outScheduler  = 24
	outFlags      = 32
)

// Limits.
const (
	MaxEndpoints    = 10000
	MaxInputSize    = 8 << 20
	MaxWeight       = 65535
	MaxSchedulerLen = 16
	MaxFlags        = 4
	MinReevaluateMS = 1000
	MaxReevaluateMS = 3600000
	// outputSlack is what an output may hold besides its weights.
	outputSlack = 65536
)

// MaxOutputSize is the largest output accepted for n endpoints.
func MaxOutputSize(n int) int { return outputSlack + 4*n }

// Schedulers lists the IPVS schedulers an output may name.
var Schedulers = []string{"rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "mh", "fo", "ovf"}

// schedulerFlags lists the flags each scheduler accepts.
var schedulerFlags = map[string][]string{
	"sh": {"sh-fallback", "sh-port"},
	"mh": {"mh-fallback", "mh-port"},
}
