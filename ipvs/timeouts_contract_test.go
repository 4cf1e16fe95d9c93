package ipvs_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/ipvstest"
)

func TestTimeoutsContractFake(t *testing.T) {
	testTimeoutsContract(t, ipvstest.NewFake())
}

func TestTimeoutsContractNetlink(t *testing.T) {
	testTimeoutsContract(t, labKernel(t))
}

// testTimeoutsContract expects a kernel whose timeouts nobody changed
// since ip_vs loaded, and leaves them as it found them.
func testTimeoutsContract(t *testing.T, k ipvs.Kernel) {
	orig, err := k.Timeouts()
	if err != nil {
		t.Fatalf("Timeouts: %v", err)
	}
	if diff := cmp.Diff(ipvstest.DefaultTimeouts, orig); diff != "" {
		t.Errorf("timeouts of a fresh ip_vs (-want +got):\n%s", diff)
	}
	t.Cleanup(func() {
		if err := k.SetTimeouts(orig); err != nil {
			t.Errorf("restore timeouts: %v", err)
		}
	})
	s := time.Second
	steps := []struct {
		name    string
		set     ipvs.Timeouts
		wantErr bool
		want    ipvs.Timeouts
	}{
		{name: "tcp only", set: ipvs.Timeouts{TCP: 3600 * s}, want: ipvs.Timeouts{TCP: 3600 * s, TCPFin: orig.TCPFin, UDP: orig.UDP}},
		{name: "tcpfin and udp", set: ipvs.Timeouts{TCPFin: 30 * s, UDP: 45 * s}, want: ipvs.Timeouts{TCP: 3600 * s, TCPFin: 30 * s, UDP: 45 * s}},
		{name: "zero leaves all", set: ipvs.Timeouts{}, want: ipvs.Timeouts{TCP: 3600 * s, TCPFin: 30 * s, UDP: 45 * s}},
		{name: "sub-second", set: ipvs.Timeouts{UDP: 1500 * time.Millisecond}, wantErr: true, want: ipvs.Timeouts{TCP: 3600 * s, TCPFin: 30 * s, UDP: 45 * s}},
		{name: "negative", set: ipvs.Timeouts{TCP: -s}, wantErr: true, want: ipvs.Timeouts{TCP: 3600 * s, TCPFin: 30 * s, UDP: 45 * s}},
	}
	for _, st := range steps {
		err := k.SetTimeouts(st.set)
		if (err != nil) != st.wantErr {
			t.Fatalf("%s: SetTimeouts(%+v) = %v, want error: %t", st.name, st.set, err, st.wantErr)
		}
		got, err := k.Timeouts()
		if err != nil {
			t.Fatalf("%s: Timeouts: %v", st.name, err)
		}
		if diff := cmp.Diff(st.want, got); diff != "" {
			t.Errorf("%s: timeouts (-want +got):\n%s", st.name, diff)
		}
	}
}
