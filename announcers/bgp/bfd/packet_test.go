package bfd

import (
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestPacketRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		p    Packet
		hex  string
	}{{
		name: "down, slow start",
		p: Packet{State: Down, DetectMult: 3, MyDiscriminator: 0x01020304,
			DesiredMinTx: time.Second, RequiredMinRx: 300 * time.Millisecond},
		hex: "20" + "40" + "03" + "18" + "01020304" + "00000000" + "000f4240" + "000493e0" + "00000000",
	}, {
		name: "up with poll",
		p: Packet{State: Up, Poll: true, DetectMult: 3, MyDiscriminator: 7, YourDiscriminator: 9,
			DesiredMinTx: 300 * time.Millisecond, RequiredMinRx: 300 * time.Millisecond},
		hex: "20" + "e0" + "03" + "18" + "00000007" + "00000009" + "000493e0" + "000493e0" + "00000000",
	}, {
		name: "final, diag, C and D bits",
		p: Packet{Diag: DiagDetectionExpired, State: Init, Final: true, ControlPlaneIndependent: true, Demand: true,
			DetectMult: 255, MyDiscriminator: 0xffffffff, YourDiscriminator: 1,
			DesiredMinTx: time.Microsecond, RequiredMinRx: 0, RequiredMinEchoRx: 50 * time.Millisecond},
		hex: "21" + "9a" + "ff" + "18" + "ffffffff" + "00000001" + "00000001" + "00000000" + "0000c350",
	}, {
		name: "admin down",
		p:    Packet{Diag: DiagAdminDown, State: AdminDown, DetectMult: 1, MyDiscriminator: 5},
		hex:  "27" + "00" + "01" + "18" + "00000005" + "00000000" + "00000000" + "00000000" + "00000000",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.p.Marshal()
			if got := hex.EncodeToString(b); got != tt.hex {
				t.Errorf("Marshal = %s, want %s", got, tt.hex)
			}
			got, err := Unmarshal(b)
			if err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			if d := cmp.Diff(tt.p, got); d != "" {
				t.Errorf("round trip (-want +got):\n%s", d)
			}
		})
	}
}

func TestMarshalIntervals(t *testing.T) {
	p := Packet{State: Down, DetectMult: 1, MyDiscriminator: 1,
		DesiredMinTx: 1500 * time.Nanosecond, RequiredMinRx: 2 * time.Hour, RequiredMinEchoRx: -time.Second}
	got, err := Unmarshal(p.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{time.Microsecond, 4294967295 * time.Microsecond, 0}
	if d := cmp.Diff(want, []time.Duration{got.DesiredMinTx, got.RequiredMinRx, got.RequiredMinEchoRx}); d != "" {
		t.Errorf("intervals truncated and capped (-want +got):\n%s", d)
	}
}

// valid is a well-formed Up packet as hex, which the malformed cases
// change one field of.
const valid = "20c00318" + "00000007" + "00000009" + "000493e0" + "000493e0" + "00000000"

func withByte(t *testing.T, i int, v byte) []byte {
	t.Helper()
	b, err := hex.DecodeString(valid)
	if err != nil {
		t.Fatal(err)
	}
	b[i] = v
	return b
}

// TestUnmarshalRefuses: every discard rule of RFC 5880 §6.8.6 that needs
// no session.
func TestUnmarshalRefuses(t *testing.T) {
	ok, _ := hex.DecodeString(valid)
	zeroMine := withByte(t, 7, 0)
	zeroMine[4], zeroMine[5], zeroMine[6] = 0, 0, 0
	upNoYour := append([]byte(nil), ok...)
	copy(upNoYour[8:12], []byte{0, 0, 0, 0})
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrTruncated},
		{"23 bytes", ok[:23], ErrTruncated},
		{"version 0", withByte(t, 0, 0x00), ErrVersion},
		{"version 2", withByte(t, 0, 0x40), ErrVersion},
		{"version 7", withByte(t, 0, 0xe0), ErrVersion},
		{"length 23", withByte(t, 3, 23), ErrLength},
		{"length 0", withByte(t, 3, 0), ErrLength},
		{"length beyond payload", withByte(t, 3, 25), ErrTruncated},
		{"auth bit with length 24", withByte(t, 1, 0xc4), ErrLength},
		{"detect mult 0", withByte(t, 2, 0), ErrDetectMult},
		{"multipoint", withByte(t, 1, 0xc1), ErrMultipoint},
		{"my discriminator 0", zeroMine, ErrMyDiscriminator},
		{"up with your discriminator 0", upNoYour, ErrYourZero},
		{"poll and final", withByte(t, 1, 0xf0), ErrPollFinal},
	}
	auth := append(withByte(t, 1, 0xc4), 1, 2)
	auth[3] = 26
	tests = append(tests, struct {
		name string
		b    []byte
		want error
	}{"authentication present", auth, ErrAuth})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Unmarshal(tt.b)
			if !errors.Is(err, tt.want) {
				t.Errorf("Unmarshal = %+v, %v; want %v", p, err, tt.want)
			}
		})
	}
}

// TestUnmarshalAccepts: padding after the length and a Down or AdminDown
// packet without your discriminator are fine.
func TestUnmarshalAccepts(t *testing.T) {
	ok, _ := hex.DecodeString(valid)
	down := withByte(t, 1, 0x40)
	copy(down[8:12], []byte{0, 0, 0, 0})
	admin := withByte(t, 1, 0x00)
	copy(admin[8:12], []byte{0, 0, 0, 0})
	for name, b := range map[string][]byte{"padded": append(ok, 0, 0, 0, 0), "down, no your": down, "admindown, no your": admin} {
		if _, err := Unmarshal(b); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzUnmarshal: the decoder never panics, and what it accepts encodes
// back to the same first 24 bytes (the A bit never survives).
func FuzzUnmarshal(f *testing.F) {
	ok, _ := hex.DecodeString(valid)
	f.Add(ok)
	f.Add(Packet{State: Down, DetectMult: 3, MyDiscriminator: 1, DesiredMinTx: time.Second}.Marshal())
	f.Add(append(append([]byte(nil), ok...), 1, 2, 3))
	f.Add([]byte{})
	f.Add(ok[:23])
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Unmarshal(b)
		if err != nil {
			return
		}
		out := p.Marshal()
		want := append([]byte(nil), b[:headerLen]...)
		want[3] = headerLen // the length field: padding is dropped
		if d := cmp.Diff(want, out); d != "" {
			t.Fatalf("re-encoding %x (-want +got):\n%s", b, d)
		}
	})
}
