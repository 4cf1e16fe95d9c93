package bgp_test

import (
	"context"
	"log/slog"
	"net/netip"
	"time"

	"github.com/switchyard-lb/switchyard/announcers/bgp"
	"github.com/switchyard-lb/switchyard/core/model"
)

// A node in AS 64512 announcing one LoadBalancer address to its top-of-rack
// router. Without "// Output:" this example is compiled, not run.
func Example() {
	ctx := context.Background()
	s, err := bgp.New(ctx, bgp.Config{
		LocalASN: 64512,
		RouterID: netip.MustParseAddr("10.0.0.11"),
		Peers: []bgp.Peer{{
			Address:     netip.MustParseAddr("10.0.0.1"),
			ASN:         64513,
			HoldTime:    9 * time.Second,
			Communities: []string{"64512:100"},
		}},
	}, slog.Default())
	if err != nil {
		panic(err)
	}
	defer s.Close() // withdraws everything and ends the sessions

	web := model.ServiceKey{Namespace: "shop", Name: "web"}
	// The complete desired set; calling again with the same set sends nothing.
	_ = s.Announce(ctx, []model.Announcement{{Addr: netip.MustParseAddr("203.0.113.10"), Service: web}})
	// For switchyard_bgp_session_up{peer}.
	sessions, _ := s.Sessions(ctx)
	for _, x := range sessions {
		_ = x.Up
	}
	// An empty set withdraws every route.
	_ = s.Announce(ctx, nil)
}
