//go:build !linux

package ipvs

import "github.com/switchyard-lb/switchyard/core/model"

// NFTables needs Linux.
type NFTables struct{}

var _ Firewall = (*NFTables)(nil)

// NewNFTables returns a Firewall that fails outside Linux.
func NewNFTables() *NFTables { return &NFTables{} }

func (*NFTables) Close() error                 { return nil }
func (*NFTables) Untouched() bool              { return false }
func (*NFTables) connect() error               { return errUnsupported }
func (*NFTables) Sync(FirewallSpec) error      { return errUnsupported }
func (*NFTables) Update(FirewallDelta) error   { return errUnsupported }
func (*NFTables) Load() (FirewallState, error) { return FirewallState{}, errUnsupported }

func (*NFTables) RecordOwned(add, drop []model.VirtualServiceKey) error { return errUnsupported }
