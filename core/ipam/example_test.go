package ipam_test

import (
	"errors"
	"fmt"

	"github.com/switchyard-lb/switchyard/core/ipam"
	"github.com/switchyard-lb/switchyard/core/model"
)

func Example() {
	alloc, err := ipam.New([]ipam.Pool{
		{Name: "public", Addresses: []string{"192.0.2.0/24", "2001:db8::/64"}, AutoAssign: true, AvoidBuggyIPs: true},
		{Name: "reserved", Addresses: []string{"198.51.100.10-198.51.100.20"}},
	})
	if err != nil {
		panic(err)
	}
	dns := func(name string, p model.Protocol) ipam.Request {
		return ipam.Request{
			Key:        model.ServiceKey{Namespace: "infra", Name: name},
			SharingKey: "dns",
			Ports:      []ipam.Port{{Port: 53, Protocol: p}},
			Families:   []ipam.Family{ipam.IPv4, ipam.IPv6},
		}
	}
	ips, _ := alloc.Allocate(dns("dns-udp", model.UDP))
	fmt.Println("dns-udp:", ips)
	ips, _ = alloc.Allocate(dns("dns-tcp", model.TCP))
	fmt.Println("dns-tcp:", ips)

	web := ipam.Request{Key: model.ServiceKey{Namespace: "shop", Name: "web"}, Pool: "reserved"}
	ips, _ = alloc.Allocate(web)
	fmt.Println("web:", ips)

	_, err = alloc.Allocate(ipam.Request{
		Key:          model.ServiceKey{Namespace: "shop", Name: "api"},
		RequestedIPs: ips,
	})
	fmt.Println(errors.Is(err, ipam.ErrConflict), err)
	for _, s := range alloc.Stats() {
		fmt.Printf("%s: %d of %d used\n", s.Pool, s.Used, s.Total)
	}
	// Output:
	// dns-udp: [192.0.2.1 2001:db8::]
	// dns-tcp: [192.0.2.1 2001:db8::]
	// web: [198.51.100.10]
	// true allocate addresses for shop/api: address conflict: 198.51.100.10 is held by shop/web, sharing key "" (this Service: "")
	// public: 2 of 18446744073709551615 used
	// reserved: 1 of 11 used
}
