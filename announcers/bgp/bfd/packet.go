package bfd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// State is a session state (RFC 5880 §4.1), as carried in the Sta field.
type State uint8

// Session states.
const (
	AdminDown State = 0
	Down      State = 1
	Init      State = 2
	Up        State = 3
)

func (s State) String() string {
	switch s {
	case AdminDown:
		return "admindown"
	case Down:
		return "down"
	case Init:
		return "init"
	case Up:
		return "up"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Diag is a diagnostic code (RFC 5880 §4.1): why the sender's session
// last left Up.
type Diag uint8

// Diagnostic codes used here (RFC 5880 §4.1 lists the rest).
const (
	DiagNone             Diag = 0
	DiagDetectionExpired Diag = 1
	DiagNeighborDown     Diag = 3
	DiagAdminDown        Diag = 7
	maxDiag              Diag = 31
)

var diagNames = []string{"none", "control detection time expired", "echo function failed",
	"neighbor signaled session down", "forwarding plane reset", "path down",
	"concatenated path down", "administratively down", "reverse concatenated path down"}

func (d Diag) String() string {
	if int(d) < len(diagNames) {
		return diagNames[d]
	}
	return fmt.Sprintf("diag(%d)", uint8(d))
}

const (
	headerLen     = 24
	authHeaderMin = 2
	version       = 1
)

// Packet is a BFD Control packet without an authentication section.
// Intervals travel in microseconds; Marshal truncates finer durations and
// caps them at the field's 4294 s.
type Packet struct {
	Diag  Diag
	State State
	// Poll, Final, ControlPlaneIndependent, AuthPresent, Demand and
	// Multipoint are the P, F, C, A, D and M bits.
	Poll, Final, ControlPlaneIndependent, AuthPresent, Demand, Multipoint bool
	DetectMult                                                            uint8
	MyDiscriminator, YourDiscriminator                                    uint32
	DesiredMinTx, RequiredMinRx, RequiredMinEchoRx                        time.Duration
}

// Errors of Unmarshal, one per discard rule of RFC 5880 §6.8.6 that needs
// no session. Test with errors.Is.
var (
	ErrTruncated       = errors.New("bfd: packet shorter than its length field or the 24-byte header")
	ErrVersion         = errors.New("bfd: version is not 1")
	ErrLength          = errors.New("bfd: length field below the minimum")
	ErrDetectMult      = errors.New("bfd: detect multiplier is zero")
	ErrMultipoint      = errors.New("bfd: multipoint bit set")
	ErrMyDiscriminator = errors.New("bfd: my discriminator is zero")
	ErrYourZero        = errors.New("bfd: your discriminator is zero in a packet that is not Down or AdminDown")
	ErrAuth            = errors.New("bfd: authentication present but none is configured")
	ErrPollFinal       = errors.New("bfd: poll and final bits both set")
)

// Marshal encodes p (24 bytes); the A bit is never set.
func (p Packet) Marshal() []byte {
	b := make([]byte, headerLen)
	b[0] = version<<5 | uint8(p.Diag&maxDiag)
	f := uint8(p.State&3) << 6
	for i, bit := range []bool{p.Poll, p.Final, p.ControlPlaneIndependent, false, p.Demand, p.Multipoint} {
		if bit {
			f |= 1 << (5 - i)
		}
	}
	b[1] = f
	b[2] = p.DetectMult
	b[3] = headerLen
	binary.BigEndian.PutUint32(b[4:], p.MyDiscriminator)
	binary.BigEndian.PutUint32(b[8:], p.YourDiscriminator)
	binary.BigEndian.PutUint32(b[12:], micros(p.DesiredMinTx))
	binary.BigEndian.PutUint32(b[16:], micros(p.RequiredMinRx))
	binary.BigEndian.PutUint32(b[20:], micros(p.RequiredMinEchoRx))
	return b
}

func micros(d time.Duration) uint32 {
	us := d / time.Microsecond
	if us <= 0 {
		return 0
	}
	if us > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(us)
}

// Unmarshal decodes a BFD Control packet, the whole UDP payload b, and
// refuses it by the discard rules of RFC 5880 §6.8.6 that need no
// session (and a Poll and Final together, which §6.8.7 forbids). Bytes
// past the length field (padding) are ignored. A packet with the A bit
// is refused: this implementation configures no authentication.
func Unmarshal(b []byte) (Packet, error) {
	var p Packet
	if len(b) < headerLen {
		return p, fmt.Errorf("%w: %d bytes", ErrTruncated, len(b))
	}
	if v := b[0] >> 5; v != version {
		return p, fmt.Errorf("%w: %d", ErrVersion, v)
	}
	p.Diag = Diag(b[0] & uint8(maxDiag))
	p.State = State(b[1] >> 6)
	p.Poll = b[1]&0x20 != 0
	p.Final = b[1]&0x10 != 0
	p.ControlPlaneIndependent = b[1]&0x08 != 0
	p.AuthPresent = b[1]&0x04 != 0
	p.Demand = b[1]&0x02 != 0
	p.Multipoint = b[1]&0x01 != 0
	p.DetectMult = b[2]
	length := int(b[3])
	minLen := headerLen
	if p.AuthPresent {
		minLen += authHeaderMin
	}
	if length < minLen {
		return p, fmt.Errorf("%w: %d, want at least %d", ErrLength, length, minLen)
	}
	if length > len(b) {
		return p, fmt.Errorf("%w: length field %d, payload %d bytes", ErrTruncated, length, len(b))
	}
	if p.DetectMult == 0 {
		return p, ErrDetectMult
	}
	if p.Multipoint {
		return p, ErrMultipoint
	}
	p.MyDiscriminator = binary.BigEndian.Uint32(b[4:])
	p.YourDiscriminator = binary.BigEndian.Uint32(b[8:])
	if p.MyDiscriminator == 0 {
		return p, ErrMyDiscriminator
	}
	if p.YourDiscriminator == 0 && p.State != Down && p.State != AdminDown {
		return p, fmt.Errorf("%w: state %s", ErrYourZero, p.State)
	}
	if p.AuthPresent {
		return p, ErrAuth
	}
	if p.Poll && p.Final {
		return p, ErrPollFinal
	}
	p.DesiredMinTx = time.Duration(binary.BigEndian.Uint32(b[12:])) * time.Microsecond
	p.RequiredMinRx = time.Duration(binary.BigEndian.Uint32(b[16:])) * time.Microsecond
	p.RequiredMinEchoRx = time.Duration(binary.BigEndian.Uint32(b[20:])) * time.Microsecond
	return p, nil
}
