//go:build !linux

package ipvs

// NFTables needs Linux.
type NFTables struct{}

var _ Firewall = (*NFTables)(nil)

// NewNFTables returns a Firewall that fails outside Linux.
func NewNFTables() *NFTables { return &NFTables{} }

func (*NFTables) Close() error                 { return nil }
func (*NFTables) Sync(FirewallSpec) error      { return errUnsupported }
func (*NFTables) Load() (FirewallState, error) { return FirewallState{}, errUnsupported }
