package arp

// ParseNDP is parseNDP, for the fuzz target in package arp_test.
var ParseNDP = parseNDP
